package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// The runtime on its own: real PostgreSQL, the model behind the fake
// endpoint, and a fake of the core's proposing port that stores a plain
// approval request (or refuses) — so what these tests see is only what the
// runtime itself writes and reads. Tasks are advanced synchronously
// (advanceTask), not by background jobs, so every step is deterministic.
// The whole path through the real engine is tested in core/agent/llm and
// adapters/webchat.

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	testKey = "sk-test-0123456789abcdef"
	owner   = core.IdentityID("web:owner")
	conv    = core.ConversationID("web:c1")
)

// fakeActions is the proposing port: it stores a pending request for each
// proposal (the runtime's call rows reference it) unless refuse is set.
type fakeActions struct {
	mu       sync.Mutex
	refuse   string
	proposed []core.ProposedAction
	origins  []core.Turn
	settled  []Proposal
	stopped  []core.ApprovalID
}

func (f *fakeActions) Propose(_ context.Context, tx propose.Tx, taskID string, origin core.Turn, pa core.ProposedAction) (Proposal, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.proposed = append(f.proposed, pa)
	f.origins = append(f.origins, origin)
	if f.refuse != "" {
		return Proposal{Refused: f.refuse}, nil
	}
	canonical, err := pa.Action.Canonical()
	if err != nil {
		return Proposal{}, err
	}
	hash, _ := pa.Action.Hash()
	now := tx.Now()
	a := core.ApprovalRequest{ID: core.ApprovalID(core.NewID()), Channel: origin.Channel, Conversation: origin.Conversation,
		Requester: origin.Sender, ActionCanonical: canonical, ActionHash: hash, Intent: pa.Intent, Risk: cards.RiskLow,
		Approvers: []string{"role:owner"}, Status: core.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(time.Hour), Task: taskID}
	tx.QueueApproval(a)
	return Proposal{Approval: a.ID, Audit: []audit.Entry{{Kind: audit.KindApprovalRequested, Actor: string(origin.Sender),
		Conversation: string(origin.Conversation), Data: map[string]any{"approval": string(a.ID)}}}}, nil
}

func (f *fakeActions) Proposed(p Proposal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled = append(f.settled, p)
}

func (f *fakeActions) StopRuns(ids []core.ApprovalID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, ids...)
}

// fakeOutbox counts what commits said they queued per conversation.
type fakeOutbox struct {
	mu    sync.Mutex
	kicks map[core.ConversationID]int
}

func (f *fakeOutbox) Kick(c core.ConversationID, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kicks[c] += n
}

