package execute_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
)

// offer is what a test changes of the claim with the decision: the
// transaction it sees (wrap), the request and entries it is shown (edit).
type offer struct {
	key  ed25519.PrivateKey // signs the request and the token; nil: b.key
	wrap func(tx *store.Tx) execute.ClaimTx
	edit func(a *core.ApprovalRequest, entries []audit.Entry) []audit.Entry
}

// claimResult is what ClaimWithDecision answered.
type claimResult struct {
	id      core.ApprovalID
	claimed *execute.Claimed
	started audit.Entry
	refused string
}

// decideAndClaim approves an "echo" as a tap does (core/decide) and, in
// the same transaction, offers its execution to x's claim with the
// decision, appending the claim's entry after the decision's as the
// engine does.
func (b *bundle) decideAndClaim(t *testing.T, x *execute.Executor, o offer) claimResult {
	t.Helper()
	key := o.key
	if key == nil {
		key = b.key
	}
	act := core.Action{Tool: "shell", Argv: []string{"echo", "claimed"}, Verify: []verify.Check{verify.ExitCodeZero()}}
	var res claimResult
	res.id = b.decideWith(t, key, act, func(tx *store.Tx, r decide.Result, entries []audit.Entry) []audit.Entry {
		approved := r.Approved
		if o.edit != nil {
			entries = o.edit(&approved, entries)
		}
		var ctl execute.ClaimTx = tx
		if o.wrap != nil {
			ctl = o.wrap(tx)
		}
		res.claimed, res.started, res.refused = x.ClaimWithDecision(ctl, approved, entries)
		if res.claimed != nil {
			entries = append(entries, res.started)
		}
		return entries
	})
	return res
}

// executor is another executor on b's store and sandbox, changed by mod.
func (b *bundle) executor(t *testing.T, mod func(c *execute.Config)) *execute.Executor {
	t.Helper()
	cfg := execute.Config{Store: b.count, Key: b.key.Public().(ed25519.PublicKey), Sandbox: b.sb,
		Verifier: &verify.Runner{Commands: b.checks}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mod != nil {
		mod(&cfg)
	}
	x, err := execute.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close(context.Background()) })
	return x
}

// sameTransaction reports whether the audit entries of kinds a and b for
// approval id were written by one transaction.
func (b *bundle) sameTransaction(t *testing.T, id core.ApprovalID, ka, kb audit.Kind) bool {
	t.Helper()
	var txns, kinds int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(DISTINCT xmin::text), count(DISTINCT kind) FROM audit_log
		WHERE data->>'approval' = $1 AND kind IN ($2, $3)`, string(id), string(ka), string(kb)).Scan(&txns, &kinds); err != nil {
		t.Fatal(err)
	}
	return txns == 1 && kinds == 2
}

// TestClaimWithDecision: the executor of the deciding process claims the
// execution in the decision's transaction — the row written running, by
// this instance, the claim's entry after the decision's in that same
// transaction — and runs it once that committed, with no transaction of
// its own before the result's: one write transaction of the executor's
// where the ordinary claim takes two (TestRunCarriesRows).
func TestClaimWithDecision(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var claimedHook []core.ApprovalID
	b.claimed = func(id core.ApprovalID) { claimedHook = append(claimedHook, id) }
	res := b.decideAndClaim(t, b.x, offer{})
	if res.claimed == nil || res.refused != "" {
		t.Fatalf("not claimed with the decision (refused %q)", res.refused)
	}
	var status string
	var started bool
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT status, started_at IS NOT NULL FROM executions WHERE approval_id = $1`, string(res.id)).
		Scan(&status, &started); err != nil {
		t.Fatal(err)
	}
	if status != "running" || !started {
		t.Fatalf("execution row %s (started %v), want running, started", status, started)
	}
	if !b.sameTransaction(t, res.id, audit.KindTokenConsumed, audit.KindExecutionStarted) {
		t.Fatal("the claim's entry was not written by the decision's transaction")
	}
	if b.count.txns != 0 {
		t.Fatalf("%d executor transactions before the run, want 0", b.count.txns)
	}
	done := make(chan struct{})
	go func() { b.x.StartClaimed(res.claimed); b.x.Close(context.Background()); close(done) }()
	<-done
	if ex := b.execution(t, res.id); ex.Status != core.ExecVerified {
		t.Fatalf("execution = %+v", ex)
	}
	if got := b.sb.ran(); len(got) != 1 || !slices.Equal(got[0], []string{"echo", "claimed"}) {
		t.Fatalf("the sandbox ran %q", got)
	}
	if b.count.txns != 1 || b.count.txReads != 0 || b.count.reads != 0 {
		t.Errorf("%d executor transactions, %d approval reads in them, %d outside; want 1, 0, 0", b.count.txns, b.count.txReads, b.count.reads)
	}
	if !slices.Equal(claimedHook, []core.ApprovalID{res.id}) {
		t.Errorf("Claimed hook calls %v, want once for %s", claimedHook, res.id)
	}
	const want = "approval.approved token.minted token.consumed execution.started execution.finished verification.passed"
	if got := strings.Join(b.kinds(t, res.id), " "); got != want {
		t.Errorf("audit: %s\nwant:  %s", got, want)
	}
	if _, err := b.st.VerifyAudit(b.ctx); err != nil {
		t.Fatal(err)
	}
	// A second claim (a restart, another caller) finds nothing to do.
	b.x.Run(b.ctx, res.id)
	if n := len(b.sb.ran()); n != 1 {
		t.Fatalf("ran %d times, want once", n)
	}
}

