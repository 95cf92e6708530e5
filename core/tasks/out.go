package tasks

import (
	"fmt"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// Out is where a person's turn that reaches a task writes what the task
// shows (core.TaskOut).
type Out = core.TaskOut

// shown is what a task's own transition shows in its conversation (an
// Out for the runtime's background writes), sent by commitTask.
type shown struct {
	replies []string
	cards   []*cards.Card
	updates []*cards.Card
	audit   []audit.Entry
	after   []func()
}

var _ Out = (*shown)(nil)

func (s *shown) Reply(format string, a ...any) {
	s.replies = append(s.replies, fmt.Sprintf(format, a...))
}
func (s *shown) Card(c *cards.Card)           { s.cards = append(s.cards, c) }
func (s *shown) Update(c *cards.Card)         { s.updates = append(s.updates, c) }
func (s *shown) Audit(entries ...audit.Entry) { s.audit = append(s.audit, entries...) }
func (s *shown) After(f func())               { s.after = append(s.after, f) }

// clone copies s so a retried transaction starts from the same state.
func (s *shown) clone() *shown {
	return &shown{replies: append([]string(nil), s.replies...), cards: append([]*cards.Card(nil), s.cards...),
		updates: append([]*cards.Card(nil), s.updates...), audit: append([]audit.Entry(nil), s.audit...),
		after: append([]func(){}, s.after...)}
}

// writeTo hands what s shows to a person's turn (its after-commit work
// is the caller's).
func (s *shown) writeTo(o Out) {
	for _, r := range s.replies {
		o.Reply("%s", r)
	}
	for _, c := range s.cards {
		o.Card(c)
	}
	for _, c := range s.updates {
		o.Update(c)
	}
	o.Audit(s.audit...)
}
