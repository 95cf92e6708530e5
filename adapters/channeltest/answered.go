package channeltest

import (
	"fmt"
	"time"

	"github.com/silas-gateway/silas/cards"
)

// Registered here rather than in the scenarios table so that the table's
// other scenarios can change without touching this one.
func init() {
	scenarios = append(scenarios, scenario{name: "tap_answered_once", run: tapAnsweredOnce})
}

// tapAnsweredOnce: each tap gets exactly one answer, and it comes with the
// tapped card's new state — core side, one answer job per tap that
// carries the card (no separate update of it); platform side, one answer
// per tap. A declined card is the witness: nothing but the tap's answer
// ever edits it, so an adapter that answers without the card leaves it
// open for good.
func tapAnsweredOnce(w *world) {
	w.start(5 * time.Second)
	w.p.Say(w.t, Approver, "/run echo answered")
	c := w.waitCard("echo answered")
	w.p.Tap(w.t, Approver, c, "decline")
	w.waitSame(c.ID, "the card declined by the tap's answer", func(m Message) bool { return closed(m, cards.StatusDeclined) })
	// A stale view taps again: refused, and answered once too (told, where
	// a tap has an answer of its own: a refused WhatsApp vote is silent by
	// design, its card already shows its state).
	w.p.Tap(w.t, Approver, c, "approve")
	if _, own := w.p.TapAnswers(w.t, Approver); own {
		w.waitTold(Approver, "Already decided")
	}
	w.eventually("both taps answered", 30*time.Second, func() (bool, string) {
		taps := w.count(`SELECT count(*) FROM turns WHERE body->'tap' IS NOT NULL`)
		done := w.count(`SELECT count(*) FROM outbox WHERE op = 'answer' AND status = 'delivered'`)
		return taps == 2 && done == 2, fmt.Sprintf("%d taps stored, %d answers delivered", taps, done)
	})
	if n := w.count(`SELECT count(*) FROM outbox WHERE op = 'answer'`); n != 2 {
		w.t.Errorf("%d answers queued for 2 taps; want one each", n)
	}
	if n := w.count(`SELECT count(*) FROM outbox WHERE op = 'answer' AND message_key = $1
		AND payload->'card'->>'status' = 'declined'`, string(c.Card)); n != 2 {
		w.t.Errorf("%d answers carry the declined card; want both", n)
	}
	if n := w.count(`SELECT count(*) FROM outbox WHERE op = 'update' AND message_key = $1`, string(c.Card)); n != 0 {
		w.t.Errorf("the card was updated %d times beside its taps' answers; want 0 (the answer carries it)", n)
	}
	if n, ok := w.p.TapAnswers(w.t, Approver); ok && n != 2 {
		w.t.Errorf("the platform got %d answers to 2 taps; want one each", n)
	}
	if m := w.waitSame(c.ID, "the card", func(Message) bool { return true }); !closed(m, cards.StatusDeclined) {
		w.t.Errorf("card after the refused tap = %+v", m)
	}
}