// TestClaimWithDecisionGate: the gate in the decision's transaction is the
// claim's: a token another key signed, one expired by the executor's
// clock, an action changed after the token was minted, a nonce this
// transaction did not consume for that token, a decision whose
// "token.consumed" entry is not among the transaction's, an execution
// whose start the log records already — each is refused there, the
// execution left queued; its own claim then refuses it too and nothing
// runs.
func TestClaimWithDecisionGate(t *testing.T) {
	t.Parallel()
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	tests := []struct {
		name  string
		o     offer
		later func(c *execute.Config)
		want  string
	}{
		{"token of another key", offer{key: otherKey}, nil, "signature does not verify"},
		{"expired for the executor", offer{}, func(c *execute.Config) { c.Now = func() time.Time { return time.Now().Add(time.Hour) } },
			"expired before execution"},
		{"action changed", offer{edit: func(a *core.ApprovalRequest, e []audit.Entry) []audit.Entry {
			a.ActionCanonical = []byte(`{"argv":["touch","/tmp/pwned-by-silas-test"],"network":false,"tool":"shell","verify":[]}`)
			return e
		}}, nil, "changed after approval"},
		// The same action, encoded otherwise: its bytes no longer hash to
		// the token's value, so the gate re-encodes the decoded action (as
		// it always did), the token holds, and the request's own hash says
		// what changed — the reason the gate gave before it hashed the
		// stored bytes directly.
		{"the same action encoded otherwise", offer{edit: func(a *core.ApprovalRequest, e []audit.Entry) []audit.Entry {
			var v any
			if err := json.Unmarshal(a.ActionCanonical, &v); err != nil {
				panic(err)
			}
			a.ActionCanonical, _ = json.MarshalIndent(v, "", "  ")
			return e
		}}, nil, "the request was altered after it was proposed"},
		{"nonce not this token's", offer{wrap: func(tx *store.Tx) execute.ClaimTx { return otherNonce{tx} }}, nil, "its nonce was not consumed"},
		{"no token.consumed entry", offer{edit: func(_ *core.ApprovalRequest, e []audit.Entry) []audit.Entry {
			return slices.DeleteFunc(e, func(x audit.Entry) bool { return x.Kind == audit.KindTokenConsumed })
		}}, nil, "the audit log has no such decision"},
		{"token.consumed of another conversation", offer{edit: func(_ *core.ApprovalRequest, e []audit.Entry) []audit.Entry {
			for i := range e {
				e[i].Conversation = "test:elsewhere"
			}
			return e
		}}, nil, "the audit log has no such decision"},
		{"started before", offer{wrap: func(tx *store.Tx) execute.ClaimTx { return startedBefore{tx} }}, nil, "started before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			x := b.x
			if tt.later != nil {
				x = b.executor(t, tt.later)
			}
			res := b.decideAndClaim(t, x, tt.o)
			if res.claimed != nil || !strings.Contains(res.refused, tt.want) {
				t.Fatalf("claimed %v, refused %q; want refused %q", res.claimed != nil, res.refused, tt.want)
			}
			if ex := b.execution(t, res.id); ex.Status != core.ExecQueued {
				t.Fatalf("execution %s, want queued for its own claim", ex.Status)
			}
			if tt.o.edit != nil || tt.o.wrap != nil {
				return // the stored rows are a real decision: its own claim would run it
			}
			x.Run(b.ctx, res.id)
			if ex := b.execution(t, res.id); ex.Status != core.ExecRefused || !strings.Contains(ex.Reason, tt.want) {
				t.Fatalf("after its own claim: %s, %q", ex.Status, ex.Reason)
			}
			if got := b.sb.ran(); len(got) != 0 {
				t.Fatalf("the sandbox ran %q", got)
			}
		})
	}
}