type bundle struct {
	st      *store.Store
	rt      *Runtime
	fake    *llmtest.Server
	actions *fakeActions
	out     *fakeOutbox
	dir     string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	fake := llmtest.New(t, testKey, "small", "big")
	client, err := llm.New(llm.Config{BaseURL: fake.BaseURL(), APIKey: testKey, Models: llm.Models{Proxy: "small", Planner: "big", Executor: "small"},
		Timeout: 30 * time.Second, MaxRetries: 1, MaxRetryDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New([]policy.Rule{
		{Name: "checks", Tool: "shell", Match: `^test `, Decision: policy.Allow, Risk: cards.RiskLow},
		{Name: "default", Tool: "*", Decision: policy.AuthRequired, Risk: cards.RiskLow},
	})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{st: st, fake: fake, actions: &fakeActions{}, out: &fakeOutbox{kicks: map[core.ConversationID]int{}}, dir: t.TempDir()}
	b.rt, err = New(Config{Store: st, Planner: llm.Planner{Client: client}, Executor: llm.Executor{Client: client}, Policy: pol,
		Verifier: &verify.Runner{AllowedDirs: []string{b.dir}}, Limits: task.Limits{Tokens: 100000, ModelCalls: 20, ToolCalls: 5, WallTime: time.Hour},
		Logger: slog.New(slog.DiscardHandler)}, b.actions, b.out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.rt.Close(context.Background()) })
	return b
}

func turn(text string) core.StoredTurn {
	return core.StoredTurn{Seq: 1, Turn: core.Turn{Channel: "web", Conversation: conv, Sender: owner, Text: text, ChatKind: core.ChatDirect,
		Evidence: core.Evidence{Authenticated: true, Method: "test"}, EventID: core.NewID(), At: time.Now()}}
}

// inTurn runs f in a transaction as the engine runs a turn's work, and
// returns what it wrote to the turn.
func (b *bundle) inTurn(t *testing.T, f func(ctx context.Context, tx *store.Tx, o Out) error) *shown {
	t.Helper()
	var got *shown
	err := b.st.Do(context.Background(), func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		got = &shown{}
		if err := f(ctx, tx, got); err != nil {
			return nil, err
		}
		return got.audit, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// start starts a task for goal as the agent's hand-off does, and returns
// its id.
func (b *bundle) start(t *testing.T, goal string) string {
	t.Helper()
	o := b.inTurn(t, func(ctx context.Context, tx *store.Tx, o Out) error {
		return b.rt.Start(ctx, tx, turn(goal), core.TrustOwner, core.TaskRequest{Goal: goal}, o)
	})
	if len(o.replies) != 1 || !strings.HasPrefix(o.replies[0], "On it:") || len(o.after) != 0 {
		t.Fatalf("start showed %q with %d after-commit jobs", o.replies, len(o.after))
	}
	list, err := b.st.ActiveTasks(context.Background())
	if err != nil || len(list) != 1 {
		t.Fatalf("active tasks = %v, %v", list, err)
	}
	if n := b.stepJobs(t, list[0].ID); n != 1 {
		t.Fatalf("start queued %d step jobs, want 1", n)
	}
	return list[0].ID
}

// stepJobs counts the task_step jobs ever queued for task id (no
// background room runs here: they stay available).
func (b *bundle) stepJobs(t *testing.T, id string) int {
	t.Helper()
	var n int
	err := b.st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'task' = $2`,
		StepArgs{}.Kind(), id).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// settle advances the task until it waits (for a tap, an answer) or ends.
func (b *bundle) settle(t *testing.T, id string) {
	t.Helper()
	for range 30 {
		more, err := b.rt.advanceTask(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			return
		}
	}
	t.Fatal("the task did not settle")
}

func (b *bundle) task(t *testing.T, id string) core.Task {
	t.Helper()
	k, err := b.st.GetTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// queued is what the commits queued for the conversation, oldest first.
func (b *bundle) queued(t *testing.T) []core.OutMessage {
	t.Helper()
	rows, err := b.st.Pool().Query(context.Background(), `SELECT payload FROM outbox WHERE conversation = $1 ORDER BY id`, conv)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []core.OutMessage
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var m core.OutMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func hasText(msgs []core.OutMessage, s string) bool {
	for _, m := range msgs {
		if strings.Contains(m.Text, s) {
			return true
		}
	}
	return false
}

// ranAndVerified records, as the engine's executor and verifier would, that
// the call's approval was approved and its execution verified with stdout.
func (b *bundle) ranAndVerified(t *testing.T, id core.ApprovalID, stdout string) {
	t.Helper()
	ctx := context.Background()
	if err := b.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		if _, err := tx.GetApproval(ctx, id); err != nil {
			return nil, err
		}
		if ok, err := tx.TransitionApproval(ctx, id, []core.ApprovalStatus{core.ApprovalPending}, core.ApprovalApproved, owner, nil); err != nil || !ok {
			t.Errorf("approve: %v, %v", ok, err)
		}
		return nil, tx.QueueExecution(id)
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		ok, err := tx.TransitionExecution(ctx, id, core.ExecQueued, core.ExecVerified,
			core.ExecUpdate{Result: &core.ExecRecord{Stdout: stdout}, Reason: "checks passed", Started: true, Done: true})
		if err == nil && !ok {
			t.Error("execution did not move to verified")
		}
		return nil, err
	}); err != nil {
		t.Fatal(err)
	}
}

func planReply(body string) llmtest.Reply {
	return llmtest.Reply{Content: "---\n" + body + "---\n# Context\nA test plan."}
}

func shellCall(argv string) llmtest.Reply {
	return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "shell", Arguments: `{"argv":` + argv + `,"intent":"Say hello"}`}}}
}

// A step's tool call goes to the core's port, labelled with its step, in
// the step's own transaction; the runtime waits until the store says the
// action ran and was verified, shows the model that result, and only the
// plan's check — run by the runtime, not the model's word — ends the task.
func TestStepProposesThroughThePortAndReadsTheOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	marker := filepath.Join(b.dir, "marker")
	if err := os.WriteFile(marker, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.fake.Script(planReply("title: Say hi\nsteps: [Say hi]\nverify:\n  - name: marker exists\n    expect: { file_exists: "+marker+" }\n"),
		shellCall(`["echo","hi"]`), llmtest.Reply{Content: "STEP DONE: said hi"})
	id := b.start(t, "say hi")
	b.settle(t, id)

	if len(b.actions.proposed) != 1 {
		t.Fatalf("%d proposals, want 1", len(b.actions.proposed))
	}
	pa, origin := b.actions.proposed[0], b.actions.origins[0]
	if !strings.HasPrefix(pa.Intent, "Step 1 of 1 — Say hi: ") || strings.Join(pa.Action.Argv, " ") != "echo hi" {
		t.Fatalf("proposed %q: %v", pa.Intent, pa.Action.Argv)
	}
	if origin.Conversation != conv || origin.Sender != owner {
		t.Fatalf("proposed for %s by %s, want the task's origin", origin.Conversation, origin.Sender)
	}
	calls, err := b.st.TaskCalls(context.Background(), id)
	if err != nil || len(calls) != 1 || calls[0].Status != "waiting" || calls[0].Approval == "" {
		t.Fatalf("calls = %+v, %v", calls, err)
	}
	if len(b.actions.settled) != 1 || b.actions.settled[0].Approval != calls[0].Approval {
		t.Fatalf("Proposed after commit: %+v", b.actions.settled)
	}
	// Nothing was decided by the runtime: the request waits for a tap.
	a, err := b.st.GetApproval(context.Background(), calls[0].Approval)
	if err != nil || a.Status != core.ApprovalPending {
		t.Fatalf("approval = %s, %v", a.Status, err)
	}
	if n := len(b.fake.Requests()); n != 2 {
		t.Fatalf("%d model calls while waiting, want 2 (plan, step)", n)
	}
	// Advancing again while it waits changes nothing and asks no model.
	b.settle(t, id)
	if n := len(b.fake.Requests()); n != 2 {
		t.Fatalf("%d model calls after a second advance, want 2", n)
	}

	b.ranAndVerified(t, calls[0].Approval, "hi\n")
	b.settle(t, id)
	reqs := b.fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls, want 3", len(reqs))
	}
	last := reqs[2].Messages[len(reqs[2].Messages)-1]
	if last.Role != "tool" || !strings.Contains(last.Text(), "<<<DATA source=tool result") || !strings.Contains(last.Text(), `hi\n`) {
		t.Fatalf("the executor was shown %q", last.Text())
	}
	if k := b.task(t, id); k.State != string(task.Done) {
		t.Fatalf("task state = %s (%s)", k.State, k.Reason)
	}
	msgs := b.queued(t)
	for _, want := range []string{"Done: Say hi ✓", "What ran: `echo hi` (step 1).", "Checked by the gateway: marker exists ✓."} {
		if !hasText(msgs, want) {
			t.Fatalf("no message has %q", want)
		}
	}
	// Every message the runtime queued was handed to the outbox.
	if got := b.out.kicks[conv]; got != len(msgs) {
		t.Fatalf("kicked %d messages, queued %d", got, len(msgs))
	}
}

// An executor reply with several tool calls: the first goes on as the
// step's one proposal (one card); each further call is stored as not run,
// the person is told, and the model reads "not run" for each in its next
// request — nothing is dropped silently, nothing else is proposed.
func TestSeveralToolCallsInOneReplyAreAnsweredNotRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	marker := filepath.Join(b.dir, "marker")
	if err := os.WriteFile(marker, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	three := llmtest.Reply{ToolCalls: []llmtest.ToolCall{
		{ID: "c1", Name: "shell", Arguments: `{"argv":["echo","hi"],"intent":"Say hello"}`},
		{ID: "c2", Name: "shell", Arguments: `{"argv":["rm","-rf","/srv"],"intent":"Clean up"}`},
		{ID: "c3", Name: "read_file", Arguments: `{"path":"/etc/hostname","intent":"Read the name"}`},
	}}
	b.fake.Script(planReply("title: Say hi\nsteps: [Say hi]\nverify:\n  - name: marker exists\n    expect: { file_exists: "+marker+" }\n"),
		three, llmtest.Reply{Content: "STEP DONE: said hi"})
	id := b.start(t, "say hi")
	b.settle(t, id)

	if len(b.actions.proposed) != 1 || strings.Join(b.actions.proposed[0].Action.Argv, " ") != "echo hi" {
		t.Fatalf("proposed %+v, want only the first call", b.actions.proposed)
	}
	calls, err := b.st.TaskCalls(context.Background(), id)
	if err != nil || len(calls) != 3 {
		t.Fatalf("calls = %+v, %v; want the taken call and two answered as not run", calls, err)
	}
	if calls[0].CallID != "c1" || calls[0].Status != "waiting" || calls[0].Approval == "" {
		t.Fatalf("first stored call = %+v", calls[0])
	}
	for i, want := range []string{"c2", "c3"} {
		c := calls[i+1]
		if c.CallID != want || c.Status != "done" || c.Approval != "" || resultStatus(c.Result) != statusNotRun {
			t.Fatalf("call %d = %+v, want %s answered as not run", i+1, c, want)
		}
	}
	if !hasText(b.queued(t), "Step 1 of 1 — Say hi — the assistant asked for 3 tool calls at once; only the first was taken. The other 2 were not run, and the assistant was told.") {
		t.Fatal("the person was not told that two calls were not run")
	}

	b.ranAndVerified(t, calls[0].Approval, "hi\n")
	b.settle(t, id)
	reqs := b.fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls, want 3", len(reqs))
	}
	var notRun []string
	for _, m := range reqs[2].Messages {
		if m.Role == "tool" && strings.Contains(m.Text(), "Not run: one tool call per step") {
			notRun = append(notRun, m.ToolCallID)
		}
	}
	if strings.Join(notRun, ",") != "c2,c3" {
		t.Fatalf("the model was told %v were not run, want c2,c3", notRun)
	}
	// The step's claim rests on the call that ran, not on the ones not run.
	if k := b.task(t, id); k.State != string(task.Done) {
		t.Fatalf("task state = %s (%s)", k.State, k.Reason)
	}
}

// A proposal the core refuses is recorded as a blocked call: the person is
// told what was not run and why, and the model gets the reason as data.
func TestRefusedProposalIsToldToPersonAndModel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.actions.refuse = "blocked by policy: downloads are not allowed here"
	b.rt.cfg.Recovery = task.Policy{MaxAttempts: 1}
	b.fake.Script(planReply("title: Fetch\nsteps: [Download]\non_stuck: escalate\nverify:\n  - name: root\n    run: [test, -d, /]\n    expect: { exit_code: 0 }\n"),
		shellCall(`["curl","https://example.org"]`), llmtest.Reply{Content: "STUCK: downloads are blocked"})
	id := b.start(t, "fetch it")
	b.settle(t, id)

	calls, err := b.st.TaskCalls(context.Background(), id)
	if err != nil || len(calls) != 1 || calls[0].Approval != "" || resultStatus(calls[0].Result) != "blocked" {
		t.Fatalf("calls = %+v, %v", calls, err)
	}
	if len(b.actions.settled) != 0 {
		t.Fatalf("Proposed called for a refused proposal: %+v", b.actions.settled)
	}
	want := "Step 1 of 1 — Fetch — `curl https://example.org` was not run: blocked by policy: downloads are not allowed here. The assistant was told."
	if !hasText(b.queued(t), want) {
		t.Fatalf("no message says %q", want)
	}
	reqs := b.fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls, want 3 (plan, the call, stuck)", len(reqs))
	}
	if last := reqs[2].Messages; !strings.Contains(last[len(last)-1].Text(), "downloads are not allowed here") {
		t.Fatalf("the model was not told why: %q", last[len(last)-1].Text())
	}
	if k := b.task(t, id); k.State != string(task.Escalated) {
		t.Fatalf("task state = %s", k.State)
	}
}

// /stop inside the person's turn: the task's open request is declined as
// stopped (its card shows it), the running execution is killed only after
// the turn commits, and the runtime proposes nothing more.
func TestStopInTurnDeclinesOpenCardsAndStopsRunsAfterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.Script(planReply("title: Wait\nsteps: [Wait]\nverify:\n  - name: root\n    run: [test, -d, /]\n    expect: { exit_code: 0 }\n"),
		shellCall(`["sleep","100"]`))
	id := b.start(t, "wait a while")
	b.settle(t, id)
	calls, _ := b.st.TaskCalls(context.Background(), id)
	if len(calls) != 1 || calls[0].Approval == "" {
		t.Fatalf("calls = %+v", calls)
	}
	o := b.inTurn(t, func(ctx context.Context, tx *store.Tx, o Out) error {
		return b.rt.Stop(ctx, tx, turn("/stop"), core.TrustOwner, "", o)
	})
	if len(o.replies) != 1 || !strings.HasPrefix(o.replies[0], `Stopped the task "Wait"`) {
		t.Fatalf("stop replied %q", o.replies)
	}
	var declined bool
	for _, c := range o.updates {
		if c.ID == cards.ID(calls[0].Approval) && c.Status == cards.StatusDeclined {
			declined = true
		}
	}
	if !declined {
		t.Fatalf("the open card was not shown declined: %+v", o.updates)
	}
	a, err := b.st.GetApproval(context.Background(), calls[0].Approval)
	if err != nil || a.Status != core.ApprovalDeclined || a.DecidedBy != render.TaskStopped {
		t.Fatalf("approval = %s by %s, %v", a.Status, a.DecidedBy, err)
	}
	if len(b.actions.stopped) != 0 {
		t.Fatal("runs were stopped before the turn committed")
	}
	if n := b.stepJobs(t, id); n != 2 {
		t.Fatalf("%d step jobs after the stop, want 2 (start, stop)", n)
	}
	for _, f := range o.after {
		f()
	}
	if len(b.actions.stopped) != 1 || b.actions.stopped[0] != calls[0].Approval {
		t.Fatalf("stopped runs = %v, want the waiting call's", b.actions.stopped)
	}
	if k := b.task(t, id); k.State != string(task.Stopped) {
		t.Fatalf("task state = %s", k.State)
	}
	b.settle(t, id)
	if len(b.actions.proposed) != 1 {
		t.Fatalf("%d proposals after the stop", len(b.actions.proposed))
	}
}

// Only the requester or an owner commands a task; a stranger's /stop
// changes nothing.
func TestStopBySomeoneElseChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.start(t, "a goal")
	other := turn("/stop")
	other.Turn.Sender = "web:other"
	o := b.inTurn(t, func(ctx context.Context, tx *store.Tx, o Out) error {
		return b.rt.Stop(ctx, tx, other, core.TrustAuth, "", o)
	})
	if len(o.replies) != 1 || !strings.HasPrefix(o.replies[0], "Only the person who asked") || len(o.after) != 0 || b.stepJobs(t, id) != 1 {
		t.Fatalf("stop by another: %q, %d after-commit jobs, %d step jobs", o.replies, len(o.after), b.stepJobs(t, id))
	}
	if k := b.task(t, id); k.Final() {
		t.Fatalf("task ended: %s", k.State)
	}
}

