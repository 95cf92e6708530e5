package commands

import (
	"context"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/render"
)

// ConsentReads is the store read /consents answers from; a Reads without
// it answers that standing approvals are not available.
type ConsentReads interface {
	ActiveConsents(ctx context.Context, conv core.ConversationID, now time.Time) ([]consent.Consent, error)
}

// consents answers /consents: the conversation's active standing
// approvals, each as a card with a Revoke button (the tap is the engine's).
func (c *Table) consents(ctx context.Context, t Turn, _ string, out Out) error {
	cr, ok := c.cfg.Reads.(ConsentReads)
	if !ok {
		out.Reply("Standing approvals are not available here.")
		return nil
	}
	list, err := cr.ActiveConsents(ctx, t.Turn.Conversation, c.cfg.Now())
	if err != nil {
		return err
	}
	if len(list) == 0 {
		out.Reply("No standing approvals here. An approval card for a low or medium risk command can offer one (\"Allow this for 1 h\") when consents.enabled is on.")
		return nil
	}
	out.Reply("%d standing approval(s) here; each lets its exact command run without a card until it expires, runs out or you revoke it:", len(list))
	for _, k := range list {
		out.Card(render.Consent(k))
	}
	return nil
}
