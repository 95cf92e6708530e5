package execute_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/verify"
)

// Issue 22 point 8: a run that cannot start for a reason known when it is
// approved — no executor for its tool, isolation the sandbox says it cannot
// give (network off, or network on without pasta) — is refused in the
// approving transaction: its card goes to refused with the reason, never
// through "running…", and the sandbox is never asked.
func TestRefuseUnreadyBeforeRunning(t *testing.T) {
	t.Parallel()
	noNS := fmt.Errorf("sandbox: no user namespaces: %w", core.ErrIsolationUnavailable)
	noPasta := fmt.Errorf("sandbox: network-on actions need pasta (Debian package passt): %w", core.ErrIsolationUnavailable)
	for _, tc := range []struct {
		name           string
		act            core.Action
		unavailable    error
		netUnavailable error
		want           string // "" = not refused
	}{
		{name: "ready", act: core.Action{Tool: "shell", Argv: []string{"echo", "hi"}}, netUnavailable: noPasta},
		{name: "no executor", act: core.Action{Tool: "teleport", Argv: []string{"x"}}, want: `no executor for tool "teleport"`},
		{name: "isolation unavailable", act: core.Action{Tool: "shell", Argv: []string{"echo", "hi"}}, unavailable: noNS,
			want: "the sandbox cannot provide the isolation this action requires (network off); nothing was run"},
		{name: "network on without pasta", act: core.Action{Tool: "shell", Argv: []string{"curl", "https://example.org"}, Network: true},
			netUnavailable: noPasta, want: "(network on: network-on actions need pasta (Debian package passt): required isolation is not available); nothing was run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.sb.unavailable, b.sb.netUnavailable = tc.unavailable, tc.netUnavailable
			tc.act.Verify = []verify.Check{verify.ExitCodeZero()}
			id := b.decidedAction(t, tc.act)
			a, err := b.st.GetApproval(b.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			var u *execute.Unready
			if err := b.count.Do(b.ctx, func(ctx context.Context, tx execute.Tx) ([]audit.Entry, error) {
				u, err = b.x.RefuseUnready(ctx, tx, a, owner)
				return nil, err
			}); err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if u != nil {
					t.Fatalf("refused a run that can start: %+v", u)
				}
				return
			}
			if u == nil || !strings.Contains(u.Reason, tc.want) {
				t.Fatalf("refusal = %+v, want one that says %q", u, tc.want)
			}
			if u.Card.Status != cards.StatusRefused || !strings.Contains(u.Card.Outcome, tc.want) {
				t.Fatalf("card = %s %q", u.Card.Status, u.Card.Outcome)
			}
			if ex := b.execution(t, id); ex.Status != core.ExecRefused {
				t.Fatalf("execution = %s", ex.Status)
			}
			b.x.Run(b.ctx, id)
			if len(b.sb.runs) != 0 {
				t.Fatalf("the sandbox was asked to run %v", b.sb.runs)
			}
		})
	}
}
