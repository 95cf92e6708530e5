package llm_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/background/backgroundtest"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tasks"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/taskwire"
)

// The durable task runtime end to end: the real engine on PostgreSQL, the
// real sandbox, policy and verification, the model behind the fake
// endpoint. Each scripted reply is one model call, in the order the
// runtime makes them (one task advances one thing at a time).

type taskHarness struct {
	*harness
	dir    string // a directory file_exists checks may look at
	sb     *sandbox.Subprocess
	key    ed25519.PrivateKey
	client *llm.Client
	opts   taskOpts
	stopFn func()
}

type taskOpts struct {
	limits   task.Limits
	recovery task.Policy
	// configure, when set, changes the engine's configuration (secrets,
	// allowed identities) before each start.
	configure func(*gateway.Config)
}

// Test policy: `test …` (plan checks) and `uname` are allowed without a
// tap, curl is blocked, everything else needs one tap (low risk).
func taskPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.New([]policy.Rule{
		{Name: "checks", Tool: "shell", Match: `^test `, Decision: policy.Allow, Risk: cards.RiskLow},
		{Name: "reads", Tool: "shell", Match: `^uname( |$)`, Decision: policy.Allow, Risk: cards.RiskLow},
		{Name: "no downloads", Tool: "*", Match: `curl`, Decision: policy.Blocked, Risk: cards.RiskHigh, Reason: "downloads are not allowed here"},
		{Name: "default", Tool: "*", Decision: policy.AuthRequired, Risk: cards.RiskLow},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func setupTasks(t *testing.T, opts taskOpts) *taskHarness {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, pgtest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	fake := llmtest.New(t, testKey, "small", "big")
	client, err := llm.New(llm.Config{BaseURL: fake.BaseURL(), APIKey: testKey, Models: llm.Models{Proxy: "small", Planner: "big", Executor: "small"},
		Timeout: 30 * time.Second, MaxRetries: 1, MaxRetryDelay: 5 * time.Millisecond}) // generous: a loaded test machine, not the fake, is slow
	if err != nil {
		t.Fatal(err)
	}
	if opts.limits == (task.Limits{}) {
		opts.limits = task.Limits{Tokens: 100000, ModelCalls: 50, ToolCalls: 20, WallTime: time.Hour}
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	ch := &channel{msgs: map[core.MessageRef]core.OutMessage{}, notify: make(chan struct{}, 1)}
	h := &taskHarness{harness: &harness{st: st, ch: ch, fake: fake}, dir: t.TempDir(), sb: sb, key: key, client: client, opts: opts}
	h.start(t)
	t.Cleanup(func() { h.stop() })
	return h
}

// start runs a (new) engine on the harness's database, as a fresh process
// would after a restart.
func (h *taskHarness) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ag := &llm.Agent{Proxy: llm.Proxy{Client: h.client}, Planner: llm.Planner{Client: h.client}, Fallback: agent.Command{}, Tasks: true}
	cfg := gateway.Config{Store: h.st, Channels: []core.Channel{h.ch}, Agent: ag, Sandbox: h.sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: h.sb}, AllowedDirs: []string{h.dir}}, Policy: taskPolicy(t), Key: h.key,
		Owners: []core.IdentityID{owner}, Logger: slog.New(slog.DiscardHandler),
		Tasks: taskwire.Runtime(tasks.Config{Planner: llm.Planner{Client: h.client}, Executor: llm.Executor{Client: h.client},
			Limits: h.opts.limits, Recovery: h.opts.recovery, Sweep: 200 * time.Millisecond}),
	}
	if h.opts.configure != nil {
		h.opts.configure(&cfg)
	}
	eng, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Run(ctx, 100*time.Millisecond) }()
	<-eng.Ready()
	// Task steps are River jobs, worked by the background room.
	stopRoom := backgroundtest.Start(t, h.st.Pool(), eng.Jobs)
	h.eng, h.ctx = eng, ctx
	h.stopFn = func() { cancel(); <-done; stopRoom() }
}

