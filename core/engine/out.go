package engine

import (
	"context"
	"fmt"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/access"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/commands"
	"github.com/silas-gateway/silas/core/store"
)

// The turn's outcome as the rooms that answer into it see it: the command
// table (commands.Out) and the task runtime (core.TaskOut). What they write
// commits with the turn, in the order the outcome sends it.

var (
	_ commands.Out = (*outcome)(nil)
	_ access.Out   = (*outcome)(nil)
)

func (o *outcome) Reply(format string, a ...any) {
	o.replies = append(o.replies, fmt.Sprintf(format, a...))
}
func (o *outcome) Card(c *cards.Card)                        { o.cards = append(o.cards, c) }
func (o *outcome) Update(c *cards.Card)                      { o.updates = append(o.updates, c) }
func (o *outcome) Audit(entries ...audit.Entry)              { o.audit = append(o.audit, entries...) }
func (o *outcome) After(f func())                            { o.after = append(o.after, f) }
func (o *outcome) Note(kind audit.Kind, data map[string]any) { o.note(kind, data) }

// SecretOutput queues a reply that carries secret-derived output, marked
// so (core.OutMessage.SecretOutput) that no model request carries it.
func (o *outcome) SecretOutput(text string) { o.secretReplies = append(o.secretReplies, text) }

// SendTo queues a message to another conversation of the turn's channel.
func (o *outcome) SendTo(conv core.ConversationID, key string, m core.OutMessage) {
	o.sends = append(o.sends, pendingSend{conv: conv, key: key, msg: m})
}

// Write sets what runs inside the turn's transaction.
func (o *outcome) Write(f func(ctx context.Context, tx *store.Tx, out commands.Out) error) {
	o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error { return f(ctx, tx, o) }
}
