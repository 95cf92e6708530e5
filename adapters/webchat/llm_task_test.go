package webchat

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/channeltest"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/background/backgroundtest"
	"github.com/silas-gateway/silas/core/execute"
	coregateway "github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tasks"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/storetest"
	"github.com/silas-gateway/silas/internal/taskwire"
)

// llmWeb is a gateway with the LLM agent and the task runtime behind the
// web chat: real engine, task runtime, PostgreSQL, sandbox, policy and
// verification; the model is the scripted fake endpoint.
type llmWeb struct {
	ctx  context.Context
	st   *store.Store
	fake *llmtest.Server
	web  *conformanceClient
	dir  string // a directory the plans' file_exists checks may look at
}

// newLLMWeb starts one; limits zero means the defaults of these tests.
func newLLMWeb(t *testing.T, limits task.Limits, opts ...func(*coregateway.Config)) *llmWeb {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: t.TempDir()})
	if err != nil {
		cancel()
		st.Close()
		t.Fatal(err)
	}
	dir := t.TempDir()
	fake := llmtest.New(t, "sk-webchat-test-key", "m")
	client, err := llm.New(llm.Config{BaseURL: fake.BaseURL(), APIKey: "sk-webchat-test-key", Models: llm.Models{Proxy: "m", Planner: "m", Executor: "m"},
		Timeout: 5 * time.Second, MaxRetries: 1, MaxRetryDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The plan's check (`test …`) runs without a tap; everything else
	// needs one.
	pol, err := policy.New([]policy.Rule{
		{Name: "checks", Tool: "shell", Match: `^test `, Decision: policy.Allow, Risk: cards.RiskLow},
		{Name: "default", Tool: "*", Decision: policy.AuthRequired, Risk: cards.RiskLow},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	logs := &lockedLog{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	web := newConformanceClient(t)
	ch := web.NewChannel(t, st, log)
	ag := &llm.Agent{Proxy: llm.Proxy{Client: client}, Planner: llm.Planner{Client: client}, Fallback: agent.Command{}, Tasks: true, History: st}
	if limits == (task.Limits{}) {
		limits = task.Limits{Tokens: 100000, ModelCalls: 20, ToolCalls: 5, WallTime: time.Hour}
	}
	cfg := coregateway.Config{Store: st, Channels: []core.Channel{ch}, Agent: ag, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}, AllowedDirs: []string{dir}}, Policy: pol, Key: key,
		Owners: []core.IdentityID{web.Identity(channeltest.Approver)}, Logger: log,
		Tasks: taskwire.Runtime(tasks.Config{Planner: llm.Planner{Client: client}, Executor: llm.Executor{Client: client}, Limits: limits})}
	for _, o := range opts {
		o(&cfg)
	}
	eng, err := coregateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	engDone, chDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(engDone); _ = eng.Run(ctx, time.Second) }()
	<-eng.Ready()
	stopRoom := backgroundtest.Start(t, st.Pool(), eng.Jobs) // works the task steps
	go func() { defer close(chDone); _ = ch.Run(ctx, eng) }()
	// Cleanups run last-in first-out: the log is shown, then the gateway
	// stops, then the sandbox and the store close.
	t.Cleanup(func() { st.Close() })
	t.Cleanup(func() { _ = sb.Close() })
	t.Cleanup(func() { cancel(); <-chDone; <-engDone; stopRoom() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	web.Started(t, ch)
	return &llmWeb{ctx: ctx, st: st, fake: fake, web: web, dir: dir}
}

// count runs a counting query.
func (h *llmWeb) count(t *testing.T, q string) int {
	t.Helper()
	var n int
	if err := h.st.Pool().QueryRow(h.ctx, q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestLLMTaskThroughTheWebChat is a task of the LLM agent as a person in
// the web chat lives it, over the WebSocket the page uses: ask for an
// outcome → the plan card → the step's approval card → tap → the step runs
// in the sandbox and is verified → the plan's own check runs → the summary
// message; then the next message's proxy call sees that conversation as
// history.
func TestLLMTaskThroughTheWebChat(t *testing.T) {
	t.Parallel()
	h := newLLMWeb(t, task.Limits{})
	ctx, st, fake, web := h.ctx, h.st, h.fake, h.web

	fake.Script(
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "plan_task", Arguments: `{"goal":"check that the root directory is there"}`}}},
		llmtest.Reply{Content: "---\ntitle: Check the root\nsteps:\n  - List the root directory\nverify:\n  - name: root is a directory\n" +
			"    run: [test, -d, /]\n    expect: { exit_code: 0 }\n---\n# Context\nA test plan."},
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "shell", Arguments: `{"argv":["echo","root listed"],"intent":"List the root"}`}}},
		llmtest.Reply{Content: "STEP DONE: listed the root"},
	)
	web.Say(t, channeltest.Approver, "check that the root directory is there")

	plan := waitShown(t, web, "the plan card", func(s *shown) bool { return s.card != nil && s.card.Intent == "Plan: Check the root" })
	if plan.card.Open() || !strings.Contains(plan.card.Details, "1. List the root directory") ||
		!strings.Contains(plan.card.Details, "root is a directory: test -d /") {
		t.Fatalf("plan card = %+v", plan.card)
	}
	step := waitShown(t, web, "the step's approval card", func(s *shown) bool {
		return s.card != nil && s.card.Command == "echo 'root listed'" && s.card.Status == cards.StatusPending
	})
	if !strings.HasPrefix(step.card.Intent, "Step 1 of 1 — Check the root") || !step.card.Open() {
		t.Fatalf("step card = %+v", step.card)
	}
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM executions`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("executions before the tap: %d, %v", n, err)
	}
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: step.card.ID}, "approve")

	ran := waitShown(t, web, "the step verified", func(s *shown) bool {
		return s.card != nil && s.card.ID == step.card.ID && s.card.Status == cards.StatusDone
	})
	if !strings.Contains(ran.card.Outcome, "exit code 0 ✓") || !strings.Contains(ran.card.Output, "root listed") {
		t.Fatalf("executed card = %+v", ran.card)
	}
	sum := waitShown(t, web, "the summary", func(s *shown) bool { return s.card == nil && strings.HasPrefix(s.text, "Done: Check the root ✓") })
	for _, want := range []string{"What ran: `echo 'root listed'` (step 1).", "Checked by the gateway: root is a directory ✓."} {
		if !strings.Contains(sum.text, want) {
			t.Fatalf("summary lacks %q:\n%s", want, sum.text)
		}
	}
	waitShown(t, web, "the plan card marked done", func(s *shown) bool {
		return s.card != nil && s.card.ID == plan.card.ID && s.card.Status == cards.StatusDone
	})
	var state string
	if err := st.Pool().QueryRow(ctx, `SELECT state FROM tasks`).Scan(&state); err != nil || state != "done" {
		t.Fatalf("task state = %q, %v", state, err)
	}
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM executions WHERE status = 'verified'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("verified executions = %d, %v", n, err)
	}
	if got := len(fake.Requests()); got != 4 {
		t.Fatalf("%d model calls, want 4", got)
	}
	// The next message's proxy call has the task's conversation as history
	// (read back from storage under the web chat's own names), the tap
	// not being a message.
	fake.Script(llmtest.Reply{Content: "I listed the root; the gateway checked it is a directory."})
	web.Say(t, channeltest.Approver, "what did you just do?")
	waitShown(t, web, "the answer", func(s *shown) bool { return s.text == "I listed the root; the gateway checked it is a directory." })
	reqs := fake.Requests()
	var hist strings.Builder
	for _, m := range reqs[len(reqs)-1].Messages {
		fmt.Fprintf(&hist, "[%s] %s\n", m.Role, m.Text())
	}
	for _, want := range []string{"[user] check that the root directory is there\n", "[card]\n<<<DATA source=card\nPlan: Check the root", "Command: echo 'root listed'",
		"Done: Check the root ✓", "[user] what did you just do?\n"} {
		if !strings.Contains(hist.String(), want) {
			t.Fatalf("the proxy's history lacks %q:\n%s", want, hist.String())
		}
	}
	if strings.Contains(hist.String(), string(step.card.ID)) {
		t.Fatalf("a card id reached the model:\n%s", hist.String())
	}
	if _, err := st.VerifyAudit(ctx); err != nil {
		t.Fatalf("audit chain: %v", err)
	}
}

// lockedLog collects the gateway's log for a failing test's output.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitShown waits until the web chat shows a message matching pred and
// returns a copy of it.
func waitShown(t *testing.T, c *conformanceClient, what string, pred func(*shown) bool) shown {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		for _, id := range c.order {
			if s := c.msgs[id]; pred(s) {
				out := *s
				if s.card != nil {
					cc := *s.card
					out.card = &cc
				}
				c.mu.Unlock()
				return out
			}
		}
		var b strings.Builder
		for _, id := range c.order {
			s := c.msgs[id]
			if s.card != nil {
				fmt.Fprintf(&b, "card %q %q %s\n", s.card.Intent, s.card.Command, s.card.Status)
			} else {
				fmt.Fprintf(&b, "text %q\n", s.text)
			}
		}
		c.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; the web chat shows:\n%s", what, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func planTask(goal string) llmtest.Reply {
	return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "plan_task", Arguments: `{"goal":"` + goal + `"}`}}}
}

func shell(argv string) llmtest.Reply {
	return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "shell", Arguments: `{"argv":` + argv + `,"intent":"Do the step"}`}}}
}

func planOf(frontMatter string) llmtest.Reply {
	return llmtest.Reply{Content: "---\n" + frontMatter + "---\n# Context\nA test plan."}
}

// pendingStep waits for the open approval card of command.
func pendingStep(t *testing.T, web *conformanceClient, command string) *cards.Card {
	t.Helper()
	s := waitShown(t, web, "the approval card for "+command, func(s *shown) bool {
		return s.card != nil && s.card.Command == command && s.card.Status == cards.StatusPending
	})
	return s.card
}

// requestsText is every message of the model requests from the i-th on.
func requestsText(fake *llmtest.Server, from int) string {
	var b strings.Builder
	for _, r := range fake.Requests()[from:] {
		for _, m := range r.Messages {
			fmt.Fprintf(&b, "[%s] %s\n", m.Role, m.Text())
		}
	}
	return b.String()
}

// A declined step card runs nothing; the executor is told so and proposes
// another way, which the person approves, and the task finishes. A second
// task whose executor gives up after the decline stops at the escalation
// card's Stop. Rejection path of seed 000 §3.3 through the web chat.
func TestLLMTaskDeclineThroughTheWebChat(t *testing.T) {
	t.Parallel()
	h := newLLMWeb(t, task.Limits{})
	web, fake := h.web, h.fake

	fake.Script(planTask("greet"), planOf("title: Greet\nsteps:\n  - Greet the user\n"), shell(`["echo","loud-hello"]`))
	web.Say(t, channeltest.Approver, "greet me")
	loud := pendingStep(t, web, "echo loud-hello")
	asked := len(fake.Requests())
	fake.Script(shell(`["echo","quiet-hello"]`), llmtest.Reply{Content: "STEP DONE: greeted quietly"})
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: loud.ID}, "decline")
	waitShown(t, web, "the declined card", func(s *shown) bool {
		return s.card != nil && s.card.ID == loud.ID && s.card.Status == cards.StatusDeclined
	})
	quiet := pendingStep(t, web, "echo quiet-hello")
	if told := requestsText(fake, asked); !strings.Contains(told, "The user declined this call; nothing was run.") {
		t.Fatalf("the executor was not told of the decline:\n%s", told)
	}
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: quiet.ID}, "approve")
	sum := waitShown(t, web, "the summary", func(s *shown) bool { return s.card == nil && strings.HasPrefix(s.text, "Done: Greet ✓") })
	if !strings.Contains(sum.text, "`echo quiet-hello`") || strings.Contains(sum.text, "loud-hello") {
		t.Fatalf("summary:\n%s", sum.text)
	}
	if n := h.count(t, `SELECT count(*) FROM executions`); n != 1 {
		t.Fatalf("executions = %d, want 1 (the declined call must not run)", n)
	}
	if n := h.count(t, `SELECT count(*) FROM executions e JOIN approvals a ON a.id = e.approval_id WHERE a.status = 'declined'`); n != 0 {
		t.Fatalf("the declined approval has %d executions", n)
	}

	// The executor gives up after a decline (and on every retry of the
	// step): the plan says escalate, the person taps Stop, and the task
	// ends with nothing run.
	fake.Script(planTask("remove things"), planOf("title: Remove things\nsteps:\n  - Remove the files\non_stuck: escalate\n"),
		shell(`["rm","-rf","/tmp/things"]`))
	fake.Respond(func(llmtest.ChatRequest) llmtest.Reply {
		return llmtest.Reply{Content: "STUCK: the user does not want the files removed"}
	})
	web.Say(t, channeltest.Approver, "remove the things")
	rm := pendingStep(t, web, "rm -rf /tmp/things")
	asked = len(fake.Requests())
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: rm.ID}, "decline")
	esc := waitShown(t, web, "the escalation card", func(s *shown) bool {
		return s.card != nil && strings.HasPrefix(s.card.Intent, "Stuck on step 1") && s.card.Open()
	})
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: esc.card.ID}, "stop")
	waitShown(t, web, "the task stopped", func(s *shown) bool {
		return s.card == nil && strings.HasPrefix(s.text, `Stopped the task "Remove things"`)
	})
	if n := h.count(t, `SELECT count(*) FROM executions`); n != 1 {
		t.Fatalf("executions = %d, want still 1", n)
	}
	if n := h.count(t, `SELECT count(*) FROM tasks WHERE state = 'stopped'`); n != 1 {
		t.Fatalf("stopped tasks = %d", n)
	}
	if told := requestsText(fake, asked); !strings.Contains(told, "The user declined this call; nothing was run.") {
		t.Fatalf("the executor was not told of the second decline:\n%s", told)
	}
}

// /stop in the middle of a task: the waiting step card closes as
// cancelled, a later tap on it runs nothing, no further model call is
// made, and /tasks shows the task stopped.
func TestLLMTaskStopThroughTheWebChat(t *testing.T) {
	t.Parallel()
	h := newLLMWeb(t, task.Limits{})
	web, fake := h.web, h.fake
	fake.Script(planTask("two things"), planOf("title: Two things\nsteps: [Say one, Say two]\n"), shell(`["echo","one"]`))
	web.Say(t, channeltest.Approver, "say one, then two")
	c := pendingStep(t, web, "echo one")
	web.Say(t, channeltest.Approver, "/stop")
	closed := waitShown(t, web, "the cancelled card", func(s *shown) bool {
		return s.card != nil && s.card.ID == c.ID && s.card.Status == cards.StatusDeclined
	})
	if !strings.Contains(closed.card.Outcome, "Cancelled: its task was stopped") || closed.card.Open() {
		t.Fatalf("closed card = %+v", closed.card)
	}
	waitShown(t, web, "the stop message", func(s *shown) bool {
		return s.card == nil && strings.HasPrefix(s.text, `Stopped the task "Two things"`)
	})
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: c.ID}, "approve")
	deadline := time.Now().Add(30 * time.Second)
	for !slicesContain(web.Told(t, channeltest.Approver), "Already decided") {
		if time.Now().After(deadline) {
			t.Fatalf("the late tap was not refused; told: %q", web.Told(t, channeltest.Approver))
		}
		time.Sleep(20 * time.Millisecond)
	}
	web.Say(t, channeltest.Approver, "/tasks")
	list := waitShown(t, web, "the task list", func(s *shown) bool { return strings.HasPrefix(s.text, "Tasks (newest first):") })
	if !strings.Contains(list.text, "• Two things — stopped: stopped by the user;") {
		t.Fatalf("/tasks:\n%s", list.text)
	}
	if n := h.count(t, `SELECT count(*) FROM executions`); n != 0 {
		t.Fatalf("executions = %d", n)
	}
	if n := len(fake.Requests()); n != 3 {
		t.Fatalf("%d model calls, want 3 (none after the stop)", n)
	}
}

func slicesContain(told []string, sub string) bool {
	for _, s := range told {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// A task that reaches its tool-call budget stops with a message saying
// which limit; the call over the budget never becomes a card.
func TestLLMTaskBudgetThroughTheWebChat(t *testing.T) {
	t.Parallel()
	h := newLLMWeb(t, task.Limits{Tokens: 100000, ModelCalls: 20, ToolCalls: 1, WallTime: time.Hour})
	web, fake := h.web, h.fake
	fake.Script(planTask("two things"), planOf("title: Two things\nsteps: [Say one, Say two]\n"),
		shell(`["echo","one"]`), llmtest.Reply{Content: "STEP DONE: said one"}, shell(`["echo","two"]`))
	web.Say(t, channeltest.Approver, "say one, then two")
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: pendingStep(t, web, "echo one").ID}, "approve")
	stop := waitShown(t, web, "the budget stop", func(s *shown) bool {
		return s.card == nil && strings.HasPrefix(s.text, `Stopped the task "Two things"`)
	})
	if !strings.Contains(stop.text, "the task proposed the 1 tool calls its budget allows") || !strings.Contains(stop.text, "Nothing further will run") {
		t.Fatalf("stop message:\n%s", stop.text)
	}
	if n := h.count(t, `SELECT count(*) FROM approvals`); n != 1 {
		t.Fatalf("approvals = %d (the call over the budget must not become one)", n)
	}
	if n := h.count(t, `SELECT count(*) FROM executions WHERE status = 'verified'`); n != 1 {
		t.Fatalf("verified executions = %d", n)
	}
	if n := h.count(t, `SELECT count(*) FROM tasks WHERE state = 'stopped'`); n != 1 {
		t.Fatalf("stopped tasks = %d", n)
	}
	if n := len(fake.Requests()); n != 5 {
		t.Fatalf("%d model calls, want 5 (none after the budget ran out)", n)
	}
}

var pointerRE = regexp.MustCompile(`taskout-[0-9A-Za-z]+`)

// A step's big output (over 10,000 characters) reaches the executor
// evicted — a pointer and its first 500 characters — and read_output with
// that pointer brings the whole of it back; the task goes on to its
// summary, and the web chat shows the card as usual.
func TestLLMTaskEvictionThroughTheWebChat(t *testing.T) {
	t.Parallel()
	h := newLLMWeb(t, task.Limits{})
	web, fake := h.web, h.fake
	fake.Script(planTask("count"), planOf("title: Count\nsteps: [Count to 3000]\n"), shell(`["seq","1","3000"]`))
	var mu sync.Mutex
	var seen []string
	fake.Respond(func(req llmtest.ChatRequest) llmtest.Reply {
		mu.Lock()
		defer mu.Unlock()
		last := req.Messages[len(req.Messages)-1].Text()
		switch {
		case strings.Contains(last, "[EVICTED] Content at "):
			seen = append(seen, "evicted")
			if strings.Contains(last, "2999") {
				seen = append(seen, "but whole")
			}
			return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "read_output", Arguments: `{"pointer":"` + pointerRE.FindString(last) + `"}`}}}
		case strings.Contains(last, `\n2999\n3000`):
			seen = append(seen, "rehydrated")
			return llmtest.Reply{Content: "STEP DONE: counted"}
		}
		seen = append(seen, "unexpected")
		return llmtest.Reply{Content: "STUCK: unexpected"}
	})
	web.Say(t, channeltest.Approver, "count to 3000")
	c := pendingStep(t, web, "seq 1 3000")
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: c.ID}, "approve")
	waitShown(t, web, "the summary", func(s *shown) bool { return s.card == nil && strings.HasPrefix(s.text, "Done: Count ✓") })
	mu.Lock()
	got := strings.Join(seen, ",")
	mu.Unlock()
	if got != "evicted,rehydrated" {
		t.Fatalf("the executor saw %s", got)
	}
	if n := h.count(t, `SELECT count(*) FROM task_outputs`); n != 1 {
		t.Fatalf("task outputs = %d", n)
	}
	if n := h.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'task.rehydrated'`); n != 1 {
		t.Fatalf("task.rehydrated = %d", n)
	}
	if n := h.count(t, `SELECT count(*) FROM executions`); n != 1 {
		t.Fatalf("executions = %d (read_output is not an action)", n)
	}
}