func (h *taskHarness) stop() {
	if h.stopFn != nil {
		h.stopFn()
		h.stopFn = nil
	}
}

func planTaskCall(goal string) llmtest.Reply {
	return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "plan_task", Arguments: `{"goal":"` + goal + `"}`}}}
}

func planReply(body string) llmtest.Reply {
	return llmtest.Reply{Content: "---\n" + body + "---\n# Context\nA test plan."}
}

func stepDone(what string) llmtest.Reply { return llmtest.Reply{Content: "STEP DONE: " + what} }

func stuck(why string) llmtest.Reply { return llmtest.Reply{Content: "STUCK: " + why} }

// pendingCard waits for an open approval card whose command is cmd.
func (h *taskHarness) pendingCard(t *testing.T, cmd string) *cards.Card {
	t.Helper()
	var c *cards.Card
	h.ch.waitFor(t, "approval card for "+cmd, func(m []core.OutMessage) bool {
		c = card(m, func(c *cards.Card) bool { return c.Command == cmd && c.Status == cards.StatusPending })
		return c != nil
	})
	return c
}

func (h *taskHarness) taskState(t *testing.T) (state, reason string) {
	t.Helper()
	if err := h.st.Pool().QueryRow(context.Background(), `SELECT state, reason FROM tasks ORDER BY created_at DESC LIMIT 1`).Scan(&state, &reason); err != nil {
		t.Fatal(err)
	}
	return state, reason
}

