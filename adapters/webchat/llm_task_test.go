package webchat

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
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
	"github.com/silas-gateway/silas/core/engine"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tasks"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/storetest"
)

// TestLLMTaskThroughTheWebChat is a task of the LLM agent as a person in
// the web chat lives it, over the WebSocket the page uses: ask for an
// outcome → the plan card → the step's approval card → tap → the step runs
// in the sandbox and is verified → the plan's own check runs → the summary
// message; then the next message's proxy call sees that conversation as
// history. Real engine, task runtime, PostgreSQL, sandbox, policy and
// verification; the model is the scripted fake endpoint.
func TestLLMTaskThroughTheWebChat(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sb, err := sandbox.New(sandbox.Config{BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
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
	eng, err := engine.New(engine.Config{Store: st, Channels: []core.Channel{ch}, Agent: ag, Sandbox: sb,
		Verifier: &verify.Runner{Commands: engine.SandboxChecks{Sandbox: sb}}, Policy: pol, Key: key,
		Owners: []core.IdentityID{web.Identity(channeltest.Approver)}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := tasks.New(tasks.Config{Store: st, Planner: llm.Planner{Client: client}, Executor: llm.Executor{Client: client},
		Limits: task.Limits{Tokens: 100000, ModelCalls: 20, ToolCalls: 5, WallTime: time.Hour}, Logger: log}, eng.TaskHost())
	if err != nil {
		t.Fatal(err)
	}
	eng.SetTasks(rt)
	engDone, chDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(engDone); _ = eng.Run(ctx, time.Second) }()
	<-eng.Ready()
	go func() { defer close(chDone); _ = ch.Run(ctx, eng) }()
	defer func() { cancel(); <-chDone; <-engDone }()
	defer func() {
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	}()
	web.Started(t, ch)

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
	for _, want := range []string{"[user] check that the root directory is there\n", "[card] Plan: Check the root", "Command: echo 'root listed'",
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
