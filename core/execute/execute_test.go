package execute_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/approval"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/taskjob"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	owner core.IdentityID     = "test:owner"
	conv  core.ConversationID = "test:chat"
)

// fakeSandbox runs nothing: it records each argv and answers its words.
type fakeSandbox struct {
	mu   sync.Mutex
	runs [][]string
	// during, when set, runs inside the run; a run whose context ended
	// by then fails as a killed program does.
	during func()
	// untilCancelled: the run lasts until its context ends.
	untilCancelled bool
	// released are the work dirs handed back (Release).
	released []string
	// unavailable and netUnavailable are what Available and
	// NetworkAvailable report (execute.Readiness).
	unavailable, netUnavailable error
}

func (f *fakeSandbox) Available() error { return f.unavailable }

func (f *fakeSandbox) NetworkAvailable() error { return f.netUnavailable }

func (f *fakeSandbox) Release(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, dir)
	return nil
}

func (f *fakeSandbox) releasedDirs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.released)
}

func (f *fakeSandbox) Run(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	f.mu.Lock()
	f.runs = append(f.runs, slices.Clone(req.Argv))
	during, wait := f.during, f.untilCancelled
	f.mu.Unlock()
	if wait {
		if during != nil {
			during()
		}
		<-ctx.Done()
		return core.ExecResult{}, ctx.Err()
	}
	if during != nil {
		during()
		if err := ctx.Err(); err != nil {
			return core.ExecResult{}, err
		}
	}
	return core.ExecResult{Stdout: []byte(strings.Join(req.Argv, " ") + "\n"), Dir: "/nonexistent", Isolation: "none"}, nil
}

func (f *fakeSandbox) ran() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.runs)
}

// checks answers verification commands: exit code 0.
type checks struct {
	n      int
	during func() // when set, runs inside each check
}

func (c *checks) RunCheck(context.Context, []string, string, time.Duration) (int, []byte, error) {
	c.n++
	if c.during != nil {
		c.during()
	}
	return 0, nil, nil
}

// counting is the store as the executor uses it, counting write
// transactions and approval row reads (in and outside them).
type counting struct {
	st                   *store.Store
	txns, txReads, reads int
}

func (c *counting) Do(ctx context.Context, op func(ctx context.Context, tx execute.Tx) ([]audit.Entry, error)) error {
	c.txns++
	return c.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) { return op(ctx, countingTx{tx, c}) })
}

func (c *counting) UnfinishedExecutions(ctx context.Context) ([]core.Execution, error) {
	return c.st.UnfinishedExecutions(ctx)
}

func (c *counting) GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error) {
	c.reads++
	return c.st.GetApproval(ctx, id)
}

type countingTx struct {
	*store.Tx
	c *counting
}

func (t countingTx) GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error) {
	t.c.txReads++
	return t.Tx.GetApproval(ctx, id)
}

