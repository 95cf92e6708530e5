// Package effects is the small vocabulary between the engine and a room
// that acts inside the engine's transactions (the task runtime,
// core/tasks): what one step shows in a conversation. Neither side imports
// the other; both speak this.
package effects

import (
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/audit"
)

// Effects is what a step writes to its conversation, committed with it.
type Effects struct {
	Replies []string
	Cards   []*cards.Card
	// Updates are edits of cards sent earlier, enqueued after the sends.
	Updates []*cards.Card
	Audit   []audit.Entry
	// After runs once the transaction committed.
	After []func()
	// Toast answers a tap; Refused, when set, is why the tap changed
	// nothing (the engine records the refusal and shows Toast).
	Toast, Refused string
}

// Add appends f's effects to e (f's toast wins when set).
func (e *Effects) Add(f Effects) {
	e.Replies = append(e.Replies, f.Replies...)
	e.Cards = append(e.Cards, f.Cards...)
	e.Updates = append(e.Updates, f.Updates...)
	e.Audit = append(e.Audit, f.Audit...)
	e.After = append(e.After, f.After...)
	if f.Toast != "" {
		e.Toast = f.Toast
	}
	if f.Refused != "" {
		e.Refused = f.Refused
	}
}

// Clone copies e so a retried transaction starts from the same effects.
func (e Effects) Clone() Effects {
	return Effects{Replies: append([]string(nil), e.Replies...), Cards: append([]*cards.Card(nil), e.Cards...),
		Updates: append([]*cards.Card(nil), e.Updates...), Audit: append([]audit.Entry(nil), e.Audit...),
		After: append([](func())(nil), e.After...), Toast: e.Toast, Refused: e.Refused}
}
