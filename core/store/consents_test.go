package store

import (
	"context"
	"crypto/ed25519"
	"errors"
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

// A flow step's use of a run consent: LockRunStep sees the step's
// in-flight row once it is written; UseConsentInFlight counts the use and
// writes the row in one statement, reports a step another transaction
// claimed first, and writes nothing for a consent refused by now.
func TestUseConsentInFlight(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	_, key, _ := ed25519.GenerateKey(nil)
	mint := func(created time.Time) consent.Consent { return storedConsent(t, ctx, s, key, created, 5) }
	type got struct {
		found, ran, used, claimed bool
		uses                      int
	}
	step := func(c consent.Consent, step string, commit bool) got {
		var g got
		err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			a := testApproval(core.NewID(), tx.Now())
			tx.QueueApproval(a)
			cs, ran, err := tx.LockRunStep(ctx, "run-x", c.ID, step)
			if err != nil {
				return nil, err
			}
			g.ran = ran
			for _, x := range cs {
				g.found = g.found || x.ID == c.ID
			}
			g.uses, _, g.used, g.claimed, err = tx.UseConsentInFlight(ctx, c.ID, 1, "run-x", step, a.ID)
			if err != nil {
				return nil, err
			}
			if !commit {
				return nil, errRollback
			}
			return nil, nil
		})
		if err != nil && (commit || err != errRollback) {
			t.Fatal(err)
		}
		return g
	}
	c := mint(time.Now())
	if g := step(c, "n/0/0", true); g != (got{found: true, used: true, claimed: true, uses: 1}) {
		t.Fatalf("first: %+v", g)
	}
	if g := step(c, "n/0/0", false); g != (got{found: true, ran: true, used: true, uses: 2}) {
		t.Fatalf("again: %+v", g)
	}
	if got, _ := s.GetConsent(ctx, c.ID); got.Uses != 1 {
		t.Fatalf("counted %d uses", got.Uses)
	}
	old := mint(time.Now().Add(-2 * time.Hour))
	if g := step(old, "n/0/1", true); g != (got{found: true}) {
		t.Fatalf("expired: %+v", g)
	}
	if g := step(c, "n/0/1", true); g != (got{found: true, used: true, claimed: true, uses: 2}) {
		t.Fatalf("other step after an expired consent: %+v", g)
	}
}

// ApproveStepUnderConsent writes each part only when the one before it
// took effect: the use, the in-flight row, the approval and the nonce;
// a step claimed before, a request no longer open and a replayed nonce
// are each reported, and a consent refused by now writes nothing.
func TestApproveStepUnderConsent(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	_, key, _ := ed25519.GenerateKey(nil)
	mint := func(created time.Time) consent.Consent { return storedConsent(t, ctx, s, key, created, 9) }
	first := core.NewID()
	// use runs one use in its own transaction (committed when commit),
	// on approval id (inserted when new) with nonce.
	use := func(c consent.Consent, id, step, nonce string, isNew, commit bool) consent.StepUsed {
		var got consent.StepUsed
		err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			if isNew {
				tx.QueueApproval(testApproval(id, tx.Now()))
			} else if _, err := tx.GetApproval(ctx, core.ApprovalID(id)); err != nil {
				return nil, err
			}
			var err error
			got, err = tx.ApproveStepUnderConsent(ctx, consent.StepUse{Consent: c.ID, Units: 1, Run: "run-y", Step: step,
				Approval: core.ApprovalID(id), By: core.IdentityID("consent:" + c.ID), Token: []byte(`{"t":1}`), Nonce: []byte(nonce), TokenID: "tok-" + nonce})
			if err == nil && !commit {
				err = errRollback
			}
			return nil, err
		})
		if err != nil && (commit || err != errRollback) {
			t.Fatal(err)
		}
		return got
	}
	c := mint(time.Now())
	if g := use(c, first, "n/0/0", "nonce-1", true, true); g != (consent.StepUsed{Uses: 1, Units: 1, Used: true, Claimed: true, Approved: true, Fresh: true}) {
		t.Fatalf("first: %+v", g)
	}
	if a, err := s.GetApproval(ctx, core.ApprovalID(first)); err != nil || a.Status != core.ApprovalApproved || a.DecidedBy != core.IdentityID("consent:"+c.ID) {
		t.Fatalf("approval after the first use: %+v %v", a, err)
	}
	if g := use(c, core.NewID(), "n/0/0", "nonce-2", true, false); g != (consent.StepUsed{Uses: 2, Units: 2, Used: true}) {
		t.Fatalf("a step claimed before: %+v", g)
	}
	if g := use(c, first, "n/0/1", "nonce-3", false, false); g != (consent.StepUsed{Uses: 2, Units: 2, Used: true, Claimed: true}) {
		t.Fatalf("a request no longer open: %+v", g)
	}
	if g := use(c, core.NewID(), "n/0/2", "nonce-1", true, false); g != (consent.StepUsed{Uses: 2, Units: 2, Used: true, Claimed: true, Approved: true}) {
		t.Fatalf("a replayed nonce: %+v", g)
	}
	if got, _ := s.GetConsent(ctx, c.ID); got.Uses != 1 || got.Units != 1 {
		t.Fatalf("counted %d uses, %d units", got.Uses, got.Units)
	}
	old := mint(time.Now().Add(-2 * time.Hour))
	id := core.NewID()
	if g := use(old, id, "n/0/3", "nonce-4", true, true); g != (consent.StepUsed{}) {
		t.Fatalf("expired: %+v", g)
	}
	if a, err := s.GetApproval(ctx, core.ApprovalID(id)); err != nil || a.Status != core.ApprovalPending {
		t.Fatalf("approval after an expired consent: %+v %v", a, err)
	}
	if got, _ := s.GetConsent(ctx, old.ID); got.Uses != 0 {
		t.Fatalf("expired consent counted %d uses", got.Uses)
	}
}

var errRollback = errors.New("roll back")

// storedConsent stores a consent for `echo hi` in test:chat, signed with
// key, minted at created, allowing maxUses uses.
func storedConsent(t *testing.T, ctx context.Context, s *Store, key ed25519.PrivateKey, created time.Time, maxUses int) consent.Consent {
	t.Helper()
	a := core.Action{Tool: "shell", Argv: []string{"echo", "hi"}, Verify: []verify.Check{verify.ExitCodeZero()}}
	c, err := consent.ForAction(core.NewID(), a, cards.RiskLow, "test:chat", "test:owner", created, 0,
		consent.Limits{TTL: time.Hour, MaxTTL: 24 * time.Hour, MaxUses: maxUses})
	if err != nil {
		t.Fatal(err)
	}
	if err := consent.Sign(key, &c); err != nil {
		t.Fatal(err)
	}
	if err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) { return nil, tx.InsertConsent(ctx, c) }); err != nil {
		t.Fatal(err)
	}
	return c
}