func (h *taskHarness) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := h.st.Pool().QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// requestText is everything the model was sent, for invariant checks.
func requestText(h *taskHarness) string {
	var b strings.Builder
	for _, r := range h.fake.Requests() {
		for _, m := range r.Messages {
			b.WriteString(m.Text())
			for _, tc := range m.ToolCalls {
				b.WriteString(tc.Function.Arguments)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

const twoStepPlan = `title: Say two things
steps:
  - Say one
  - Say two
verify:
  - name: root is there
    run: [test, -d, /]
    expect: { exit_code: 0 }
`

// Happy path: plan card → two approved steps (each card labelled with its
// step and task) → the plan's check passes → a plain summary of what ran.
// Nothing runs before its tap; the model never sees a token.
func TestTaskHappyPath(t *testing.T) {
	t.Parallel()
	h := setupTasks(t, taskOpts{})
	h.fake.Script(planTaskCall("say one then two"), planReply(twoStepPlan),
		shellCall(`["echo","one"]`), stepDone("said one"),
		shellCall(`["echo","two"]`), stepDone("said two"))
	h.deliver(t, owner, "say one, then two", nil)

	var plan *cards.Card
	h.ch.waitFor(t, "plan card", func(m []core.OutMessage) bool {
		plan = card(m, func(c *cards.Card) bool { return c.Intent == "Plan: Say two things" })
		return plan != nil
	})
	for _, want := range []string{"1. Say one", "2. Say two", "root is there: test -d /", "Budget: 100000 tokens"} {
		if !strings.Contains(plan.Details, want) {
			t.Fatalf("plan card details lack %q:\n%s", want, plan.Details)
		}
	}
	if plan.Open() || plan.DetailsExpanded() {
		t.Fatalf("plan card should be a collapsed card without buttons: %+v", plan)
	}

	c1 := h.pendingCard(t, "echo one")
	if !strings.HasPrefix(c1.Intent, "Step 1 of 2 — Say two things") {
		t.Fatalf("card intent = %q", c1.Intent)
	}
	if n := h.executions(t); n != 0 {
		t.Fatalf("%d executions before the tap", n)
	}
	h.deliver(t, owner, "", &core.Tap{Card: c1.ID, Choice: "approve"})
	c2 := h.pendingCard(t, "echo two")
	if !strings.HasPrefix(c2.Intent, "Step 2 of 2 — Say two things") {
		t.Fatalf("card intent = %q", c2.Intent)
	}
	if n := h.executions(t); n != 1 {
		t.Fatalf("%d executions before the second tap", n)
	}
	h.deliver(t, owner, "", &core.Tap{Card: c2.ID, Choice: "approve"})
	msgs := h.ch.waitFor(t, "summary", func(m []core.OutMessage) bool { return hasText(m, "Done: Say two things ✓") })
	for _, want := range []string{"What ran: `echo one` (step 1); `echo two` (step 2).", "Checked by the gateway: root is there ✓."} {
		if !hasText(msgs, want) {
			t.Fatalf("summary lacks %q", want)
		}
	}
	if st, _ := h.taskState(t); st != "done" {
		t.Fatalf("task state = %s", st)
	}

	// The executor got the first result back, fenced as data.
	reqs := h.fake.Requests()
	if len(reqs) != 6 {
		t.Fatalf("%d model calls, want 6", len(reqs))
	}
	last := reqs[3].Messages[len(reqs[3].Messages)-1]
	if last.Role != "tool" || !strings.Contains(last.Text(), "<<<DATA source=tool result") || !strings.Contains(last.Text(), `one\n`) {
		t.Fatalf("executor's tool result = %q", last.Text())
	}
	// Invariant: no token, nonce or signature reached the model.
	all := requestText(h)
	rows, err := h.st.Pool().Query(context.Background(), `SELECT token FROM approvals WHERE token IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	var toks []string
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var tok struct {
			Token struct {
				TokenID string `json:"token_id"`
			} `json:"token"`
			Signature string `json:"signature"`
		}
		if err := json.Unmarshal(raw, &tok); err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tok.Token.TokenID, tok.Signature)
	}
	rows.Close()
	if len(toks) != 4 {
		t.Fatalf("tokens = %d", len(toks)/2)
	}
	for _, s := range toks {
		if s == "" || strings.Contains(all, s) {
			t.Fatalf("token material %q empty or seen by the model", s)
		}
	}
	// Every transition is audited.
	for _, k := range []string{"task.created", "task.planned", "task.step_started", "task.call_proposed", "task.call_result", "task.step_finished", "task.verified", "task.done"} {
		if n := h.count(t, `SELECT count(*) FROM audit_log WHERE kind = $1`, k); n == 0 {
			t.Fatalf("no %s audit entry", k)
		}
	}
	if n, err := h.st.VerifyAudit(context.Background()); err != nil || n == 0 {
		t.Fatalf("audit chain: %d entries, %v", n, err)
	}
	// /tasks shows it with its spend.
	h.deliver(t, owner, "/tasks", nil)
	h.ch.waitFor(t, "/tasks", func(m []core.OutMessage) bool {
		return hasText(m, "• Say two things — done; spent 5 model call(s)")
	})
}

// The plan's check fails: the step is retried with the failure as context,
// and once the world is right the check passes and the task is done.
func TestTaskVerifyFailRetryPass(t *testing.T) {
	t.Parallel()
	h := setupTasks(t, taskOpts{})
	marker := filepath.Join(h.dir, "marker")
	h.fake.Script(planTaskCall("make the marker"), planReply(fmt.Sprintf(`title: Make the marker
steps:
  - Create the marker
verify:
  - name: marker exists
    expect: { file_exists: %s }
`, marker)),
		shellCall(`["echo","making"]`), stepDone("made it"),
		shellCall(`["echo","again"]`), stepDone("made it again"))
	h.deliver(t, owner, "make the marker", nil)
	h.deliver(t, owner, "", &core.Tap{Card: h.pendingCard(t, "echo making").ID, Choice: "approve"})
	c := h.pendingCard(t, "echo again")
	reqs := h.fake.Requests()
	if brief := reqs[len(reqs)-1].Messages[1].Text(); !strings.Contains(brief, "attempt 2") || !strings.Contains(brief, "verification failed: marker exists ✗") {
		t.Fatalf("retry briefing lacks the failure:\n%s", brief)
	}
	if err := os.WriteFile(marker, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.deliver(t, owner, "", &core.Tap{Card: c.ID, Choice: "approve"})
	h.ch.waitFor(t, "summary", func(m []core.OutMessage) bool {
		return hasText(m, "Done: Make the marker ✓") && hasText(m, "marker exists ✓")
	})
	if n := h.count(t, `SELECT count(*) FROM task_attempts WHERE state = 'failed'`); n != 1 {
		t.Fatalf("failed attempts = %d", n)
	}
}

// A blocked call is told to the model; a step that stays stuck after its
// attempts escalates with "Stuck on step N … Retry / Re-plan / Stop";
// Retry runs the step again and Stop ends the task.
func TestTaskEscalation(t *testing.T) {
	t.Parallel()
	h := setupTasks(t, taskOpts{recovery: task.Policy{MaxAttempts: 2}})
	h.fake.Script(planTaskCall("fetch it"), planReply("title: Fetch it\nsteps: [Download the file]\non_stuck: escalate\nverify:\n  - run: [test, -d, /]\n    expect: {exit_code: 0}\n"),
		shellCall(`["curl","https://example.org"]`), stuck("downloads are blocked"),
		stuck("still blocked"),
		stuck("blocked after retry"), stuck("blocked again"))
	h.deliver(t, owner, "fetch the file", nil)
	var esc *cards.Card
	msgs := h.ch.waitFor(t, "escalation card", func(m []core.OutMessage) bool {
		esc = card(m, func(c *cards.Card) bool {
			return strings.HasPrefix(c.Intent, "Stuck on step 1: still blocked") && c.Open()
		})
		return esc != nil
	})
	if !hasText(msgs, "`curl https://example.org` was not run: blocked by policy: downloads are not allowed here.") {
		t.Fatal("the user was not told about the blocked call")
	}
	reqs := h.fake.Requests()
	if got := reqs[3].Messages[len(reqs[3].Messages)-1].Text(); !strings.Contains(got, "blocked by policy: downloads are not allowed here") {
		t.Fatalf("model was not told the call was blocked: %q", got)
	}
	var ids []string
	for _, ch := range esc.Choices {
		ids = append(ids, ch.ID+"="+ch.Label)
	}
	if strings.Join(ids, ",") != "retry=Retry,replan=Re-plan,stop=Stop" {
		t.Fatalf("choices = %v", ids)
	}
	if st, _ := h.taskState(t); st != "escalated" {
		t.Fatalf("state = %s", st)
	}
	h.deliver(t, owner, "", &core.Tap{Card: esc.ID, Choice: "retry"})
	var esc2 *cards.Card
	h.ch.waitFor(t, "second escalation", func(m []core.OutMessage) bool {
		esc2 = card(m, func(c *cards.Card) bool {
			return c.ID != esc.ID && strings.HasPrefix(c.Intent, "Stuck on step 1") && c.Open()
		})
		return esc2 != nil && card(m, func(c *cards.Card) bool { return c.ID == esc.ID && c.Outcome == "Retry chosen by test:owner." }) != nil
	})
	// A tap on the old card changes nothing.
	h.deliver(t, owner, "", &core.Tap{Card: esc.ID, Choice: "stop"})
	h.ch.waitFor(t, "refusal", func(m []core.OutMessage) bool { return hasText(m, "nothing was changed") })
	h.deliver(t, owner, "", &core.Tap{Card: esc2.ID, Choice: "stop"})
	h.ch.waitFor(t, "stopped", func(m []core.OutMessage) bool {
		return hasText(m, "Stopped the task \"Fetch it\": stopped by the user")
	})
	if st, _ := h.taskState(t); st != "stopped" {
		t.Fatalf("state = %s", st)
	}
	if n := h.executions(t); n != 0 {
		t.Fatalf("executions = %d", n)
	}
}

// /stop mid-task: the open card closes as cancelled, nothing runs, even a
// later tap on it; /tasks shows the task stopped.
func TestTaskStop(t *testing.T) {
	t.Parallel()
	h := setupTasks(t, taskOpts{})
	h.fake.Script(planTaskCall("two things"), planReply(twoStepPlan), shellCall(`["echo","one"]`))
	h.deliver(t, owner, "say one, then two", nil)
	c := h.pendingCard(t, "echo one")
	h.deliver(t, owner, "/stop", nil)
	h.ch.waitFor(t, "cancelled card", func(m []core.OutMessage) bool {
		d := card(m, func(d *cards.Card) bool { return d.ID == c.ID })
		return d.Status == cards.StatusDeclined && strings.Contains(d.Outcome, "Cancelled: its task was stopped") && hasText(m, "Stopped the task")
	})
	h.deliver(t, owner, "", &core.Tap{Card: c.ID, Choice: "approve"})
	h.ch.waitFor(t, "refused tap", func(m []core.OutMessage) bool { return hasText(m, "Already decided") })
	if n := h.executions(t); n != 0 {
		t.Fatalf("executions = %d", n)
	}
	if st, reason := h.taskState(t); st != "stopped" || reason != "stopped by the user" {
		t.Fatalf("state = %s (%s)", st, reason)
	}
	h.deliver(t, owner, "/stop", nil)
	h.ch.waitFor(t, "nothing to stop", func(m []core.OutMessage) bool { return hasText(m, "No running task here to stop.") })
	if n := len(h.fake.Requests()); n != 3 {
		t.Fatalf("%d model calls after the stop, want 3", n)
	}
}

// A restart in the middle of a task: the model call in flight is made
// again by the new process, and the step that already ran is not run again.
func TestTaskResumesAfterRestart(t *testing.T) {
	t.Parallel()
	h := setupTasks(t, taskOpts{})
	h.fake.Script(planTaskCall("two things"), planReply(twoStepPlan), shellCall(`["echo","one"]`))
	release := make(chan struct{})
	var once sync.Once
	inFlight := make(chan struct{})
	h.fake.Respond(func(llmtest.ChatRequest) llmtest.Reply {
		once.Do(func() { close(inFlight) })
		<-release
		return stepDone("answered too late")
	})
	h.deliver(t, owner, "say one, then two", nil)
	h.deliver(t, owner, "", &core.Tap{Card: h.pendingCard(t, "echo one").ID, Choice: "approve"})
	select {
	case <-inFlight:
	case <-time.After(20 * time.Second):
		t.Fatal("the executor was not asked after step 1")
	}
	h.stop() // the gateway stops while the model call is in flight
	h.fake.Script(stepDone("said one"), shellCall(`["echo","two"]`), stepDone("said two"))
	close(release)
	h.start(t)
	h.deliver(t, owner, "", &core.Tap{Card: h.pendingCard(t, "echo two").ID, Choice: "approve"})
	h.ch.waitFor(t, "summary", func(m []core.OutMessage) bool { return hasText(m, "Done: Say two things ✓") })
	if n := h.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'execution.started'`); n != 2 {
		t.Fatalf("execution.started = %d, want 2 (step 1 must not run twice)", n)
	}
	if n := h.count(t, `SELECT count(*) FROM task_calls`); n != 2 {
		t.Fatalf("task calls = %d", n)
	}
}

// A budget reached stops the task with a message saying which; policy
// lets `uname` run without a tap (allow), and only there.
func TestTaskBudgetExhausted(t *testing.T) {
	t.Parallel()
	h := setupTasks(t, taskOpts{limits: task.Limits{Tokens: 100000, ModelCalls: 50, ToolCalls: 1, WallTime: time.Hour}})
	h.fake.Script(planTaskCall("two things"), planReply("title: Kernel then more\nsteps: [Show the kernel, Say more]\n"),
		shellCall(`["uname"]`), stepDone("shown"), shellCall(`["echo","more"]`))
	h.deliver(t, owner, "kernel then more", nil)
	h.ch.waitFor(t, "budget stop", func(m []core.OutMessage) bool {
		return hasText(m, "Stopped the task \"Kernel then more\": the task proposed the 1 tool calls its budget allows")
	})
	if n := h.count(t, `SELECT count(*) FROM executions WHERE status = 'verified'`); n != 1 || h.executions(t) != 1 {
		t.Fatalf("verified executions = %d", n)
	}
	if n := h.count(t, `SELECT count(*) FROM approvals`); n != 1 {
		t.Fatalf("approvals = %d (the call over the budget must not become one)", n)
	}
	if n := h.count(t, `SELECT count(*) FROM approvals WHERE decided_by = 'policy:reads'`); n != 1 {
		t.Fatalf("policy approvals = %d", n)
	}
	if n := len(h.fake.Requests()); n != 5 {
		t.Fatalf("%d model calls, want 5 (none after the budget ran out)", n)
	}
}

// A plan check whose command the risk policy does not allow on its own is
// proposed like any other action: a card ("Check 1 of 1 — …"), a tap, the
// sandbox, and the plan's check judges the run. Declined, the check fails
// and the task recovers (here: the step is retried, and the check asked
// again for the new attempt).
func TestTaskCheckNeedingApproval(t *testing.T) {
	t.Parallel()
	const plan = `title: Get ready
steps:
  - Get ready
verify:
  - name: ready
    run: [echo, ready]
    expect: { contains: ready }
`
	h := setupTasks(t, taskOpts{})
	h.fake.Script(planTaskCall("get ready"), planReply(plan), shellCall(`["echo","step"]`), stepDone("did it"),
		shellCall(`["echo","step"]`), stepDone("did it again"))
	h.deliver(t, owner, "get ready", nil)
	h.deliver(t, owner, "", &core.Tap{Card: h.pendingCard(t, "echo step").ID, Choice: "approve"})

	// The check's card; nothing of it ran before the tap.
	chk := h.pendingCard(t, "echo ready")
	if !strings.HasPrefix(chk.Intent, "Check 1 of 1 — Get ready: run echo ready") {
		t.Fatalf("check card intent = %q", chk.Intent)
	}
	if n := h.executions(t); n != 1 {
		t.Fatalf("%d executions before the check's tap, want 1 (the step)", n)
	}
	// Declined: the check fails, the step is retried, and its new attempt
	// asks again.
	h.deliver(t, owner, "", &core.Tap{Card: chk.ID, Choice: "decline"})
	h.deliver(t, owner, "", &core.Tap{Card: h.pendingCard(t, "echo step").ID, Choice: "approve"})
	chk2 := h.pendingCard(t, "echo ready")
	if chk2.ID == chk.ID {
		t.Fatal("the declined check card was offered again")
	}
	h.deliver(t, owner, "", &core.Tap{Card: chk2.ID, Choice: "approve"})
	msgs := h.ch.waitFor(t, "summary", func(m []core.OutMessage) bool { return hasText(m, "Done: Get ready ✓") })
	if !hasText(msgs, "ready ✓") || !hasText(msgs, "What ran: `echo step` (step 1); `echo step` (step 1).") {
		var texts []string
		for _, m := range msgs {
			texts = append(texts, m.Text)
		}
		t.Fatalf("summary:\n%s", strings.Join(texts, "\n"))
	}
	if n := h.executions(t); n != 3 {
		t.Fatalf("%d executions, want 3 (two attempts at the step, one approved check)", n)
	}
	if st, _ := h.taskState(t); st != "done" {
		t.Fatalf("task state = %s", st)
	}
}
