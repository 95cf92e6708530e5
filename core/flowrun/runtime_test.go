package flowrun

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowjob"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// The runtime on its own: real PostgreSQL, and a fake of the core's
// proposing port that stores a plain pending approval request — so what
// these tests see is only what the runtime itself writes and reads. The
// test plays the decider and the executor (settle), and River (advance,
// timers delivered by hand from the job rows), so every step is
// deterministic. The whole path through the real engine, sandbox and web
// chat is adapters/webchat's TestFlowThroughTheWebChat and cmd/silas's
// TestFlowSurvivesSIGKILL.

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	owner = core.IdentityID("web:owner")
	conv  = core.ConversationID("web:c1")
)

type fakeActions struct {
	mu       sync.Mutex
	proposed []core.ProposedAction
	stopped  []core.ApprovalID
}

func (f *fakeActions) Propose(_ context.Context, tx propose.Tx, owner string, origin core.Turn, pa core.ProposedAction) (propose.Step, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.proposed = append(f.proposed, pa)
	canonical, err := pa.Action.Canonical()
	if err != nil {
		return propose.Step{}, err
	}
	hash, _ := pa.Action.Hash()
	now := tx.Now()
	a := core.ApprovalRequest{ID: core.ApprovalID(core.NewID()), Channel: origin.Channel, Conversation: origin.Conversation,
		Requester: origin.Sender, ActionCanonical: canonical, ActionHash: hash, Intent: pa.Intent, Risk: cards.RiskLow,
		Approvers: []string{"role:owner"}, Status: core.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(time.Hour), Task: owner}
	tx.QueueApproval(a)
	return propose.Step{Approval: a.ID, Messages: 1}, nil
}

func (f *fakeActions) Proposed(propose.Step) {}

func (f *fakeActions) StopRuns(ids []core.ApprovalID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, ids...)
}

type nopOutbox struct{}

func (nopOutbox) Kick(core.ConversationID, int) {}

// shown is a turn's outcome.
type shown struct {
	replies        []string
	cards, updates []*cards.Card
	audit          []audit.Entry
	after          []func()
}

func (s *shown) Reply(format string, a ...any) { s.replies = append(s.replies, format) }
func (s *shown) Card(c *cards.Card)            { s.cards = append(s.cards, c) }
func (s *shown) Update(c *cards.Card)          { s.updates = append(s.updates, c) }
func (s *shown) Audit(entries ...audit.Entry)  { s.audit = append(s.audit, entries...) }
func (s *shown) After(f func())                { s.after = append(s.after, f) }

type bundle struct {
	ctx     context.Context
	st      *store.Store
	rt      *Runtime
	actions *fakeActions
	dir     string
}

