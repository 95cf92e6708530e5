package engine_test

import (
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/store"
)

// TestTapSpeculates: a low-risk tap in an idle conversation writes its
// decision (the approval's compare-and-swap with the token's nonce), the
// execution claimed with it, the card, the audit rows and COMMIT in one
// round trip; the verdict writes the execution's compare-and-swap, the
// card edit, the audit rows and COMMIT in one round trip. Before issue 26's
// speculation (core/store speculate.go) each compare-and-swap's result
// came back before what depended on it was sent: two round trips each.
func TestTapSpeculates(t *testing.T) {
	t.Parallel()
	ch := newFakeChannel()
	rec := &tripLog{}
	b := setupStore(t, ch, ch, "", store.Options{QueryTracer: rec})
	b.send(t, owner, "/run echo speculate")
	c := b.pendingCard(t, "echo speculate")
	b.waitIdle(t, "test:chat")
	rec.record(true)
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusDone)
	rec.record(false)
	for _, step := range []struct {
		name, cas string
		with      []string
	}{
		{"the decision", "UPDATE approvals SET status", []string{"INSERT INTO executions", "INSERT INTO outbox", "INSERT INTO audit_log", "COMMIT"}},
		{"the verdict", "UPDATE executions SET status", []string{"INSERT INTO outbox", "INSERT INTO audit_log", "COMMIT"}},
	} {
		got := rec.carrying(step.cas)
		if len(got) != 1 {
			t.Fatalf("%s: %d round trips carry its compare-and-swap, want 1: %v", step.name, len(got), got)
		}
		for _, w := range step.with {
			if !got[0].has(w) {
				t.Errorf("%s: the compare-and-swap's round trip does not carry %q: %v", step.name, w, got[0])
			}
		}
	}
}