// A plan's check that fails after the last step makes the runtime retry
// the step with the failure as context; once the check passes the task is
// done. Nothing the executor says marks it done: the gateway's check does.
func TestLLMTaskVerifyFailRetryThroughTheWebChat(t *testing.T) {
	t.Parallel()
	h := newLLMWeb(t, task.Limits{})
	web, fake := h.web, h.fake
	marker := filepath.Join(h.dir, "marker")
	fake.Script(planTask("make the marker"), planOf(fmt.Sprintf("title: Make the marker\nsteps: [Create the marker]\n"+
		"verify:\n  - name: marker exists\n    expect: { file_exists: %s }\n", marker)),
		shell(`["echo","making"]`), llmtest.Reply{Content: "STEP DONE: made it"},
		shell(`["echo","again"]`), llmtest.Reply{Content: "STEP DONE: made it again"})
	web.Say(t, channeltest.Approver, "make the marker")
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: pendingStep(t, web, "echo making").ID}, "approve")
	again := pendingStep(t, web, "echo again")
	reqs := fake.Requests()
	if brief := reqs[len(reqs)-1].Messages[1].Text(); !strings.Contains(brief, "attempt 2") || !strings.Contains(brief, "verification failed: marker exists ✗") {
		t.Fatalf("the retry's briefing lacks the failure:\n%s", brief)
	}
	for _, s := range web.Chat(t) {
		if strings.HasPrefix(s.Text, "Done:") {
			t.Fatalf("done before its check passed: %q", s.Text)
		}
	}
	if err := os.WriteFile(marker, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: again.ID}, "approve")
	sum := waitShown(t, web, "the summary", func(s *shown) bool { return s.card == nil && strings.HasPrefix(s.text, "Done: Make the marker ✓") })
	if !strings.Contains(sum.text, "Checked by the gateway: marker exists ✓.") {
		t.Fatalf("summary:\n%s", sum.text)
	}
	if n := h.count(t, `SELECT count(*) FROM task_attempts WHERE state = 'failed'`); n != 1 {
		t.Fatalf("failed attempts = %d, want 1", n)
	}
	if n := h.count(t, `SELECT count(*) FROM executions WHERE status = 'verified'`); n != 2 {
		t.Fatalf("verified executions = %d, want 2", n)
	}
}

