package whatsapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"google.golang.org/protobuf/proto"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// Outbound. A core.MessageRef is "<chat JID>/<message id>".
//
//   - Text over MaxMessageLen is split on line boundaries (kit.SplitText);
//     a retried Send skips parts already sent (kit.Splits).
//   - A card is one text message (OutMessage.CardText, which the outbox
//     renders for a channel without buttons: numbered choices and
//     "approve <id>") and, in poll mode while it is open, a poll whose
//     options are its choice labels. Send returns the text message's ref.
//   - Update edits the text message while the card is younger than the
//     edit window, else replies quoting it; a card that moved to new
//     choices (the confirm step) gets a new poll.
//   - Every message waits for the limiter (per chat, per group, global).

func ref(chat types.JID, id types.MessageID) core.MessageRef {
	return core.MessageRef(chat.String() + "/" + id)
}

func parseRef(r core.MessageRef) (types.JID, types.MessageID, bool) {
	c, id, ok := strings.Cut(string(r), "/")
	if !ok || id == "" {
		return types.JID{}, "", false
	}
	j, err := types.ParseJID(c)
	if err != nil || j.User == "" {
		return types.JID{}, "", false
	}
	return j, id, true
}

func (a *Adapter) chatOfConv(conv core.ConversationID) (types.JID, error) {
	rest, ok := strings.CutPrefix(string(conv), string(a.cfg.Name)+":")
	if !ok {
		return types.JID{}, kit.Permanentf("whatsapp: conversation %q is not a %s conversation", conv, a.cfg.Name)
	}
	j, err := types.ParseJID(rest)
	if err != nil || j.User == "" {
		return types.JID{}, kit.Permanentf("whatsapp: conversation %q does not name a chat", conv)
	}
	return j, nil
}

// Send implements core.Channel.
func (a *Adapter) Send(ctx context.Context, m core.OutMessage) (core.MessageRef, error) {
	chat, err := a.chatOfConv(m.Conversation)
	if err != nil {
		return "", err
	}
	if m.Card != nil && m.CardText == "" {
		return "", kit.Permanentf("whatsapp: card %s came without its plain text (core/outbox renders it)", m.Card.ID)
	}
	parts := kit.TextParts(m.Text, MaxMessageLen, func(rune) int { return 1 })
	textParts := len(parts)
	if m.Card != nil {
		parts = append(parts, m.CardText)
	}
	return kit.SendParts(a.splits, m, parts, textParts, "whatsapp", func(i int, p string) (core.MessageRef, error) {
		r, err := a.sendText(ctx, chat, p, nil)
		if err != nil || i < textParts || m.Card == nil {
			return r, err
		}
		return r, a.cardSent(ctx, chat, r, m.Card, p)
	})
}

// cardSent records a card message and, in poll mode, sends its poll.
func (a *Adapter) cardSent(ctx context.Context, chat types.JID, r core.MessageRef, c *cards.Card, shown string) error {
	_, id, _ := parseRef(r)
	rec := cardRec{Chat: chat.String(), ID: id, Card: c.ID, SentAt: a.cfg.Now(), Shown: shown}
	if c.Open() {
		for _, ch := range c.Choices {
			rec.Choices = append(rec.Choices, ch.ID)
		}
	}
	if err := a.recs.putCard(ctx, rec); err != nil {
		a.log.Warn("whatsapp: could not record the card message; replies quoting it will not be understood after a restart", slog.Any("err", err))
	}
	if a.cfg.Cards == CardsPoll && c.Open() {
		return a.sendPoll(ctx, chat, id, c)
	}
	return nil
}