func setup(t testing.TB, files map[string]string, opts ...func(*Config)) *bundle {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := &bundle{ctx: ctx, st: st, actions: &fakeActions{}, dir: dir}
	cat := Dirs{Sources: Sources(os.DirFS("../../configs/flows"), dir, os.DirFS(dir))}
	cfg := Config{Store: st, Catalog: cat, Logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&cfg)
	}
	b.rt, err = New(cfg, b.actions, nopOutbox{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func origin() core.Turn {
	return core.Turn{Channel: "web", Conversation: conv, Sender: owner, ChatKind: core.ChatDirect,
		Evidence: core.Evidence{Authenticated: true, Method: "test"}, At: time.Now()}
}

// start stores a run as `silas flow run` does and works its first job.
func (b *bundle) start(t *testing.T, name string, args ...string) string {
	t.Helper()
	row, err := Start(b.ctx, b.st, b.rt.cfg.Catalog, name, args, origin(), 4)
	if err != nil {
		t.Fatal(err)
	}
	b.advance(t, row.ID, nil)
	return row.ID
}

func (b *bundle) advance(t *testing.T, run string, timer *flowjob.Timer) {
	t.Helper()
	if err := b.rt.Advance(b.ctx, run, timer); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) run(t *testing.T, id string) (core.FlowRun, *flow.Run) {
	t.Helper()
	row, err := b.st.GetFlowRun(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := flow.DecodeRun(row.State)
	if err != nil {
		t.Fatal(err)
	}
	return row, fr
}

func (b *bundle) statuses(t *testing.T, id string) string {
	t.Helper()
	_, fr := b.run(t, id)
	row, _ := b.run(t, id)
	p, err := b.rt.machine(row)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, n := range p.f.Nodes {
		parts = append(parts, n.ID+"="+string(fr.Nodes[n.ID].Status))
	}
	return strings.Join(parts, " ")
}

// open lists the pending approvals of the run, by the command they run.
func (b *bundle) open(t *testing.T) map[string]core.ApprovalID {
	t.Helper()
	rows, err := b.st.Pool().Query(b.ctx, `SELECT id, action_canonical FROM approvals WHERE status = 'pending'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]core.ApprovalID{}
	for rows.Next() {
		var id string
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			t.Fatal(err)
		}
		var a core.Action
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		out[a.CommandLine()] = core.ApprovalID(id)
	}
	return out
}

// settle plays the decider and the executor: the approval approved, its
// execution recorded (verified or failed) with stdout — and, as the
// executor's transaction does, the run's step job queued with it.
func (b *bundle) settle(t *testing.T, id core.ApprovalID, verified bool, stdout string) {
	t.Helper()
	err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		a, err := tx.GetApproval(ctx, id)
		if err != nil {
			return nil, err
		}
		if _, err := tx.TransitionApproval(ctx, id, []core.ApprovalStatus{core.ApprovalPending}, core.ApprovalApproved, owner, []byte("t")); err != nil {
			return nil, err
		}
		if err := tx.QueueExecution(id); err != nil {
			return nil, err
		}
		to := core.ExecVerified
		if !verified {
			to = core.ExecFailed
		}
		code := 0
		if !verified {
			code = 1
		}
		if _, err := tx.TransitionExecution(ctx, id, core.ExecQueued, to, core.ExecUpdate{Result: &core.ExecRecord{ExitCode: code, Stdout: stdout}}); err != nil {
			return nil, err
		}
		tx.QueueTaskStep(a.Task)
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	run, ok := core.FlowRunOf(b.approvalTask(t, id))
	if !ok {
		t.Fatalf("approval %s does not name its run", id)
	}
	b.advance(t, run, nil)
}

func (b *bundle) approvalTask(t *testing.T, id core.ApprovalID) string {
	t.Helper()
	a, err := b.st.GetApproval(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return a.Task
}

// inTurn runs f in a transaction as the engine runs a turn's work.
func (b *bundle) inTurn(t *testing.T, f func(ctx context.Context, tx *store.Tx, o core.TaskOut) error) *shown {
	t.Helper()
	var got *shown
	err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		got = &shown{}
		if err := f(ctx, tx, got); err != nil {
			return nil, err
		}
		return got.audit, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range got.after {
		f()
	}
	return got
}

// gate answers the run's open gate with choice i.
func (b *bundle) gate(t *testing.T, i int) core.TaskTap {
	t.Helper()
	var card string
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT card FROM flow_attempts WHERE card IS NOT NULL AND status = 'running'`).Scan(&card); err != nil {
		t.Fatalf("no open gate: %v", err)
	}
	var res core.TaskTap
	st := core.StoredTurn{Seq: 2, Turn: origin()}
	b.inTurn(t, func(ctx context.Context, tx *store.Tx, o core.TaskOut) error {
		var err error
		res, err = b.rt.Tap(ctx, tx, st, core.TrustOwner, core.Tap{Card: cards.ID(card), Choice: "a" + string(rune('1'+i))}, o)
		return err
	})
	return res
}

// timers lists the run's scheduled timer jobs.
func (b *bundle) timers(t *testing.T) []struct {
	timer flowjob.Timer
	at    time.Time
} {
	t.Helper()
	rows, err := b.st.Pool().Query(b.ctx, `SELECT args, scheduled_at FROM river_job WHERE kind = 'silas_flow_step' AND args ? 'timer' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []struct {
		timer flowjob.Timer
		at    time.Time
	}
	for rows.Next() {
		var raw []byte
		var at time.Time
		if err := rows.Scan(&raw, &at); err != nil {
			t.Fatal(err)
		}
		var a flowjob.Args
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		out = append(out, struct {
			timer flowjob.Timer
			at    time.Time
		}{*a.Timer, at})
	}
	return out
}

func (b *bundle) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := b.st.Pool().QueryRow(b.ctx, q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// The shipped disk-cleanup example runs on the runtime: two parallel
// actions, the if, the gate, the cleaning action.
func TestDiskCleanupExampleRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	run := b.start(t, "disk-cleanup", "threshold=50")
	open := b.open(t)
	usage, biggest := open["sh -c 'df --output=pcent / | tail -1 | tr -dc 0-9'"], open["sh -c 'du -sh /var/log/* | sort -h | tail -5'"]
	if len(open) != 2 || usage == "" || biggest == "" {
		t.Fatalf("open approvals = %v", open)
	}
	b.settle(t, biggest, true, "1G a.gz\n")
	b.settle(t, usage, true, "91\n")
	if tap := b.gate(t, 0); !tap.Handled || tap.Refused != "" {
		t.Fatalf("gate tap = %+v", tap)
	}
	clean := b.open(t)["sh -c 'find /var/log -name '\\''*.gz'\\'' -mtime +14 -delete'"]
	if clean == "" {
		t.Fatalf("no cleaning approval: %v", b.open(t))
	}
	b.settle(t, clean, true, "")
	if got, want := b.statuses(t, run), "usage=succeeded biggest=succeeded full=succeeded ask=succeeded clean=succeeded fine=skipped"; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if row, _ := b.run(t, run); row.Status != "succeeded" || row.FinishedAt.IsZero() {
		t.Fatalf("run = %s", row.Status)
	}
	// A second tap on the answered gate changes nothing.
	var card string
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT card FROM flow_attempts WHERE card IS NOT NULL`).Scan(&card); err != nil {
		t.Fatal(err)
	}
	var res core.TaskTap
	b.inTurn(t, func(ctx context.Context, tx *store.Tx, o core.TaskOut) error {
		var err error
		res, err = b.rt.Tap(ctx, tx, core.StoredTurn{Turn: origin()}, core.TrustOwner, core.Tap{Card: cards.ID(card), Choice: "a2"}, o)
		return err
	})
	if res.Refused != "already_decided" {
		t.Fatalf("second tap = %+v", res)
	}
}

const retryFlow = `name: retry
version: "1"
nodes:
  - id: slow
    type: action.shell
    config:
      command: "echo slow"
    policy:
      timeout: 30s
      retry: {max_attempts: 2, backoff: 10s}
`

// Precedence, as the runtime carries it out: a timeout stops the attempt
// (its open card declined), then the retry waits its backoff, then a new
// attempt is a new proposal; a timer of the old attempt delivered late
// (a duplicate job) is ignored. Timers are River jobs scheduled at their
// time, so they survive restarts.
func TestTimeoutThenRetryAsScheduledJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"retry.yaml": retryFlow})
	before := time.Now()
	run := b.start(t, "retry")
	first := b.open(t)["echo slow"]
	timers := b.timers(t)
	if len(timers) != 1 || timers[0].timer.Kind != "timeout" || timers[0].timer.Attempt != 1 || timers[0].at.Before(before.Add(29*time.Second)) {
		t.Fatalf("timers after start = %+v", timers)
	}
	timeout := timers[0].timer
	b.advance(t, run, &timeout)
	a, err := b.st.GetApproval(b.ctx, first)
	if err != nil || a.Status != core.ApprovalDeclined || a.DecidedBy != StoppedBy {
		t.Fatalf("first attempt's approval after the timeout = %s by %s, %v", a.Status, a.DecidedBy, err)
	}
	timers = b.timers(t)
	if len(timers) != 2 || timers[1].timer.Kind != "backoff" || timers[1].at.Before(before.Add(9*time.Second)) {
		t.Fatalf("timers after the timeout = %+v", timers)
	}
	if got := b.statuses(t, run); got != "slow=backoff" {
		t.Fatalf("after timeout: %s", got)
	}
	backoff := timers[1].timer
	b.advance(t, run, &backoff)
	second := b.open(t)["echo slow"]
	if second == "" || second == first {
		t.Fatalf("no second proposal: %v", b.open(t))
	}
	// The first attempt's timeout again (River ran the job twice): stale.
	b.advance(t, run, &timeout)
	if n := b.count(t, `SELECT count(*) FROM approvals`); n != 2 {
		t.Fatalf("%d approvals, want 2", n)
	}
	if n := b.count(t, `SELECT count(*) FROM flow_transitions WHERE run_id = $1 AND ignored <> ''`, run); n < 1 {
		t.Fatalf("the stale timer was not recorded as ignored")
	}
	b.settle(t, second, true, "slow\n")
	if row, _ := b.run(t, run); row.Status != "succeeded" {
		t.Fatalf("run = %s", row.Status)
	}
	if n := b.count(t, `SELECT count(*) FROM flow_attempts WHERE run_id = $1`, run); n != 2 {
		t.Fatalf("%d attempts", n)
	}
}