// A step job exists exactly when the state change that calls for it
// does: queued in its transaction, it rolls back with it.
func TestStepJobInStateChangesTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	boom := errors.New("rolled back")
	err := b.st.Do(context.Background(), func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		if err := b.rt.Start(ctx, tx, turn("a goal"), core.TrustOwner, core.TaskRequest{Goal: "a goal"}, &shown{}); err != nil {
			return nil, err
		}
		return nil, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v", err)
	}
	var n int
	if err := b.st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM river_job`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d jobs after a rolled-back start (%v), want 0", n, err)
	}
	if list, err := b.st.ActiveTasks(context.Background()); err != nil || len(list) != 0 {
		t.Fatalf("active tasks after a rolled-back start = %v, %v", list, err)
	}
	id := b.start(t, "a goal") // asserts exactly one job, for this task
	var args string
	if err := b.st.Pool().QueryRow(context.Background(), `SELECT args->>'task' FROM river_job WHERE kind = $1 AND queue = $2`,
		StepArgs{}.Kind(), QueueSteps).Scan(&args); err != nil || args != id {
		t.Fatalf("the step job's task = %q (%v), want %s", args, err, id)
	}
}

// After Close no job starts: a kick leaves the task to its row, for the
// next start.
func TestNoJobAfterClose(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.start(t, "a goal")
	b.rt.Close(context.Background())
	b.rt.kick(id)
	b.rt.mu.Lock()
	n := len(b.rt.running)
	b.rt.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d jobs registered after Close", n)
	}
	if len(b.fake.Requests()) != 0 {
		t.Fatal("the model was asked after Close")
	}
}