// pollOptions are a card's choices as poll options: numbered, so that two
// labels never collide, and within WhatsApp's option length.
func pollOptions(c *cards.Card) (names []string, byHash map[string]string) {
	byHash = map[string]string{}
	for i, ch := range c.Choices {
		n := truncate(fmt.Sprintf("%d. %s", i+1, ch.Label), maxPollOption)
		names = append(names, n)
		byHash[optionHash(n)] = ch.ID
	}
	return names, byHash
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func (a *Adapter) sendPoll(ctx context.Context, chat types.JID, cardMsg types.MessageID, c *cards.Card) error {
	a.pollsSending.Add(1)
	defer a.pollsSending.Add(-1)
	names, byHash := pollOptions(c)
	msg := a.cli.BuildPollCreation(truncate(c.Intent, maxPollName), names, 1)
	resp, err := a.send(ctx, chat, msg)
	if err != nil {
		return err
	}
	if err := a.recs.putPoll(ctx, resp.ID, pollRec{Chat: chat.String(), Card: c.ID, CardMsg: cardMsg, Options: byHash}); err != nil {
		a.log.Warn("whatsapp: could not record the poll; votes on it will not be understood after a restart", slog.Any("err", err))
	}
	return nil
}

// sendText sends one text, quoting a message when quote is set.
func (a *Adapter) sendText(ctx context.Context, chat types.JID, text string, quote *waE2E.ContextInfo) (core.MessageRef, error) {
	msg := &waE2E.Message{Conversation: proto.String(text)}
	if quote != nil {
		msg = &waE2E.Message{ExtendedTextMessage: &waE2E.ExtendedTextMessage{Text: proto.String(text), ContextInfo: quote}}
	}
	resp, err := a.send(ctx, chat, msg)
	if err != nil {
		return "", err
	}
	return ref(chat, resp.ID), nil
}

func (a *Adapter) send(ctx context.Context, chat types.JID, msg *waE2E.Message) (whatsmeow.SendResponse, error) {
	release, err := a.lim.Wait(ctx, chat.String())
	if err != nil {
		return whatsmeow.SendResponse{}, fmt.Errorf("whatsapp: send: waiting for the rate limit: %w", err)
	}
	defer release()
	if a.cfg.Typing && (msg.Conversation != nil || msg.ExtendedTextMessage != nil) {
		// A courtesy only: a failed presence never holds a reply back.
		if err := a.cli.SendTyping(ctx, chat, true); err != nil {
			a.log.Debug("whatsapp: typing presence failed", slog.Any("err", err))
		}
	}
	resp, err := a.cli.SendMessage(ctx, chat, msg)
	if err != nil {
		return resp, mapSendError(err)
	}
	a.rememberSent(resp.ID)
	return resp, nil
}

// mapSendError classifies whatsmeow's errors for the outbox: a request
// that can never succeed is permanent; not connected, timeouts and server
// errors are retried.
func mapSendError(err error) error {
	switch {
	case errors.Is(err, whatsmeow.ErrUnknownServer), errors.Is(err, whatsmeow.ErrRecipientADJID),
		errors.Is(err, whatsmeow.ErrBroadcastListUnsupported), errors.Is(err, whatsmeow.ErrNotLoggedIn):
		return kit.Permanentf("whatsapp: send: %w", err)
	}
	return fmt.Errorf("whatsapp: send: %w", err)
}

// Update implements core.Channel.
func (a *Adapter) Update(ctx context.Context, r core.MessageRef, m core.OutMessage) error {
	chat, id, ok := parseRef(r)
	if !ok {
		return kit.Permanentf("whatsapp: %q is not a WhatsApp message reference", r)
	}
	text := m.Text
	if m.Card != nil {
		text = m.CardText
	}
	if strings.TrimSpace(text) == "" {
		return kit.Permanent(errors.New("whatsapp: nothing to show (empty text and no card)"))
	}
	if parts := kit.SplitText(text, MaxMessageLen, func(rune) int { return 1 }); len(parts) > 1 {
		text = parts[0]
	}
	rec, known := a.recs.card(ctx, id)
	if known && rec.Shown == text {
		return nil // editing to identical content is not an error
	}
	sentAt := rec.SentAt
	withinWindow := known && !a.cfg.NeverEdit && a.cfg.Now().Sub(sentAt) < a.cfg.EditWindow
	if withinWindow {
		edit := a.cli.BuildEdit(chat, id, &waE2E.Message{Conversation: proto.String(text)})
		if _, err := a.send(ctx, chat, edit); err != nil {
			return err
		}
	} else {
		// Past WhatsApp's edit window (or a message this process cannot
		// date): a reply quoting the original.
		pn, _ := a.cli.Own()
		q := &waE2E.ContextInfo{StanzaID: proto.String(id), Participant: proto.String(pn.String()),
			QuotedMessage: &waE2E.Message{Conversation: proto.String(rec.Shown)}}
		if _, err := a.sendText(ctx, chat, text, q); err != nil {
			return err
		}
	}
	if !known {
		return nil
	}
	prevChoices := rec.Choices
	rec.Shown, rec.Choices = text, nil
	if m.Card != nil && m.Card.Open() {
		for _, ch := range m.Card.Choices {
			rec.Choices = append(rec.Choices, ch.ID)
		}
	}
	if err := a.recs.putCard(ctx, rec); err != nil {
		a.log.Warn("whatsapp: could not record the card's new state", slog.Any("err", err))
	}
	if a.cfg.Cards == CardsPoll && m.Card != nil && m.Card.Open() && !equal(prevChoices, rec.Choices) {
		// The card moved on (the confirm step): polls cannot be edited,
		// so its new choices come as a new poll.
		return a.sendPoll(ctx, chat, id, m.Card)
	}
	return nil
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// DeleteMessage implements core.MessageDeleter by revoking ("delete for
// everyone"). WhatsApp lets an account revoke only its own messages — a
// credential pasted in the owner's own "Message yourself" chat when Silas
// is linked to the owner's number — and, as group admin, others' in that
// group. Another person's message in a direct chat cannot be removed:
// that is a permanent error, and the reply still asks to revoke the
// credential.
func (a *Adapter) DeleteMessage(ctx context.Context, conv core.ConversationID, platformMessageID string) error {
	chat, err := a.chatOfConv(conv)
	if err != nil {
		return err
	}
	sender, id, ok := parseMessageID(platformMessageID)
	if !ok {
		return kit.Permanentf("whatsapp: %q is not a message id", platformMessageID)
	}
	me := a.me()
	if !me.is(sender) && chat.Server != types.GroupServer {
		return kit.Permanentf("whatsapp: WhatsApp lets no one delete another person's message in a direct chat")
	}
	target := sender
	if me.is(sender) {
		target = types.EmptyJID // whatsmeow: our own message
	}
	_, err = a.send(ctx, chat, a.cli.BuildRevoke(chat, target, id))
	return err
}

func parseMessageID(s string) (types.JID, types.MessageID, bool) { return parsePlatformID(s) }

// AnswerTap implements core.TapAnswerer: the card's new state is an
// Update of its message (an edit, or a reply quoting it past the edit
// window). WhatsApp has no notice only the tapper sees, so the notice is
// a chat message, and only when it matters: a refused text reply
// ("approve <id>", "1") is answered; a refused poll vote is answered only
// when the voter may not decide — a changed vote after the decision or a
// vote on an expired card changes nothing, silently (the card already
// shows its state).
func (a *Adapter) AnswerTap(ctx context.Context, ans core.TapAnswer) error {
	if ans.Card != nil {
		if err := a.Update(ctx, ans.Ref, core.OutMessage{Conversation: ans.Conversation, Card: ans.Card, CardText: ans.CardText}); err != nil {
			return err
		}
	}
	if ans.Refused == "" || strings.TrimSpace(ans.Text) == "" {
		return nil
	}
	if strings.HasPrefix(ans.EventID, voteEventPrefix) && ans.Refused != core.RefusedNotApprover {
		return nil
	}
	chat, err := a.chatOfConv(ans.Conversation)
	if err != nil {
		return err
	}
	_, err = a.sendText(ctx, chat, ans.Text, nil)
	return err
}