const waitFlow = `name: nap
version: "1"
nodes:
  - id: nap
    type: control.wait
    config: {duration: 1h}
  - id: after
    type: system.log
    config: {message: "woke after ${{ nodes.nap.waited }}"}
edges:
  - {from: nap, to: after}
`

func TestWaitIsAScheduledJob(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"nap.yaml": waitFlow})
	before := time.Now()
	run := b.start(t, "nap")
	timers := b.timers(t)
	if len(timers) != 1 || timers[0].timer.Kind != "wait" || timers[0].at.Before(before.Add(59*time.Minute)) {
		t.Fatalf("timers = %+v", timers)
	}
	// A wake-up before the timer changes nothing.
	b.advance(t, run, nil)
	if got := b.statuses(t, run); got != "nap=running after=pending" {
		t.Fatalf("before the timer: %s", got)
	}
	w := timers[0].timer
	b.advance(t, run, &w)
	if got := b.statuses(t, run); got != "nap=succeeded after=succeeded" {
		t.Fatalf("after the timer: %s", got)
	}
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'flow.log' AND data->>'message' = 'woke after 1h'`); n != 1 {
		t.Fatalf("log entries = %d", n)
	}
}

const pinFlow = `name: pin
version: "1"
nodes:
  - id: step
    type: action.shell
    config:
      command: "echo one"
  - id: again
    type: action.shell
    config:
      command: "echo one again"
