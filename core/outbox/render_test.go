package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// callLog is a channel that records what the lane asked of it.
type callLog struct {
	caps  core.Capabilities
	calls []string
}

func (c *callLog) Name() core.ChannelName                      { return "test" }
func (c *callLog) Run(ctx context.Context, _ core.Inbox) error { <-ctx.Done(); return nil }
func (c *callLog) Capabilities() core.Capabilities             { return c.caps }
func (c *callLog) Send(_ context.Context, m core.OutMessage) (core.MessageRef, error) {
	c.calls = append(c.calls, "send "+describe(m))
	return core.MessageRef(fmt.Sprintf("m%d", len(c.calls))), nil
}
func (c *callLog) Update(_ context.Context, ref core.MessageRef, m core.OutMessage) error {
	c.calls = append(c.calls, "update "+string(ref)+" "+describe(m))
	return nil
}

// answering is a callLog that answers taps itself.
type answering struct{ *callLog }

func (c answering) AnswerTap(_ context.Context, a core.TapAnswer) error {
	card := "-"
	if a.Card != nil {
		card = string(a.Card.Status)
	}
	c.calls = append(c.calls, fmt.Sprintf("answer ref=%s card=%s text=%q refused=%s plain=%t", a.Ref, card, a.Text, a.Refused, a.CardText != ""))
	return nil
}

func describe(m core.OutMessage) string {
	s := fmt.Sprintf("%q", m.Text)
	if m.Card != nil {
		s += " card=" + string(m.Card.Status)
	}
	if m.CardText != "" {
		s += " plain"
	}
	return s
}

func testCard(st cards.Status) *cards.Card {
	return &cards.Card{ID: "c1", Kind: cards.KindApproval, Intent: "Run uname", Risk: cards.RiskLow, Rationale: "asked", Status: st}
}

