package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/secrets"
)

// Issue 22 point 8: a card never shows a state that did not happen. An
// action that declares a secret which is not stored is refused in the
// transaction of the tap that approves it: every state its card was ever
// sent in (each outbox job under its id) goes from confirming to refused,
// never through "running…"; the secure-input card for the secret is sent,
// and nothing runs.
func TestMissingSecretRefusedWithoutRunning(t *testing.T) {
	t.Parallel()
	sealer := newSealer(t)
	fc := newFakeChannel()
	b := setupAccess(t, fc, fc, "", func(c *gateway.Config) {
		c.Sealer = sealer
		c.Agent = agent.Command{}
		c.SecretLink = func(ref, token string) string { return "https://127.0.0.1:8443/secrets/" + ref + "?t=" + token }
	})
	b.send(t, owner, `/run --secret absent_key sh -c 'echo "$ABSENT_KEY"'`)
	run := b.pendingCard(t, `sh -c 'echo "$ABSENT_KEY"'`)
	b.tap(t, owner, run.ID, "approve")
	b.waitStatus(t, run.ID, cards.StatusConfirming)
	b.tap(t, owner, run.ID, "confirm")
	refused := b.waitStatus(t, run.ID, cards.StatusRefused)
	if !strings.Contains(refused.Outcome, "secret absent_key is not stored; a secure-form link to store it was sent") {
		t.Fatalf("refused card = %+v", refused)
	}
	b.ch.waitFor(t, "secure-input card", func(m []core.OutMessage) bool {
		return cardWith(m, func(c *cards.Card) bool {
			return c.Kind == cards.KindSecureInput && strings.Contains(c.Intent, "absent_key")
		}) != nil
	})
	rows, err := b.st.Pool().Query(b.ctx, `SELECT payload->'card'->>'status' FROM outbox WHERE message_key = $1 ORDER BY id`, string(run.ID))
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, s)
	}
	rows.Close()
	if got := strings.Join(seen, " → "); got != "pending → confirming → refused" {
		t.Fatalf("the card went %s", got)
	}
	var status string
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT status FROM executions WHERE approval_id = $1`, string(run.ID)).Scan(&status); err != nil || status != "refused" {
		t.Fatalf("execution = %q, %v", status, err)
	}
}

// unavailableSandbox is a sandbox that says, before any run, that it cannot
// isolate one (execute.Readiness), and refuses each run as the real one
// does then.
type unavailableSandbox struct {
	core.Sandbox
	ran *atomic.Int32
}

func (unavailableSandbox) Available() error {
	return fmt.Errorf("sandbox: no user namespaces (test): %w", core.ErrIsolationUnavailable)
}

func (u unavailableSandbox) NetworkAvailable() error { return u.Available() }

func (u unavailableSandbox) Run(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	u.ran.Add(1)
	return core.ExecResult{}, u.Available()
}

// Issue 22 point 8: a run the sandbox cannot isolate is refused in the
// approving tap's transaction — every state its card was sent in goes from
// pending to refused with the reason, never through "running…" — and
// nothing reaches the sandbox.
func TestIsolationUnavailableRefusedWithoutRunning(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	fc := newFakeChannel()
	b := setupAccess(t, fc, fc, "", func(c *gateway.Config) {
		c.Sandbox = unavailableSandbox{Sandbox: c.Sandbox, ran: &ran}
	})
	b.send(t, owner, "/run echo isolated")
	run := b.pendingCard(t, "echo isolated")
	b.tap(t, owner, run.ID, "approve")
	refused := b.waitStatus(t, run.ID, cards.StatusRefused)
	if !strings.Contains(refused.Outcome, "the sandbox cannot provide the isolation this action requires (network off); nothing was run") {
		t.Fatalf("refused card = %+v", refused)
	}
	if got := strings.Join(cardStates(t, b, run.ID), " → "); got != "pending → refused" {
		t.Fatalf("the card went %s", got)
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("the sandbox was asked to run %d times", n)
	}
}

// cardStates are the states card id was queued in, oldest first (each
// outbox job under its id).
func cardStates(t *testing.T, b *bundle, id cards.ID) []string {
	t.Helper()
	rows, err := b.st.Pool().Query(b.ctx, `SELECT payload->'card'->>'status' FROM outbox WHERE message_key = $1 ORDER BY id`, string(id))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var seen []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, s)
	}
	return seen
}

// newSealer seals with a fresh data key.
func newSealer(t *testing.T) *secrets.Sealer {
	t.Helper()
	key, err := secrets.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := secrets.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	return sealer
}
