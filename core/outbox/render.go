package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/silas-gateway/silas/core"
)

// The lane's render step is the one place the core reads what a channel
// can do (core.CapabilitiesOf) and acts on it, so adapters do not each
// decide how a card degrades:
//
//   - no buttons: the card travels with its plain text (OutMessage.CardText,
//     cards.PlainText with the "approve <id>" text fallback), which the
//     channel shows instead of a native card;
//   - no edits: a card's new state is a new message that names the card it
//     replaces;
//   - a maximum text length: a longer text is sent as several messages, on
//     line boundaries, a card with the last (sendSplit);
//   - a tap is answered with AnswerTap where the channel has it, else by
//     an Update of the card and, for a refusal, the notice as a message.

// renderFor fills in what a channel without buttons shows instead of a card.
func renderFor(caps core.Capabilities, m core.OutMessage) core.OutMessage {
	if m.Card != nil && !caps.Buttons {
		m.CardText = m.Card.PlainText()
	}
	return m
}

// updateCard shows a card's new state on the message that showed it (prev),
// or as a new message when that message never arrived or the channel
// cannot edit; it returns the new message's ref, if any.
func updateCard(ctx context.Context, ch core.Channel, caps core.Capabilities, j core.OutboxJob, prev core.MessageRef) (core.MessageRef, error) {
	switch {
	case prev == "":
		// The original never arrived (or failed for good): show the
		// current state as a new message rather than losing it.
		return sendJob(ctx, ch, j)
	case !caps.EditInPlace:
		if j.Message.Card != nil && j.Message.Text == "" {
			j.Message.Text = replacesCard(j.Message)
		}
		return sendJob(ctx, ch, j)
	}
	return "", ch.Update(ctx, prev, j.Message)
}

// replacesCard is the line above a card's new state sent as a new message.
func replacesCard(m core.OutMessage) string {
	return fmt.Sprintf("Update of card %s (it replaces the earlier message):", m.Card.ID)
}

// tapAnswerer returns ch's AnswerTap for answer job j, with j's tap handle
// opened in place (it is sealed at rest, see core/tapseal), or nil when ch
// cannot answer taps or the handle does not open (key changed, altered):
// the tap is then answered as on a channel without AnswerTap. The warning
// names the job, never the handle.
func (ob *Outbox) tapAnswerer(ch core.Channel, j *core.OutboxJob) core.TapAnswerer {
	ta, ok := ch.(core.TapAnswerer)
	if !ok || ob.handles == nil {
		return ta
	}
	a := *j.Answer
	h, err := ob.handles.Open(a.Handle, string(a.Conversation), a.EventID)
	if err != nil {
		ob.jobLog(*j).Warn("outbox: tap handle does not open; answering the tap without it", slog.Any("err", err))
		return nil
	}
	a.Handle = h
	j.Answer = &a
	return ta
}

// answerTap delivers a tap's one answer: through the channel's AnswerTap,
// with the card's message ref, or — a channel that cannot answer taps —
// the card's new state as an update and a refusal as a message. A card
// whose message is unknown, or a channel that cannot edit, gets the new
// state as a new message and the answer without it.
func answerTap(ctx context.Context, ch core.Channel, caps core.Capabilities, j core.OutboxJob, prev core.MessageRef) (core.MessageRef, error) {
	ta, _ := ch.(core.TapAnswerer)
	return answerTapWith(ctx, ch, ta, caps, j, prev)
}

// answerTapWith is answerTap through ta (nil: as a channel without
// AnswerTap), see tapAnswerer.
func answerTapWith(ctx context.Context, ch core.Channel, ta core.TapAnswerer, caps core.Capabilities, j core.OutboxJob, prev core.MessageRef) (core.MessageRef, error) {
	a := *j.Answer
	a.Card = j.Message.Card
	answers := ta != nil
	var ref core.MessageRef
	if a.Card != nil && (!answers || prev == "" || !caps.EditInPlace) {
		// The card first: a retry after a failed notice repeats an
		// identical edit, which is harmless, where a repeated notice would
		// not be.
		var err error
		if ref, err = updateCard(ctx, ch, caps, j, prev); err != nil {
			return "", err
		}
		a.Card = nil
	}
	if answers {
		if a.Card != nil {
			a.Ref, a.CardText = prev, j.Message.CardText
		}
		return ref, ta.AnswerTap(ctx, a)
	}
	if a.Refused != "" && strings.TrimSpace(a.Text) != "" {
		if _, err := ch.Send(ctx, core.OutMessage{Conversation: a.Conversation, Text: a.Text}); err != nil {
			return ref, err
		}
	}
	return ref, nil
}

// splitProgress is how far sendSplit got with one job.
type splitProgress struct {
	sent  int
	first core.MessageRef
}

// sendSplit sends j's message; a text over caps.MaxTextLen runes goes as
// several messages, split on line boundaries, the card (if any) with the
// last. A retry after a failed part starts at that part. The ref returned
// is the one later edits name: the card's message, else the first part
// (the adapters' own splitting, for platforms that measure otherwise,
// keeps the same rule).
func (ob *Outbox) sendSplit(ctx context.Context, ch core.Channel, caps core.Capabilities, j core.OutboxJob) (core.MessageRef, error) {
	m := j.Message
	if caps.MaxTextLen <= 0 || utf8.RuneCountInString(m.Text) <= caps.MaxTextLen {
		return sendJob(ctx, ch, j)
	}
	var parts []string
	for _, p := range core.SplitText(m.Text, caps.MaxTextLen, func(rune) int { return 1 }) {
		if strings.TrimSpace(p) != "" { // platforms refuse blank messages
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return sendJob(ctx, ch, j)
	}
	ob.splitMu.Lock()
	p := ob.splits[j.ID]
	ob.splitMu.Unlock()
	var last core.MessageRef
	for i := p.sent; i < len(parts); i++ {
		part := j
		part.Message = core.OutMessage{Conversation: m.Conversation, Text: parts[i]}
		if i == len(parts)-1 {
			part.Message.Card, part.Message.CardText = m.Card, m.CardText
		}
		if i > 0 {
			part.MessageKey = fmt.Sprintf("%s.%d", j.MessageKey, i)
		}
		ref, err := sendJob(ctx, ch, part)
		if err != nil {
			ob.splitMu.Lock()
			ob.splits[j.ID] = p
			ob.splitMu.Unlock()
			return "", err
		}
		if i == 0 {
			p.first = ref
		}
		last, p.sent = ref, i+1
	}
	if m.Card != nil {
		return last, nil
	}
	return p.first, nil
}

func (ob *Outbox) forgetSplit(id int64) {
	ob.splitMu.Lock()
	delete(ob.splits, id)
	ob.splitMu.Unlock()
}