edges:
  - {from: step, to: again}
`

// Editing a flow's file changes the next run, never a running one.
func TestRunIsPinnedToItsVersion(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"pin.yaml": pinFlow})
	run := b.start(t, "pin")
	edited := strings.ReplaceAll(strings.Replace(pinFlow, `version: "1"`, `version: "2"`, 1), "one", "two")
	if err := os.WriteFile(filepath.Join(b.dir, "pin.yaml"), []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	b.settle(t, b.open(t)["echo one"], true, "one\n")
	if _, ok := b.open(t)["echo one again"]; !ok {
		t.Fatalf("the running run took the edit: %v", b.open(t))
	}
	next := b.start(t, "pin")
	if _, ok := b.open(t)["echo two"]; !ok {
		t.Fatalf("the next run did not: %v", b.open(t))
	}
	r1, _ := b.run(t, run)
	r2, _ := b.run(t, next)
	if r1.Version != "1" || r2.Version != "2" || r1.FlowHash == r2.FlowHash {
		t.Fatalf("versions %s/%s", r1.Version, r2.Version)
	}
}

// Several processes (or one job run twice) advancing the same run: each
// outcome is applied once.
func TestConcurrentAdvancesApplyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"pin.yaml": pinFlow})
	run := b.start(t, "pin")
	id := b.open(t)["echo one"]
	b.settle(t, id, true, "one\n")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := b.rt.Advance(b.ctx, run, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := b.count(t, `SELECT count(*) FROM flow_transitions WHERE run_id = $1 AND event->>'kind' = 'succeeded' AND event->>'node' = 'step'`, run); n != 1 {
		t.Fatalf("step's success applied %d times", n)
	}
	if n := b.count(t, `SELECT count(*) FROM approvals`); n != 2 {
		t.Fatalf("%d approvals, want 2 (one per node)", n)
	}
}

// /flow stop: the run is cancelled, its open card declined, nothing runs.
func TestStop(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"pin.yaml": pinFlow})
	run := b.start(t, "pin")
	id := b.open(t)["echo one"]
	st := core.StoredTurn{Seq: 3, Turn: origin()}
	out := b.inTurn(t, func(ctx context.Context, tx *store.Tx, o core.TaskOut) error {
		return b.rt.Stop(ctx, tx, st, core.TrustOwner, ShortID(run), o)
	})
	if row, _ := b.run(t, run); row.Status != "cancelled" {
		t.Fatalf("run = %s", row.Status)
	}
	if a, _ := b.st.GetApproval(b.ctx, id); a.Status != core.ApprovalDeclined {
		t.Fatalf("approval = %s", a.Status)
	}
	if len(out.updates) < 2 {
		t.Fatalf("updates = %d (the declined card and the progress card)", len(out.updates))
	}
	// Someone else may not stop a run.
	out = b.inTurn(t, func(ctx context.Context, tx *store.Tx, o core.TaskOut) error {
		s := st
		s.Turn.Sender = "web:other"
		return b.rt.Stop(ctx, tx, s, core.TrustAuth, ShortID(run), o)
	})
	if len(out.replies) != 1 || !strings.Contains(out.replies[0], "Only %s or an owner") {
		t.Fatalf("replies = %q", out.replies)
	}
}

const sayFlow = `name: say
version: "1"
nodes:
  - id: why
    type: control.gate
    config: {prompt: "Why?", allow_text: true}
  - id: pick
    type: control.gate
    config: {prompt: "Which?", choices: [a, b]}
  - id: log
    type: system.log
    config: {message: "because ${{ nodes.why.response.content }}"}
