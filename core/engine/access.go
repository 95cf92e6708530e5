package engine

import (
	"context"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/access"
	"github.com/silas-gateway/silas/core/store"
)

// The DM access policy and access requests are core/access's; the engine
// asks it at the gate and hands it taps on access cards.

// gate applies the DM access policy; it returns false when the turn is not
// answered at all. A stranger under the pairing policy is answered with an
// access request, in the turn's transaction.
func (e *Engine) gate(o *outcome) bool {
	switch e.access.Gate(o.st, o.trust, o) {
	case access.Ignore:
		return false
	case access.Ask:
		o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error { return e.access.Request(ctx, tx, o.st, o) }
	}
	return true
}

// decideAccess applies an owner's tap on an access card.
func (e *Engine) decideAccess(ctx context.Context, tx *store.Tx, o *outcome, r core.AccessRequest, tap core.Tap, refuse func(reason, msg string) error) error {
	d, err := e.access.Decide(ctx, tx, o.st, o.trust, r, tap, o)
	if err != nil {
		return err
	}
	if d.Refused != "" {
		return refuse(d.Refused, d.Toast)
	}
	if d.Toast != "" {
		o.toast = d.Toast
	}
	return nil
}
