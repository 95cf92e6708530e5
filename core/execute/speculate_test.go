package execute_test

import (
	"context"
	"crypto/ed25519"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
)

// speculating is the store as the executor uses it, recording for each
// write transaction whether each run of its op speculated (store.Tx
// Speculate: false when it runs again after a guard failed).
type speculating struct {
	st   *store.Store
	mu   sync.Mutex
	runs [][]bool
}

func (s *speculating) Do(ctx context.Context, op func(ctx context.Context, tx execute.Tx) ([]audit.Entry, error)) error {
	s.mu.Lock()
	s.runs = append(s.runs, nil)
	i := len(s.runs) - 1
	s.mu.Unlock()
	return s.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		s.mu.Lock()
		s.runs[i] = append(s.runs[i], tx.Speculate())
		s.mu.Unlock()
		return op(ctx, tx)
	})
}

func (s *speculating) UnfinishedExecutions(ctx context.Context) ([]core.Execution, error) {
	return s.st.UnfinishedExecutions(ctx)
}

func (s *speculating) GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error) {
	return s.st.GetApproval(ctx, id)
}

// speculatingExecutor is an executor of b's sandbox and checks whose store
// records, per transaction, whether each run of its op speculated.
func (b *bundle) speculatingExecutor(t *testing.T) (*execute.Executor, *speculating) {
	t.Helper()
	sp := &speculating{st: b.st}
	x, err := execute.New(execute.Config{Store: sp, Key: b.key.Public().(ed25519.PublicKey), Sandbox: b.sb,
		Verifier: &verify.Runner{Commands: b.checks}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close(context.Background()) })
	return x, sp
}

// TestVerdictLostRace: a transition is speculated (its card edit and
// entries queued with the guarded compare-and-swap, one round trip); when
// the row left the carried status meanwhile — here another instance
// marked the run interrupted while it ran, as a takeover of a process
// thought dead does — the guard fails, nothing of the speculation commits,
// and the transaction runs again without speculation, which answers as
// before: the verdict is not recorded (no entries, no card edit, the work
// dir kept), the row stays as the other instance left it.
func TestVerdictLostRace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	x, sp := b.speculatingExecutor(t)
	id := b.decided(t, []string{"echo", "lost"})
	b.sb.during = func() {
		b.sql(t, `UPDATE executions SET status = 'interrupted', reason = 'taken over' WHERE approval_id = $1`, string(id))
	}
	x.Run(b.ctx, id)
	if got := b.sb.ran(); len(got) != 1 {
		t.Fatalf("the sandbox ran %q, want once", got)
	}
	// The claim speculated and won; the verdict speculated, lost, and ran
	// again without speculation.
	if want := [][]bool{{true}, {true, false}}; !slices.EqualFunc(sp.runs, want, slices.Equal) {
		t.Fatalf("runs of the transactions' ops (speculating?): %v, want %v", sp.runs, want)
	}
	if ex := b.execution(t, id); ex.Status != core.ExecInterrupted || ex.Reason != "taken over" || ex.Result != nil {
		t.Fatalf("execution = %+v, want interrupted by the other instance, no result", ex)
	}
	if got, want := strings.Join(b.kinds(t, id), " "), "approval.approved token.minted token.consumed execution.started"; got != want {
		t.Fatalf("audit: %s\nwant:  %s", got, want)
	}
	if cs := b.cards(t, id); len(cs) != 0 {
		t.Fatalf("%d card updates (the first %+v), want none: the verdict did not apply", len(cs), cs[0])
	}
	if got := b.sb.releasedDirs(); len(got) != 0 {
		t.Fatalf("released %q: the verdict was not recorded", got)
	}
	if _, err := b.st.VerifyAudit(b.ctx); err != nil {
		t.Fatal(err)
	}
}

// TestClaimSpeculatesOnce: an execution claimed and recorded as usual
// speculates in each transaction, once (no guard fails): the claim, then
// the result with its verdict.
func TestClaimSpeculatesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	x, sp := b.speculatingExecutor(t)
	id := b.decided(t, []string{"echo", "won"})
	x.Run(b.ctx, id)
	if ex := b.execution(t, id); ex.Status != core.ExecVerified {
		t.Fatalf("execution = %+v", ex)
	}
	if want := [][]bool{{true}, {true}}; !slices.EqualFunc(sp.runs, want, slices.Equal) {
		t.Fatalf("runs of the transactions' ops (speculating?): %v, want %v", sp.runs, want)
	}
	// Run again (a second caller): the claim's refusal misses the
	// verified row (speculated, lost, run again), nothing runs.
	sp.runs = nil
	x.Run(b.ctx, id)
	if n := len(b.sb.ran()); n != 1 {
		t.Fatalf("ran %d times, want once", n)
	}
	if ex := b.execution(t, id); ex.Status != core.ExecVerified {
		t.Fatalf("execution after a second run = %+v", ex)
	}
	if want := [][]bool{{true, false}}; !slices.EqualFunc(sp.runs, want, slices.Equal) {
		t.Fatalf("runs of the second claim's op: %v, want %v", sp.runs, want)
	}
}
