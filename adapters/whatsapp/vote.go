package whatsapp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"time"

	"go.mau.fi/whatsmeow/types/events"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
)

// optionHash is how a poll vote names an option: the SHA-256 of its name
// (whatsmeow.HashPollOptions), in hex here.
func optionHash(name string) string {
	h := sha256.Sum256([]byte(name))
	return hex.EncodeToString(h[:])
}

// voteEventPrefix marks a vote's event id, so a refusal can be answered
// the way votes are (only a non-approver is told).
const voteEventPrefix = "v"

// onVote turns a vote on one of our polls into a tap. A vote for no
// option (withdrawn), for several, for an option the poll does not have,
// on a poll we do not know, or that cannot be decrypted changes nothing.
// Whether the voter may decide, and whether the card is still open, is the
// core's question: it refuses a changed vote after the decision and a
// non-approver's vote like any tap.
func (a *Adapter) onVote(ctx context.Context, e *events.Message) bool {
	pu := e.Message.GetPollUpdateMessage()
	key := pu.GetPollCreationMessageKey()
	p, ok := a.recs.poll(ctx, key.GetID())
	if !ok && a.pollSendsSettled(ctx) {
		// The vote overtook its poll's record (stored once the send
		// returned): look again.
		p, ok = a.recs.poll(ctx, key.GetID())
	}
	if !ok {
		a.log.Debug("whatsapp: vote on a poll Silas does not know", slog.String("poll", key.GetID()))
		return true
	}
	vote, err := a.cli.DecryptPollVote(ctx, e)
	if err != nil {
		a.log.Warn("whatsapp: could not decrypt a poll vote", slog.Any("err", err))
		return true
	}
	sel := vote.GetSelectedOptions()
	if len(sel) != 1 {
		a.log.Debug("whatsapp: vote withdrawn or for several options: ignored", slog.Int("options", len(sel)))
		return true
	}
	choice, ok := p.Options[hex.EncodeToString(sel[0])]
	if !ok {
		a.log.Info("whatsapp: vote for an option the card does not offer: ignored")
		return true
	}
	chat, ok := chatOf(e.Info, a.lids(ctx))
	sender, ok2 := identityOf(e.Info.Sender, e.Info.SenderAlt, a.lids(ctx))
	if !ok || !ok2 || chat.String() != p.Chat {
		a.log.Info("whatsapp: vote from outside the poll's chat or without a sender: ignored")
		return true
	}
	kind := core.ChatDirect
	if e.Info.IsGroup {
		kind = core.ChatGroup
	}
	t := core.Turn{Channel: a.cfg.Name, Conversation: conversation(a.cfg.Name, chat), Sender: sender,
		SenderName: displayName(e.Info.PushName), EventID: voteEventPrefix + eventID(e.Info), ChatKind: kind,
		Evidence: core.Evidence{Authenticated: true, Method: MethodE2E}}
	t.Tap = &core.Tap{Card: p.Card, Choice: choice}
	return a.deliver(ctx, t)
}

// textTap reads a text reply as a tap: "approve <card id>" anywhere, and
// "1"/"2"/a choice id when the reply quotes a card message.
func (a *Adapter) textTap(ctx context.Context, text, quoted string) (core.Tap, bool) {
	var q *kit.Quoted
	if quoted != "" {
		if c, ok := a.recs.card(ctx, quoted); ok && len(c.Choices) > 0 {
			q = &kit.Quoted{Card: c.Card, Choices: c.Choices}
		}
	}
	return kit.ParseTextTap(text, q)
}

// pollSendsSettled waits (up to 10 s) until no poll is being sent; it
// reports whether one was.
func (a *Adapter) pollSendsSettled(ctx context.Context) bool {
	if a.pollsSending.Load() == 0 {
		return false
	}
	for i := 0; i < 200 && a.pollsSending.Load() > 0; i++ {
		if kit.SleepCtx(ctx, 50*time.Millisecond) != nil {
			break
		}
	}
	return true
}
