package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
)

// ExpiryEvery is how often Expire should run: a card shows "expired" at
// most this long after its time ran out.
const ExpiryEvery = 5 * time.Second

// Expire closes approval cards whose time ran out, so an old card shows
// "expired" instead of buttons that would only be refused, and secure-form
// cards whose link expired unused. Each card is closed by compare-and-swap
// in its own transaction, so a second run (another process, or a retry)
// closes nothing twice. The background room runs it every ExpiryEvery.
func (ob *Outbox) Expire(ctx context.Context) error {
	ob.expireSecretRequests(ctx)
	list, err := ob.st.ExpiredApprovals(ctx, ob.now(), 100)
	if err != nil {
		return fmt.Errorf("outbox: expiry: listing: %w", err)
	}
	for _, a := range list {
		// The card says who was asked and where (routed copies included).
		routes, err := ob.st.ApprovalRoutes(ctx, a.ID)
		if err != nil {
			return fmt.Errorf("outbox: expiry: %w", err)
		}
		err = ob.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			ok, err := tx.TransitionApproval(ctx, a.ID, []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming}, core.ApprovalExpired, "", nil)
			if err != nil || !ok {
				return nil, err
			}
			a.Status = core.ApprovalExpired
			if err := tx.QueueMessage(a.Channel, core.OpUpdate, string(a.ID), core.OutMessage{Conversation: a.Conversation, Card: render.Expired(a, routes)}); err != nil {
				return nil, err
			}
			return []audit.Entry{{Kind: audit.KindApprovalExpired, Actor: "silas", Conversation: string(a.Conversation),
				Data: map[string]any{"approval": string(a.ID), "asked": render.Asked(a, routes)}}}, nil
		})
		if err != nil && ctx.Err() == nil {
			ob.log.Error("expiry: could not expire approval", slog.String("approval", string(a.ID)), slog.Any("err", err))
		}
		ob.Kick(a.Conversation, -1)
	}
	return nil
}

// expireSecretRequests closes secure-form cards whose link expired unused.
func (ob *Outbox) expireSecretRequests(ctx context.Context) {
	var expired []secrets.Request
	err := ob.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		list, entries, err := tx.ExpireSecretRequests(ctx, 100)
		if err != nil {
			return nil, err
		}
		expired = list
		for _, r := range list {
			if err := tx.QueueMessage(r.Channel, core.OpUpdate, r.Ref,
				core.OutMessage{Conversation: r.Conversation, Card: render.SecretDone(r, false)}); err != nil {
				return nil, err
			}
		}
		return entries, nil
	})
	if err != nil {
		// Do returns when ctx ends even if the writer runs the operation
		// later: expired may still be written, so it is not read.
		if ctx.Err() == nil {
			ob.log.Error("expiry: secret requests", slog.Any("err", err))
		}
		return
	}
	for _, r := range expired {
		ob.Kick(r.Conversation, 1)
	}
}
