package store

import (
	"context"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// A tap's answer is one outbox job: the lane reads it back whole (the
// answer with the card's new state and the card's message ref), the
// transcript counts an answer with the card as the card's edit, and one
// without a card is no message at all.
func TestTapAnswerJob(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	const conv core.ConversationID = "test:1"
	pending := &cards.Card{ID: "c1", Kind: cards.KindApproval, Intent: "Run uname", Risk: cards.RiskLow, Rationale: "asked", Status: cards.StatusPending}
	declined := *pending
	declined.Status = cards.StatusDeclined
	do := func(f func(tx *Tx) error) {
		t.Helper()
		if err := s.Do(ctx, func(_ context.Context, tx *Tx) ([]audit.Entry, error) { return nil, f(tx) }); err != nil {
			t.Fatal(err)
		}
	}
	do(func(tx *Tx) error {
		return tx.QueueMessage("test", core.OpSend, "c1", core.OutMessage{Conversation: conv, Card: pending})
	})
	j, _, _, err := s.NextOutboxJob(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	do(func(tx *Tx) error { tx.QueueDelivered(j, "platform-ref-1", core.OutboxDelivered); return nil })
	tap := core.Tap{Card: "c1", Choice: "decline"}
	do(func(tx *Tx) error {
		if err := tx.QueueTapAnswer("test", "c1", core.TapAnswer{Conversation: conv, EventID: "e1", Sender: "test:owner", Tap: tap,
			Handle: "h1", Card: &declined, Text: "Declined.", Ref: "ignored", CardText: "ignored"}); err != nil {
			return err
		}
		return tx.QueueTapAnswer("test", "tap-x", core.TapAnswer{Conversation: conv, EventID: "e2", Sender: "test:owner",
			Tap: core.Tap{Card: "nope", Choice: "approve"}, Text: "Unknown card.", Refused: core.RefusedUnknownCard})
	})
	j, superseded, ref, err := s.NextOutboxJob(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	a := j.Answer
	if j.Op != core.OpAnswer || superseded || ref != "platform-ref-1" || a == nil || a.EventID != "e1" || a.Handle != "h1" || a.Text != "Declined." ||
		a.Tap != tap || a.Card == nil || a.Card.Status != cards.StatusDeclined || j.Message.Card != a.Card || a.Ref != "" || a.CardText != "" {
		t.Fatalf("job %+v, answer %+v, ref %q; want the answer with the declined card and the card's ref", j, a, ref)
	}
	tr, err := s.Transcript(ctx, "test", conv, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr) != 1 || tr[0].Card == nil || tr[0].Card.Status != cards.StatusDeclined || tr[0].Text != "" {
		t.Fatalf("transcript %+v; want the one card, declined, and no answer of its own", tr)
	}
}
