package main

import (
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/storetest"
)

// A standing approval through the web chat, configured only by documented
// keys: "Allow this for 1 h" runs the command, the identical command runs
// again with a line and no card to tap, /consents revokes it, and the next
// one asks again. `silas consents list|revoke` see and end it too.
func TestStandingApprovalViaWebChat(t *testing.T) {
	t.Parallel() // a server of its own on a database of its own
	dsn := storetest.NewDatabase(t)
	s := startServer(t, dsn, t.TempDir(), "SILAS_CONSENTS_ENABLED=true", "SILAS_CONSENTS_MAX_USES=5")
	c := s.connect(t)

	c.say("/run uname -a")
	cd := c.cardFor("uname -a", cards.StatusPending)
	if len(cd.Choices) != 3 || cd.Choices[1].ID != "allow_standing" || cd.Choices[1].Label != "Allow this for 1 h" || cd.Choices[2].ID != "decline" {
		t.Fatalf("card choices = %+v", cd.Choices)
	}
	c.tap(string(cd.ID), "allow_standing")
	c.cardStatus(cd.ID, cards.StatusDone)

	c.say("/run uname -a")
	c.textContaining("under your standing approval")
	c.textContaining("(1/5 uses")
	if n := dbCount(t, dsn, `SELECT count(*) FROM approvals WHERE decided_by LIKE 'consent:%'`); n != 1 {
		t.Fatalf("approvals under the consent = %d, want 1", n)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM executions WHERE status = 'verified'`); n < 1 {
		t.Fatalf("verified executions = %d", n)
	}

	list := s.silasCLI(t, "consents", "list")
	if !strings.Contains(list, "uname -a") || !strings.Contains(list, "1/5 uses") {
		t.Fatalf("consents list = %q", list)
	}

	// Revoke from the chat: the next identical command asks again.
	c.say("/consents")
	var rc *cards.Card
	f := c.expect("consent card", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && strings.HasPrefix(string(cd.ID), "consent-") && cd.Status == cards.StatusPending
	})
	rc = card(f)
	c.tap(string(rc.ID), "revoke")
	c.cardStatus(rc.ID, cards.StatusDeclined)
	if n := dbCount(t, dsn, `SELECT count(*) FROM consents WHERE revoked_at IS NOT NULL`); n != 1 {
		t.Fatalf("revoked consents = %d", n)
	}
	before := dbCount(t, dsn, `SELECT count(*) FROM approvals`)
	c.say("/run uname -a")
	first := cd.ID
	c.expect("a new pending card", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Command == "uname -a" && cd.Status == cards.StatusPending && cd.ID != first
	})
	if n := dbCount(t, dsn, `SELECT count(*) FROM approvals WHERE status = 'pending'`); n != 1 || dbCount(t, dsn, `SELECT count(*) FROM approvals`) != before+1 {
		t.Fatalf("after revoke: pending approvals = %d", n)
	}
	if out := s.silasCLI(t, "consents", "list"); !strings.Contains(out, "No active standing approvals") {
		t.Fatalf("consents list after revoke = %q", out)
	}
}