// otherNonce is a transaction whose decision consumed another nonce.
type otherNonce struct{ *store.Tx }

func (o otherNonce) Decided(id core.ApprovalID) ([]byte, string, bool, bool) {
	_, tokenID, started, ok := o.Tx.Decided(id)
	return []byte("another nonce"), tokenID, started, ok
}

// startedBefore is a transaction that read a start of the execution in
// the audit log.
type startedBefore struct{ *store.Tx }

func (s startedBefore) Decided(id core.ApprovalID) ([]byte, string, bool, bool) {
	n, tokenID, _, ok := s.Tx.Decided(id)
	return n, tokenID, true, ok
}

// TestClaimWithDecisionDeclines: an executor that will not run the
// execution at once — held, asked to claim apart, closed — leaves it
// queued for the ordinary claim, refusing nothing.
func TestClaimWithDecisionDeclines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(c *execute.Config)
		stop bool
	}{
		{"held", func(c *execute.Config) { c.Hold = func(core.ApprovalID) bool { return true } }, false},
		{"apart", func(c *execute.Config) { c.Apart = func(core.ApprovalID) bool { return true } }, false},
		{"closed", func(*execute.Config) {}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			x := b.executor(t, tt.mod)
			if tt.stop {
				x.Close(context.Background())
			}
			res := b.decideAndClaim(t, x, offer{})
			if res.claimed != nil || res.refused != "" {
				t.Fatalf("claimed %v, refused %q; want neither", res.claimed != nil, res.refused)
			}
			if ex := b.execution(t, res.id); ex.Status != core.ExecQueued {
				t.Fatalf("execution %s, want queued", ex.Status)
			}
			if b.sameTransaction(t, res.id, audit.KindTokenConsumed, audit.KindExecutionStarted) {
				t.Fatal("a start was written with the decision")
			}
			// The ordinary claim runs it.
			b.x.Run(b.ctx, res.id)
			if ex := b.execution(t, res.id); ex.Status != core.ExecVerified {
				t.Fatalf("after its claim: %+v", ex)
			}
		})
	}
}

// TestClaimedWithDecisionThenCrashed: a process that dies after the
// decision's commit and before the run leaves the execution running and
// never started, as one dying between a claim's commit and its run: the
// next start marks it interrupted, shows it so on its card and never runs
// it.
func TestClaimedWithDecisionThenCrashed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.decideAndClaim(t, b.x, offer{})
	if res.claimed == nil {
		t.Fatalf("not claimed with the decision (refused %q)", res.refused)
	}
	// The process dies here: StartClaimed is never called.
	next := b.executor(t, nil)
	if err := next.ResumeAll(b.ctx); err != nil {
		t.Fatal(err)
	}
	next.Close(context.Background())
	ex := b.execution(t, res.id)
	if ex.Status != core.ExecInterrupted || !strings.Contains(ex.Reason, "interrupted by restart") {
		t.Fatalf("execution = %s, %q; want interrupted", ex.Status, ex.Reason)
	}
	cs := b.cards(t, res.id)
	if len(cs) != 1 || cs[0].Status != cards.StatusInterrupted || !strings.Contains(cs[0].Outcome, "not re-run") {
		t.Fatalf("card updates %+v, want one: interrupted", cs)
	}
	if got := b.sb.ran(); len(got) != 0 {
		t.Fatalf("the sandbox ran %q", got)
	}
	const want = "approval.approved token.minted token.consumed execution.started execution.interrupted"
	if got := strings.Join(b.kinds(t, res.id), " "); got != want {
		t.Errorf("audit: %s\nwant:  %s", got, want)
	}
}

// TestRefusalLogNamesTheApproval: the executor makes its per-execution
// logger only where it logs a line; every such line still names the
// approval, as the logger it carried per execution did.
func TestRefusalLogNamesTheApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	x := b.executor(t, func(c *execute.Config) {
		c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
		c.Now = func() time.Time { return time.Now().Add(time.Hour) } // the token expired before execution
	})
	res := b.decideAndClaim(t, x, offer{})
	if res.claimed != nil {
		t.Fatal("claimed with an expired token")
	}
	x.Run(b.ctx, res.id)
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, msg := range []string{"the execution gate refused to claim", "execution refused before it started"} {
		i := strings.Index(out, msg)
		if i < 0 {
			t.Fatalf("no %q line in:\n%s", msg, out)
		}
		line, _, _ := strings.Cut(out[i:], "\n")
		if !strings.Contains(line, "approval="+string(res.id)) {
			t.Errorf("%q does not name the approval: %s", msg, line)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
