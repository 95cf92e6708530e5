package store

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/verify"
)

// A consent stored and read back still verifies; uses are counted by
// compare-and-swap up to the limit; the CLI's revoke (by an 8-character
// prefix) ends it, audited, and a second revoke finds nothing.
func TestConsents(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	pub, key, _ := ed25519.GenerateKey(nil)
	a := core.Action{Tool: "shell", Argv: []string{"echo", "hi"}, Verify: []verify.Check{verify.ExitCodeZero()}}
	c, err := consent.ForAction(core.NewID(), a, cards.RiskLow, "test:chat", "test:owner", time.Now(), 0,
		consent.Limits{TTL: time.Hour, MaxTTL: 24 * time.Hour, MaxUses: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := consent.Sign(key, &c); err != nil {
		t.Fatal(err)
	}
	use := func() (consent.Consent, consent.Code) {
		var got consent.Consent
		var code consent.Code
		err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var err error
			got, code, err = consent.Use(ctx, tx, pub, a, cards.RiskLow, "test:chat")
			return nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, code
	}
	if err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) { return nil, tx.InsertConsent(ctx, c) }); err != nil {
		t.Fatal(err)
	}
	stored, err := s.GetConsent(ctx, c.ID)
	if err != nil || !consent.Verify(pub, stored) {
		t.Fatalf("stored consent does not verify: %v", err)
	}
	if got, code := use(); code != "" || got.Uses != 1 || got.Units != 1 {
		t.Fatalf("first use: %+v %q", got, code)
	}
	if got, code := use(); code != "" || got.Uses != 2 {
		t.Fatalf("second use: %+v %q", got, code)
	}
	if _, code := use(); code != consent.UsesExhausted {
		t.Fatalf("third use: %q", code)
	}
	if list, err := s.ActiveConsents(ctx, "test:chat", time.Now()); err != nil || len(list) != 1 {
		t.Fatalf("active: %v %v", list, err)
	}
	if _, ok, err := s.RevokeConsent(ctx, c.ID[:7], "cli"); err != nil || ok {
		t.Fatalf("revoked by a 7-character prefix: %v %v", ok, err)
	}
	full, ok, err := s.RevokeConsent(ctx, c.ID[:8], "cli")
	if err != nil || !ok || full != c.ID {
		t.Fatalf("revoke: %q %v %v", full, ok, err)
	}
	if _, ok, _ := s.RevokeConsent(ctx, c.ID, "cli"); ok {
		t.Fatal("revoked twice")
	}
	if list, _ := s.ActiveConsents(ctx, "", time.Now()); len(list) != 0 {
		t.Fatalf("active after revoke: %v", list)
	}
	if _, code := use(); code != consent.Revoked {
		t.Fatalf("use after revoke: %q", code)
	}
	rows, err := s.AuditTail(ctx, 10, "", []audit.Kind{audit.KindConsentRevoked})
	if err != nil || len(rows) != 1 || rows[0].Entry.Data["consent"] != c.ID {
		t.Fatalf("audit: %v %v", rows, err)
	}
}