edges:
  - {from: why, to: pick}
  - {from: pick, to: log}
`

// Message injection: /flow say reaches a gate that takes text; a gate
// with only buttons says so.
func TestSayAnswersATextGate(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"say.yaml": sayFlow})
	run := b.start(t, "say")
	st := core.StoredTurn{Seq: 4, Turn: origin()}
	say := func(text string) *shown {
		return b.inTurn(t, func(ctx context.Context, tx *store.Tx, o core.TaskOut) error {
			return b.rt.Say(ctx, tx, st, core.TrustOwner, ShortID(run)+" "+text, o)
		})
	}
	say("the disk is full")
	if got := b.statuses(t, run); got != "why=succeeded pick=running log=pending" {
		t.Fatalf("after say: %s", got)
	}
	out := say("b please")
	if len(out.replies) != 1 || !strings.Contains(out.replies[0], "takes only its buttons") {
		t.Fatalf("replies = %q", out.replies)
	}
	b.gate(t, 1)
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'flow.log' AND data->>'message' = 'because the disk is full'`); n != 1 {
		t.Fatalf("the text did not reach the run (%d)", n)
	}
}

// A card that expires queues no step job: the sweep finds the run and the
// expired approval fails its node; a run waiting on a card is not swept.
func TestSweepFindsAnExpiredCard(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]string{"pin.yaml": pinFlow})
	run := b.start(t, "pin")
	list, err := b.st.FlowRunsToSweep(b.ctx)
	if err != nil || len(list) != 0 {
		t.Fatalf("a run waiting on a card is swept: %d, %v", len(list), err)
	}
	id := b.open(t)["echo one"]
	if _, err := b.st.Pool().Exec(b.ctx, `UPDATE approvals SET status = 'expired' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if err := b.rt.Resume(b.ctx); err != nil {
		t.Fatal(err)
	}
	row, fr := b.run(t, run)
	if row.Status != "failed" || fr.Nodes["step"].Error == nil || fr.Nodes["step"].Error.Code != CodeDeclined {
		t.Fatalf("run %s, step %+v", row.Status, fr.Nodes["step"])
	}
}
