package render

import (
	"fmt"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/secrets"
)

// SecretInput is the card that asks for a secret through the secure form:
// the link (one-time, expiring after ttl) is the only way in, never the
// chat.
func SecretInput(r secrets.Request, link string, ttl time.Duration) *cards.Card {
	return &cards.Card{
		ID:        cards.ID(r.Ref),
		Kind:      cards.KindSecureInput,
		Intent:    fmt.Sprintf("Give Silas `%s` through the secure form", r.Name),
		Rationale: fmt.Sprintf("The value goes over HTTPS straight into encrypted storage; it never passes through this chat, the agent or the logs. The link works once and expires in %s.", ttl),
		Link:      &cards.Link{Label: "Enter " + Clip(r.Name, 40) + " securely", URL: link},
		Status:    cards.StatusPending,
	}
}

// SecretDone is the secure-input card once it no longer takes input: the
// value was stored, or the link expired unused.
func SecretDone(r secrets.Request, stored bool) *cards.Card {
	c := &cards.Card{ID: cards.ID(r.Ref), Kind: cards.KindInfo, Intent: fmt.Sprintf("Secret `%s`", r.Name)}
	if stored {
		c.Status, c.Outcome = cards.StatusDone, fmt.Sprintf("`%s` stored ✓", r.Name)
	} else {
		c.Status, c.Outcome = cards.StatusExpired, fmt.Sprintf("The link for `%s` expired unused. Ask again with /secret %s.", r.Name, r.Name)
	}
	return c
}