// Integrity failure (seed 000 §3.4) in a task: the step's stored request is
// changed after its card was shown; the tap is refused over the WebSocket,
// nothing runs, the model is asked nothing more, and /stop then closes the
// card.
func TestLLMTaskAlteredCallThroughTheWebChat(t *testing.T) {
	t.Parallel()
	h := newLLMWeb(t, task.Limits{})
	web, fake := h.web, h.fake
	fake.Script(planTask("say safe"), planOf("title: Say safe\nsteps: [Say safe]\n"), shell(`["echo","safe"]`))
	web.Say(t, channeltest.Approver, "say safe")
	c := pendingStep(t, web, "echo safe")
	marker := filepath.Join(h.dir, "pwned")
	evil := core.Action{Tool: "shell", Argv: []string{"touch", marker}, Verify: []verify.Check{verify.ExitCodeZero()}}
	canonical, _ := evil.Canonical()
	hash, _ := evil.Hash()
	if _, err := h.st.Pool().Exec(h.ctx, `UPDATE approvals SET action_canonical = $2, action_hash = $3 WHERE id = $1`, string(c.ID), canonical, hash); err != nil {
		t.Fatal(err)
	}
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: c.ID}, "approve")
	deadline := time.Now().Add(30 * time.Second)
	for !slicesContain(web.Told(t, channeltest.Approver), "This request was altered after it was proposed") {
		if time.Now().After(deadline) {
			t.Fatalf("the altered call's tap was not refused; told: %q", web.Told(t, channeltest.Approver))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := h.count(t, `SELECT count(*) FROM executions`); n != 0 {
		t.Fatalf("executions = %d", n)
	}
	if n := h.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'approval.refused' AND data->>'reason' = 'altered'`); n != 1 {
		t.Fatalf("altered refusals audited = %d", n)
	}
	web.Say(t, channeltest.Approver, "/stop")
	waitShown(t, web, "the cancelled card", func(s *shown) bool {
		return s.card != nil && s.card.ID == c.ID && s.card.Status == cards.StatusDeclined
	})
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the altered action ran: %v", err)
	}
	if n := len(fake.Requests()); n != 3 {
		t.Fatalf("%d model calls, want 3", n)
	}
}

// ask_user in the web chat: the question card is answered by a tap on a
// choice or by the next plain message typed in the chat (which the proxy
// never sees); the card shows who answered, the executor gets the answer
// as the user's data, and the task goes on to its summary.
func TestLLMTaskQuestionThroughTheWebChat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    string
		answer  func(t *testing.T, web *conformanceClient, q *cards.Card)
		outcome string
	}{
		{name: "tap a choice", args: `{"question":"How many days of logs should I keep?","choices":["7 days","30 days"]}`,
			answer: func(t *testing.T, web *conformanceClient, q *cards.Card) {
				web.Tap(t, channeltest.Approver, channeltest.Message{Card: q.ID}, q.Choices[1].ID)
			}, outcome: ": 30 days"},
		{name: "type the answer", args: `{"question":"How many days of logs should I keep?"}`,
			answer: func(t *testing.T, web *conformanceClient, _ *cards.Card) {
				web.Say(t, channeltest.Approver, "30 days")
			}, outcome: ": 30 days"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newLLMWeb(t, task.Limits{})
			web, fake := h.web, h.fake
			fake.Script(planTask("clean the logs"), planOf("title: Clean logs\nsteps: [Clean the logs]\n"),
				llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "ask_user", Arguments: tt.args}}})
			web.Say(t, channeltest.Approver, "clean the logs")
			q := waitShown(t, web, "the question card", func(s *shown) bool {
				return s.card != nil && strings.HasPrefix(s.card.Intent, "Question: How many days") && s.card.Status == cards.StatusPending
			}).card
			if !strings.Contains(q.Rationale, "Step 1 of 1 — Clean logs") {
				t.Fatalf("question card = %+v", q)
			}
			fake.Script(shell(`["echo","30"]`), llmtest.Reply{Content: "STEP DONE: kept 30 days"})
			tt.answer(t, web, q)
			waitShown(t, web, "the answered card", func(s *shown) bool {
				return s.card != nil && s.card.ID == q.ID && s.card.Status == cards.StatusDone && !s.card.Open() && strings.HasPrefix(s.card.Outcome, "Answered by ") &&
					strings.HasSuffix(s.card.Outcome, tt.outcome)
			})
			web.Tap(t, channeltest.Approver, channeltest.Message{Card: pendingStep(t, web, "echo 30").ID}, "approve")
			waitShown(t, web, "the summary", func(s *shown) bool { return s.card == nil && strings.HasPrefix(s.text, "Done: Clean logs ✓") })
			reqs := fake.Requests()
			if len(reqs) != 5 {
				t.Fatalf("%d model calls, want 5 (the answer does not go to the proxy)", len(reqs))
			}
			ms := reqs[3].Messages
			if got := ms[len(ms)-1].Text(); ms[len(ms)-1].Role != "tool" || !strings.HasPrefix(got, "<<<DATA source=user answer\n") ||
				!strings.Contains(got, "30 days") {
				t.Fatalf("the executor got the answer as [%s] %q", ms[len(ms)-1].Role, got)
			}
		})
	}
}
