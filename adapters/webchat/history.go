package webchat

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// HistoryReader is the web chat's read port on the core's storage
// (implemented by *store.Store): the conversation as stored, so what a
// browser is shown never depends on this process having seen it.
type HistoryReader interface {
	// Transcript returns the newest n messages of conv on channel ch,
	// oldest first.
	Transcript(ctx context.Context, ch core.ChannelName, conv core.ConversationID, n int) ([]core.TranscriptEntry, error)
	// TranscriptCard returns the message carrying card id in conv, in its
	// newest state; core.ErrNotFound when there is none.
	TranscriptCard(ctx context.Context, ch core.ChannelName, conv core.ConversationID, id cards.ID) (core.TranscriptEntry, error)
}

// historyTimeout bounds the reads behind a replay or a get_card.
const historyTimeout = 10 * time.Second

// botMessageID is the message_id of the bot message the core names key
// (live and replayed alike); userMessageID that of a stored user turn.
// The prefixes keep the two kinds apart.
func botMessageID(key string) string { return "b-" + key }

func userMessageID(seq int64) string { return "u-" + strconv.FormatInt(seq, 10) }

// entryFrame is the replay frame of a stored transcript entry.
func entryFrame(e core.TranscriptEntry) messageFrame {
	f := messageFrame{Type: "message", Text: e.Text, Card: e.Card, At: e.At.UTC().Format(time.RFC3339), Replay: true}
	if e.FromUser {
		f.MessageID, f.From = userMessageID(e.Seq), fromUser
		// The page matches its own unacknowledged echo by this id.
		if id, ok := strings.CutPrefix(e.EventID, "m:"); ok && clientIDRe.MatchString(id) {
			f.ClientID = id
		}
		return f
	}
	f.MessageID, f.From = botMessageID(e.MessageKey), fromBot
	return f
}

// replay returns the encoded replay frames, oldest first: from the stored
// transcript, or the in-memory one without Config.Transcript.
func (a *Adapter) replay(ctx context.Context) ([][]byte, error) {
	var frames []messageFrame
	if a.cfg.Transcript == nil {
		a.mu.Lock()
		for _, e := range a.history {
			f := e.frame
			f.Type, f.Replay = "message", true
			frames = append(frames, f)
		}
		a.mu.Unlock()
	} else {
		ctx, cancel := context.WithTimeout(ctx, historyTimeout)
		defer cancel()
		list, err := a.cfg.Transcript.Transcript(ctx, a.cfg.Name, a.conv, a.cfg.History)
		if err != nil {
			return nil, err
		}
		for _, e := range list {
			frames = append(frames, entryFrame(e))
		}
	}
	out := make([][]byte, 0, len(frames))
	for _, f := range frames {
		b, err := encodeMessageFrame(f)
		if err != nil {
			a.log.Error("replay: marshal frame", slog.String("message", f.MessageID), slog.Any("err", err))
			continue
		}
		out = append(out, b)
	}
	return out, nil
}

// cardState answers a get_card frame: the message carrying the card, in
// its current state, as a card_state frame with the request's id; or an
// error frame not_found (also for a card of another conversation).
func (a *Adapter) cardState(ctx context.Context, f ClientFrame) []byte {
	var mf messageFrame
	found := false
	if a.cfg.Transcript == nil {
		a.mu.Lock()
		for _, e := range a.history {
			if e.frame.Card != nil && string(e.frame.Card.ID) == f.CardID {
				mf, found = e.frame, true
			}
		}
		a.mu.Unlock()
	} else {
		ctx, cancel := context.WithTimeout(ctx, historyTimeout)
		defer cancel()
		e, err := a.cfg.Transcript.TranscriptCard(ctx, a.cfg.Name, a.conv, cards.ID(f.CardID))
		switch {
		case errors.Is(err, core.ErrNotFound):
		case err != nil:
			a.log.Error("get_card: read failed", slog.String("card", f.CardID), slog.Any("err", err))
			b, _ := json.Marshal(errorFrame{Type: "error", ID: f.ID, Code: "internal", Message: "could not read the card; retry"})
			return b
		default:
			mf, found = entryFrame(e), true
		}
	}
	if !found {
		b, _ := json.Marshal(errorFrame{Type: "error", ID: f.ID, Code: "not_found", Message: "no card " + f.CardID + " in this conversation"})
		return b
	}
	mf.Type, mf.ID, mf.Replay = "card_state", f.ID, false
	b, err := encodeMessageFrame(mf)
	if err != nil {
		a.log.Error("get_card: marshal frame", slog.String("card", f.CardID), slog.Any("err", err))
		b, _ = json.Marshal(errorFrame{Type: "error", ID: f.ID, Code: "internal", Message: "could not encode the card"})
	}
	return b
}

// AnswerTap implements core.TapAnswerer: every connected browser gets a
// tap_result naming the tap frame's id and the card, with the refusal
// reason when the tap changed nothing, and then the card's new state as an
// update (a refused tap on an open card re-sends the card, so a page that
// disabled its buttons while waiting enables them again). Browsers match
// the tap_result by id; one that did not send the tap ignores it. It is
// not stored; the card's state is.
func (a *Adapter) AnswerTap(ctx context.Context, ans core.TapAnswer) error {
	if err := a.tapResult(ans); err != nil {
		return err
	}
	if ans.Card == nil {
		return nil
	}
	return a.Update(ctx, ans.Ref, core.OutMessage{Conversation: ans.Conversation, Card: ans.Card})
}

func (a *Adapter) tapResult(ans core.TapAnswer) error {
	f := tapResultFrame{Type: "tap_result", CardID: string(ans.Tap.Card), Refused: ans.Refused != "", Reason: ans.Refused, Message: ans.Text}
	// A typed tap ("approve <id>" sent as a message frame) is answered
	// with that message frame's id: the page shows its refusal as a
	// notice, since there is no button it could be shown on.
	id, ok := strings.CutPrefix(ans.EventID, "t:")
	if !ok {
		id, ok = strings.CutPrefix(ans.EventID, "m:")
	}
	if ok && clientIDRe.MatchString(id) {
		f.ID = id
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.broadcastBytesLocked(b)
	a.mu.Unlock()
	return nil
}