type bundle struct {
	ctx    context.Context
	st     *store.Store
	key    ed25519.PrivateKey
	sb     *fakeSandbox
	checks *checks
	count  *counting
	x      *execute.Executor
	// claimed runs when an execution was claimed (Config.Claimed).
	claimed func(id core.ApprovalID)
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	b := &bundle{ctx: ctx, st: st, key: key, sb: &fakeSandbox{}, checks: &checks{}}
	b.count = &counting{st: st}
	b.x, err = execute.New(execute.Config{Store: b.count, Key: key.Public().(ed25519.PublicKey), Sandbox: b.sb,
		Verifier: &verify.Runner{Commands: b.checks}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Claimed: func(id core.ApprovalID) {
			if b.claimed != nil {
				b.claimed(id)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decided proposes argv and approves it as a tap does (core/decide), its
// decision's audit entries written: an execution a real decision queued.
func (b *bundle) decided(t *testing.T, argv []string, checks ...verify.Check) core.ApprovalID {
	t.Helper()
	if len(checks) == 0 {
		checks = []verify.Check{verify.ExitCodeZero()}
	}
	return b.decidedAction(t, core.Action{Tool: "shell", Argv: argv, Verify: checks})
}

// decidedAction is decided for a whole action.
func (b *bundle) decidedAction(t *testing.T, act core.Action) core.ApprovalID {
	t.Helper()
	return b.decideWith(t, b.key, act, nil)
}

// decideWith proposes act signed by key and approves it as a tap does
// (core/decide) in one transaction; then, when set, runs in that
// transaction with the decision and its entries and returns the entries
// to write.
func (b *bundle) decideWith(t *testing.T, key ed25519.PrivateKey, act core.Action,
	then func(tx *store.Tx, r decide.Result, entries []audit.Entry) []audit.Entry) core.ApprovalID {
	t.Helper()
	canonical, _ := act.Canonical()
	hash, _ := act.Hash()
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := core.ApprovalRequest{ID: core.ApprovalID(core.NewID()), Channel: "test", Conversation: conv, Requester: owner,
		ActionCanonical: canonical, ActionHash: hash, Intent: "test", Rationale: "test", Risk: cards.RiskLow,
		Approvers: []string{"role:owner"}, Status: core.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(5 * time.Minute)}
	if err := decide.SignRequest(key, &a); err != nil {
		t.Fatal(err)
	}
	d := decide.New(decide.Config{Key: key, TokenTTL: 10 * time.Minute})
	err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		tx.QueueApproval(a)
		r, err := d.Tap(ctx, tx, core.Turn{Conversation: conv, Sender: owner, Tap: &core.Tap{Card: cards.ID(a.ID), Choice: "approve"}}, core.TrustOwner)
		if err != nil {
			return nil, err
		}
		if r.Queued != a.ID {
			t.Errorf("not approved: %+v", r)
		}
		var entries []audit.Entry
		for _, n := range r.Notes {
			entries = append(entries, audit.Entry{Kind: n.Kind, Actor: string(owner), Conversation: string(conv), Data: n.Data})
		}
		if then != nil {
			entries = then(tx, r, entries)
		}
		return entries, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return a.ID
}

func (b *bundle) execution(t *testing.T, id core.ApprovalID) core.Execution {
	t.Helper()
	ex, err := b.st.GetExecution(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// kinds lists the audit entries naming approval id, oldest first.
func (b *bundle) kinds(t *testing.T, id core.ApprovalID) []string {
	t.Helper()
	rows, err := b.st.AuditTail(b.ctx, 1000, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, r := range rows {
		if r.Entry.Data["approval"] == string(id) {
			ks = append(ks, string(r.Entry.Kind))
		}
	}
	return ks
}

// cards lists the card updates enqueued for approval id, oldest first.
func (b *bundle) cards(t *testing.T, id core.ApprovalID) []*cards.Card {
	t.Helper()
	rows, err := b.st.Pool().Query(b.ctx, `SELECT payload FROM outbox WHERE message_key = $1 AND op = 'update' ORDER BY id`, string(id))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []*cards.Card
	for rows.Next() {
		var raw []byte
		var m core.OutMessage
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m.Card)
	}
	return out
}

func (b *bundle) sql(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := b.st.Pool().Exec(b.ctx, q, args...); err != nil {
		t.Fatal(err)
	}
}

// TestRunCarriesRows: an execution whose checks judge its own result is
// claimed and recorded in two transactions, reading its approval row once
// (locked, in the claim); one whose check runs a program of its own
// records the result first, in three.
func TestRunCarriesRows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		checks []verify.Check
		txns   int
		kinds  string
		checkN int
	}{
		{"checks on the result", nil, 2, "approval.approved token.minted token.consumed execution.started execution.finished verification.passed", 0},
		{"a check runs a program", []verify.Check{{Name: "probe", Run: []string{"true"}, Expect: verify.Expect{ExitCode: new(int)}}}, 3,
			"approval.approved token.minted token.consumed execution.started execution.finished verification.passed", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			id := b.decided(t, []string{"echo", "hi"}, tt.checks...)
			b.x.Run(b.ctx, id)
			if got := b.sb.ran(); len(got) != 1 || !slices.Equal(got[0], []string{"echo", "hi"}) {
				t.Fatalf("the sandbox ran %q", got)
			}
			ex := b.execution(t, id)
			if ex.Status != core.ExecVerified || ex.Result == nil || ex.Result.Stdout != "echo hi\n" || !strings.Contains(ex.Reason, "verified") {
				t.Fatalf("execution = %+v", ex)
			}
			if b.count.txns != tt.txns || b.count.txReads != 1 || b.count.reads != 0 {
				t.Errorf("%d write transactions, %d approval reads in them and %d outside; want %d, 1, 0",
					b.count.txns, b.count.txReads, b.count.reads, tt.txns)
			}
			if got := strings.Join(b.kinds(t, id), " "); got != tt.kinds {
				t.Errorf("audit: %s\nwant:  %s", got, tt.kinds)
			}
			if b.checks.n != tt.checkN {
				t.Errorf("verification programs run: %d, want %d", b.checks.n, tt.checkN)
			}
			// One card update per state the chat has not seen: the
			// decision showed "running…"; the result, and "verifying…"
			// before it when a program checks it.
			cs := b.cards(t, id)
			if len(cs) != tt.txns-1 {
				t.Errorf("%d card updates, want %d", len(cs), tt.txns-1)
			}
			if last := cs[len(cs)-1]; last.Status != cards.StatusDone || last.Output != "echo hi\n" {
				t.Fatalf("last card = %+v", last)
			}
			if _, err := b.st.VerifyAudit(b.ctx); err != nil {
				t.Fatal(err)
			}
			// Run again (a second caller, a restart): nothing to do.
			b.x.Run(b.ctx, id)
			if n := len(b.sb.ran()); n != 1 {
				t.Fatalf("ran %d times, want once", n)
			}
		})
	}
}

// TestSettledRunWakesItsTask: the transition that settles a task's call
// (verified here) queues the task's step job in its transaction, from the
// carried row — the claim and the intermediate states queue none.
func TestSettledRunWakesItsTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.decided(t, []string{"echo", "hi"}, verify.Check{Name: "probe", Run: []string{"true"}, Expect: verify.Expect{ExitCode: new(int)}})
	b.sql(t, `UPDATE approvals SET task_id = 'task-1' WHERE id = $1`, id)
	b.x.Run(b.ctx, id)
	if ex := b.execution(t, id); ex.Status != core.ExecVerified {
		t.Fatalf("execution = %s", ex.Status)
	}
	var n int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'task' = 'task-1'`,
		taskjob.Args{}.Kind()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d step jobs (%v), want 1", n, err)
	}
	if b.count.txns != 3 || b.count.reads != 0 {
		t.Fatalf("%d write transactions, %d approval reads outside them; want 3, 0", b.count.txns, b.count.reads)
	}
}

// TestReleasesWorkDirAfterVerdict: the run's work dir goes back to the
// sandbox (to be removed or kept a while) once the verdict is recorded,
// never while verification may still read it.
func TestReleasesWorkDirAfterVerdict(t *testing.T) {
	t.Parallel()
	for _, checks := range [][]verify.Check{nil, {{Name: "probe", Run: []string{"true"}, Expect: verify.Expect{ExitCode: new(int)}}}} {
		b := setup(t)
		b.checks.during = func() {
			if got := b.sb.releasedDirs(); len(got) != 0 {
				t.Errorf("work dir released while verification runs: %q", got)
			}
		}
		id := b.decided(t, []string{"echo", "hi"}, checks...)
		b.x.Run(b.ctx, id)
		if ex := b.execution(t, id); ex.Status != core.ExecVerified {
			t.Fatalf("execution = %+v", ex)
		}
		if got := b.sb.releasedDirs(); !slices.Equal(got, []string{"/nonexistent"}) {
			t.Fatalf("released %q, want the run's work dir once", got)
		}
	}
}

// TestWhatRunsIsWhatWasChecked: the row is checked in the claim, with the
// row locked, and carried from there: an edit of the stored action before
// the claim is refused by the gate, one after it changes nothing.
func TestWhatRunsIsWhatWasChecked(t *testing.T) {
	t.Parallel()
	evil := []byte(`{"argv":["touch","/tmp/pwned-by-silas-test"],"network":false,"tool":"shell","verify":[]}`)
	t.Run("edited before the claim", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.decided(t, []string{"echo", "fine"})
		b.sql(t, `UPDATE approvals SET action_canonical = $2 WHERE id = $1`, string(id), evil)
		b.x.Run(b.ctx, id)
		if ex := b.execution(t, id); ex.Status != core.ExecRefused || !strings.Contains(ex.Reason, "changed after approval") {
			t.Fatalf("execution = %+v", ex)
		}
		if got := b.sb.ran(); len(got) != 0 {
			t.Fatalf("the sandbox ran %q", got)
		}
	})
	t.Run("edited after the claim", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.decided(t, []string{"echo", "fine"})
		b.claimed = func(id core.ApprovalID) {
			b.sql(t, `UPDATE approvals SET action_canonical = $2 WHERE id = $1`, string(id), evil)
		}
		b.x.Run(b.ctx, id)
		if got := b.sb.ran(); len(got) != 1 || !slices.Equal(got[0], []string{"echo", "fine"}) {
			t.Fatalf("the sandbox ran %q, want the approved echo fine", got)
		}
	})
}

// TestResume: what a previous process left is settled at start — a
// running execution is interrupted and never re-run, a queued one runs
// through the gate, an executed one is verified without running again.
func TestResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	queued := b.decided(t, []string{"echo", "queued"})
	running := b.decided(t, []string{"echo", "running"})
	executed := b.decided(t, []string{"echo", "executed"})
	b.sql(t, `UPDATE executions SET status = 'running', started_at = now() WHERE approval_id = $1`, string(running))
	b.sql(t, `UPDATE executions SET status = 'executed', started_at = now(), finished_at = now(),
		result = '{"exit_code": 0, "stdout": "done\n"}' WHERE approval_id = $1`, string(executed))
	work, err := b.x.Resume(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ex := b.execution(t, running); ex.Status != core.ExecInterrupted || ex.Reason != "interrupted by restart" {
		t.Fatalf("running execution after the restart: %+v", ex)
	}
	if len(work) != 2 {
		t.Fatalf("%d pieces of work to start, want 2 (run the queued one, verify the executed one)", len(work))
	}
	for _, f := range work {
		f(b.ctx)
	}
	if got := b.sb.ran(); len(got) != 1 || !slices.Equal(got[0], []string{"echo", "queued"}) {
		t.Fatalf("the sandbox ran %q, want only the queued echo", got)
	}
	for _, id := range []core.ApprovalID{queued, executed} {
		if ex := b.execution(t, id); ex.Status != core.ExecVerified {
			t.Fatalf("execution %s: %+v", id, ex)
		}
	}
	if c := b.cards(t, running); len(c) != 1 || c[0].Status != cards.StatusInterrupted || len(c[0].Choices) != 0 {
		t.Fatalf("interrupted card = %+v", c)
	}
	if c := b.cards(t, executed); len(c) != 1 || c[0].Status != cards.StatusDone || c[0].Output != "done\n" {
		t.Fatalf("verified card = %+v", c)
	}
}

// TestStoppedRun: a run killed because its task was stopped is
// interrupted, not verified.
func TestStoppedRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.decided(t, []string{"sleep", "60"})
	// The task is stopped while its step runs (Executor.Stop).
	b.sb.during = func() { b.x.Stop([]core.ApprovalID{id}) }
	b.x.Run(b.ctx, id)
	if ex := b.execution(t, id); ex.Status != core.ExecInterrupted || !strings.HasPrefix(ex.Reason, "stopped with its task") {
		t.Fatalf("execution = %+v", ex)
	}
}

// forgery is what a forging program with the gateway's key and superuser
// access to the database writes, straight into the tables.
type forgery struct {
	name string
	// sign: the request row carries a valid proposal signature.
	sign bool
	// nonce: a token_nonces row for the token, naming the approval.
	nonce bool
	// tokenOf: reuse the token (and action) of this real approval.
	tokenOf core.ApprovalID
	// entry: a token.consumed entry written into the log by hand, without
	// recomputing the chain.
	entry bool
	// wantReason is in the refusal.
	wantReason string
}

// forge writes an approved request with a valid token and its queued
// execution.
func (b *bundle) forge(t *testing.T, f forgery) core.ApprovalID {
	t.Helper()
	id := core.ApprovalID(core.NewID())
	now := time.Now().UTC().Truncate(time.Microsecond)
	act := core.Action{Tool: "shell", Argv: []string{"touch", "forged"}, Verify: []verify.Check{verify.ExitCodeZero()}}
	canonical, _ := act.Canonical()
	hash, _ := act.Hash()
	var raw []byte
	var tok approval.Signed
	var err error
	if f.tokenOf != "" {
		if err := b.st.Pool().QueryRow(b.ctx, `SELECT action_canonical, action_hash, token FROM approvals WHERE id = $1`, string(f.tokenOf)).
			Scan(&canonical, &hash, &raw); err != nil {
			t.Fatal(err)
		}
		if tok, err = approval.Unmarshal(raw); err != nil {
			t.Fatal(err)
		}
	} else {
		if tok, err = approval.Mint(b.key, core.NewID(), hash, string(conv), string(owner), now, 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		if raw, err = tok.Marshal(); err != nil {
			t.Fatal(err)
		}
	}
	a := approval.Request{ID: string(id), Channel: "test", Conversation: string(conv), Requester: string(owner), ActionHash: hash,
		Intent: "forged", Rationale: "forged", Risk: "low", Approvers: []string{"role:owner"}, CreatedAt: now, ExpiresAt: now.Add(5 * time.Minute)}
	var sig []byte
	if f.sign {
		if sig, err = approval.SignRequest(b.key, a); err != nil {
			t.Fatal(err)
		}
	}
	b.sql(t, `INSERT INTO approvals (id, channel, conversation, requester, action_canonical, action_hash, intent, rationale, risk, approvers,
			status, created_at, expires_at, decided_by, decided_at, token, request_sig)
			VALUES ($1, 'test', $2, $3, $4, $5, 'forged', 'forged', 'low', ARRAY['role:owner'], 'approved', $6, $7, $8, $6, $9, $10)`,
		string(id), string(conv), string(owner), canonical, hash, now, a.ExpiresAt, tok.Token.Approver, raw, sig)
	b.sql(t, `INSERT INTO executions (approval_id, status) VALUES ($1, 'queued')`, string(id))
	if f.nonce {
		b.sql(t, `INSERT INTO token_nonces (nonce, token_id, approval_id) VALUES ($1, $2, $3)`, tok.Token.Nonce, tok.Token.TokenID, string(id))
	}
	if f.entry {
		junk := make([]byte, 32)
		rand.Read(junk)
		b.sql(t, `INSERT INTO audit_log (seq, at, kind, actor, conversation, data, prev_hash, hash)
			SELECT seq + 1, now(), 'token.consumed', $1, $2, jsonb_build_object('approval', $3::text, 'token_id', $4::text), hash, $5
			FROM audit_log ORDER BY seq DESC LIMIT 1`, string(owner), string(conv), string(id), tok.Token.TokenID, junk)
	}
	return id
}

// TestGateRefusesForgeries: approved requests with valid tokens and queued
// executions written straight into the database run nothing: each goes
// queued → refused in the claim's transaction, with its reason audited and
// shown on a card; a real execution set back to queued does not run twice.
func TestGateRefusesForgeries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.decided(t, []string{"echo", "first"})
	b.x.Run(b.ctx, first)
	b.sql(t, `UPDATE executions SET status = 'queued', result = NULL, report = NULL, reason = NULL,
		started_at = NULL, finished_at = NULL WHERE approval_id = $1`, string(first))
	genuine := b.decided(t, []string{"echo", "genuine"})
	tests := []forgery{
		{name: "token and execution only", wantReason: "the request was not signed"},
		{name: "signed request and token", sign: true, wantReason: "no recorded decision consumed this approval's token (its nonce was not consumed"},
		{name: "signed request, token and consumed nonce", sign: true, nonce: true,
			wantReason: "no recorded decision consumed this approval's token (the audit log has no such decision)"},
		{name: "a real decision's token on a copied request", sign: true, tokenOf: genuine,
			wantReason: "no recorded decision consumed this approval's token (its nonce was not consumed"},
		{name: "hand-written token.consumed", sign: true, nonce: true, entry: true,
			wantReason: "no recorded decision consumed this approval's token (the decision's audit entry is not linked"},
	}
	for _, f := range tests {
		t.Run(f.name, func(t *testing.T) {
			id := b.forge(t, f)
			before := len(b.sb.ran())
			b.x.Run(b.ctx, id)
			if n := len(b.sb.ran()); n != before {
				t.Fatalf("a forged action ran")
			}
			ex := b.execution(t, id)
			if ex.Status != core.ExecRefused || !strings.Contains(ex.Reason, f.wantReason) {
				t.Fatalf("execution %s, %q; want refused, %q", ex.Status, ex.Reason, f.wantReason)
			}
			if got := b.kinds(t, id); len(got) == 0 || got[len(got)-1] != string(audit.KindExecutionRefused) {
				t.Fatalf("audit: %v", got)
			}
			if c := b.cards(t, id); len(c) != 1 || c[0].Status != cards.StatusRefused || !strings.Contains(c[0].Outcome, f.wantReason) || len(c[0].Choices) != 0 {
				t.Fatalf("cards = %+v", c)
			}
			if f.entry {
				// The hand-written entry's hash is not its own: the chain
				// shows it.
				if _, err := b.st.VerifyAudit(b.ctx); err == nil {
					t.Fatal("the chain verifies with a hand-written entry in it")
				}
			}
		})
	}
	t.Run("real execution set back to queued", func(t *testing.T) {
		b.x.Run(b.ctx, first)
		if ex := b.execution(t, first); ex.Status != core.ExecRefused || !strings.Contains(ex.Reason, "started before") {
			t.Fatalf("execution = %+v", ex)
		}
	})
	t.Run("real decision", func(t *testing.T) {
		b.x.Run(b.ctx, genuine)
		if ex := b.execution(t, genuine); ex.Status != core.ExecVerified {
			t.Fatalf("execution = %+v", ex)
		}
	})
	if got := b.sb.ran(); len(got) != 2 || !slices.Equal(got[1], []string{"echo", "genuine"}) {
		t.Fatalf("the sandbox ran %q, want echo first and echo genuine", got)
	}
}

// TestRefuseUnreadyReadsNoRow: the declared-secret check in the approving
// tap's transaction works on the request the decider carried — the tap's
// approval reads stay the decider's and the claim's (docs/architecture.md,
// "One tap").
func TestRefuseUnreadyReadsNoRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.decided(t, []string{"echo", "hi"})
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
	if u != nil {
		t.Fatalf("refused an action that declares no secret: %+v", u)
	}
	if b.count.txReads != 0 || b.count.reads != 0 {
		t.Fatalf("%d approval reads in the transaction, %d outside; want 0", b.count.txReads, b.count.reads)
	}
}
