package consent

import (
	"context"
	"crypto/ed25519"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// Tx is the part of the caller's transaction a use is counted in
// (core/store's Tx).
type Tx interface {
	Now() time.Time
	// ConsentsFor reads, locked, the conversation's consents of tool
	// (revoked and lately expired ones too, to name a refusal).
	ConsentsFor(ctx context.Context, conv core.ConversationID, tool string, now time.Time) ([]Consent, error)
	// UseConsent counts one use by compare-and-swap on the limits.
	UseConsent(ctx context.Context, id string, units int) (uses, total int, ok bool, err error)
}

// Use finds a consent that lets a (at the policy's risk) run now in conv
// without a card and counts one use of it in tx: the consent as counted,
// or the refusal code ("" with a zero Consent never happens). The caller
// then approves the action in the same tx, so the use counts only if the
// approval commits.
func Use(ctx context.Context, tx Tx, pub ed25519.PublicKey, a core.Action, risk cards.Risk, conv core.ConversationID) (Consent, Code, error) {
	return UseCost(ctx, tx, pub, a, risk, conv, UnitsPerAction)
}

// UseCost is Use for a use costing cost units (Limits.Units): the action
// and the model call that proposed it, counted against the cost cap.
func UseCost(ctx context.Context, tx Tx, pub ed25519.PublicKey, a core.Action, risk cards.Risk, conv core.ConversationID, cost int) (Consent, Code, error) {
	now := tx.Now()
	cs, err := tx.ConsentsFor(ctx, conv, a.Tool, now)
	if err != nil {
		return Consent{}, "", err
	}
	if risk != cards.RiskLow && risk != cards.RiskMedium {
		// High and irreversible always ask; say so only where a consent
		// would otherwise have covered the action.
		for _, c := range cs {
			if c.Matches(a) {
				return Consent{}, PolicyForbids, nil
			}
		}
		return Consent{}, Required, nil
	}
	c, code := PickCost(pub, cs, a, risk, string(conv), now, cost)
	if code != "" {
		return Consent{}, code, nil
	}
	uses, units, ok, err := tx.UseConsent(ctx, c.ID, cost)
	if err != nil {
		return Consent{}, "", err
	}
	if !ok {
		// Read locked a moment ago: only the clock can have moved.
		return Consent{}, Expired, nil
	}
	c.Uses, c.Units = uses, units
	return c, "", nil
}