// The lane's render step is where capabilities switch behaviour: no
// buttons → the card's plain text travels with it; no edits → a new message
// naming the card; a tap → one AnswerTap, or an update and a refusal
// message on a channel that cannot answer taps.
func TestRenderStepReadsCapabilities(t *testing.T) {
	t.Parallel()
	full := core.Capabilities{EditInPlace: true, Buttons: true}
	noButtons := core.Capabilities{EditInPlace: true}
	noEdits := core.Capabilities{Buttons: true}
	declined := testCard(cards.StatusDeclined)
	ans := func(card *cards.Card, text, refused string) core.OutboxJob {
		return core.OutboxJob{Op: core.OpAnswer, MessageKey: "c1", Message: core.OutMessage{Conversation: "test:1", Card: card},
			Answer: &core.TapAnswer{Conversation: "test:1", EventID: "e1", Tap: core.Tap{Card: "c1", Choice: "decline"}, Text: text, Refused: refused}}
	}
	update := core.OutboxJob{Op: core.OpUpdate, MessageKey: "c1", Message: core.OutMessage{Conversation: "test:1", Card: declined}}
	tests := []struct {
		name    string
		caps    core.Capabilities
		answers bool
		job     core.OutboxJob
		prev    core.MessageRef
		want    []string
	}{
		{"update in place", full, false, update, "r1", []string{`update r1 "" card=declined`}},
		{"update without buttons carries plain text", noButtons, false, update, "r1", []string{`update r1 "" card=declined plain`}},
		{"update without edits is a new message naming the card", noEdits, false, update, "r1",
			[]string{`send "Update of card c1 (it replaces the earlier message):" card=declined`}},
		{"update of a message never delivered", full, false, update, "", []string{`send "" card=declined`}},
		{"answer through AnswerTap, once, with the card", full, true, ans(declined, "Declined.", ""), "r1",
			[]string{`answer ref=r1 card=declined text="Declined." refused= plain=false`}},
		{"answer without buttons carries plain text", noButtons, true, ans(declined, "", ""), "r1",
			[]string{`answer ref=r1 card=declined text="" refused= plain=true`}},
		{"answer without a card", full, true, ans(nil, "Unknown card.", core.RefusedUnknownCard), "",
			[]string{`answer ref= card=- text="Unknown card." refused=unknown_card plain=false`}},
		{"answer whose card message is unknown: the card as a new message first", full, true, ans(declined, "Declined.", ""), "",
			[]string{`send "" card=declined`, `answer ref= card=- text="Declined." refused= plain=false`}},
		{"answer on a channel that cannot edit", noEdits, true, ans(declined, "Declined.", ""), "r1",
			[]string{`send "Update of card c1 (it replaces the earlier message):" card=declined`, `answer ref= card=- text="Declined." refused= plain=false`}},
		{"no AnswerTap: the card, then a refusal as a message", full, false, ans(declined, "Already decided.", core.RefusedAlreadyDecided), "r1",
			[]string{`update r1 "" card=declined`, `send "Already decided."`}},
		{"no AnswerTap: a notice that is no refusal is not news for the chat", full, false, ans(declined, "Declined.", ""), "r1",
			[]string{`update r1 "" card=declined`}},
		{"no AnswerTap, no card, nothing to say", full, false, ans(nil, "", ""), "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			log := &callLog{caps: tt.caps}
			var ch core.Channel = log
			if tt.answers {
				ch = answering{log}
			}
			j := tt.job
			j.Message = renderFor(core.CapabilitiesOf(ch), j.Message)
			var err error
			if j.Op == core.OpAnswer {
				_, err = answerTap(context.Background(), ch, core.CapabilitiesOf(ch), j, tt.prev)
			} else {
				_, err = updateCard(context.Background(), ch, core.CapabilitiesOf(ch), j, tt.prev)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(log.calls, tt.want) {
				t.Fatalf("calls:\n  %s\nwant:\n  %s", strings.Join(log.calls, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

// A text over the channel's limit goes as several messages, on line
// boundaries, the card with the last; a retry after a failed part resumes
// there instead of repeating what was shown.
func TestLaneSplitsLongText(t *testing.T) {
	t.Parallel()
	ob := New(Config{})
	log := &callLog{caps: core.Capabilities{EditInPlace: true, Buttons: true, MaxTextLen: 12}}
	j := core.OutboxJob{ID: 7, Op: core.OpSend, MessageKey: "k", Message: core.OutMessage{Conversation: "test:1",
		Text: "first line\nsecond line\nthird line\n", Card: testCard(cards.StatusPending)}}
	ref, err := ob.sendSplit(context.Background(), log, log.caps, j)
	if err != nil || ref != "m3" {
		t.Fatalf("ref %q, err %v; want the card's message m3", ref, err)
	}
	want := []string{`send "first line\n"`, `send "second line\n"`, `send "third line\n" card=pending`}
	if !slices.Equal(log.calls, want) {
		t.Fatalf("calls %q; want %q", log.calls, want)
	}
	// Without a card, the second part fails: the retry starts there.
	log3 := &callLog{caps: log.caps}
	j.ID, j.Message.Card = 8, nil
	wrapped := &failSecond{callLog: log3}
	if _, err := ob.sendSplit(context.Background(), wrapped, log3.caps, j); err == nil {
		t.Fatal("the failed part did not fail the send")
	}
	ref, err = ob.sendSplit(context.Background(), wrapped, log3.caps, j)
	if err != nil || ref != "m1" {
		t.Fatalf("retry: ref %q, err %v; want the first part's m1", ref, err)
	}
	if want := []string{`send "first line\n"`, `send "second line\n"`, `send "third line\n"`}; !slices.Equal(log3.calls, want) {
		t.Fatalf("calls %q; want each part once %q", log3.calls, want)
	}
}

// failSecond fails the second Send it sees, once.
type failSecond struct {
	*callLog
	n int
}

func (f *failSecond) Send(ctx context.Context, m core.OutMessage) (core.MessageRef, error) {
	f.n++
	if f.n == 2 {
		return "", errors.New("platform down")
	}
	return f.callLog.Send(ctx, m)
}
