package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// llmEnv is the environment that makes `silas serve` use the fake model:
// only the documented keys (agent.kind, llm.base_url, llm.api_key as a
// file:, llm.models.proxy — planner and executor default to it).
func llmEnv(t *testing.T, fake *llmtest.Server, key string) []string {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "llm.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"SILAS_AGENT_KIND=llm", "SILAS_LLM_BASE_URL=" + fake.BaseURL(), "SILAS_LLM_API_KEY=file:" + keyFile,
		"SILAS_LLM_MODELS_PROXY=e2e-model"}
}

func llmToolCall(name, args string) llmtest.Reply {
	return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: name, Arguments: args}}}
}

// llmPlan is a one-step plan whose check the gateway judges itself
// (file_exists of the sandbox's own directory: the default policy lets no
// check command run without a tap, and this path is inside the verifier's
// allowed directories).
func llmPlan(title, step, data string) llmtest.Reply {
	return llmtest.Reply{Content: fmt.Sprintf("---\ntitle: %s\nsteps:\n  - %s\nverify:\n  - name: sandbox is there\n"+
		"    expect: { file_exists: %s }\n---\n# Context\nAn end-to-end plan.", title, step, filepath.Join(data, "sandbox"))}
}

// approveCard taps approve, and confirm when the policy rates the action
// above low risk, and returns the card once it is done.
func approveCard(c *client, cd *cards.Card) *cards.Card {
	c.t.Helper()
	c.tap(string(cd.ID), "approve")
	f := c.expect(fmt.Sprintf("card %s decided", cd.ID), func(f map[string]any) bool {
		d := card(f)
		return d != nil && d.ID == cd.ID && (d.Status == cards.StatusDone || d.Status == cards.StatusConfirming || d.Status == cards.StatusFailed)
	})
	if d := card(f); d.Status == cards.StatusConfirming {
		c.tap(string(cd.ID), "confirm")
	}
	return c.cardStatus(cd.ID, cards.StatusDone)
}

func textFrame(c *client, what string, pred func(string) bool) string {
	c.t.Helper()
	f := c.expect(what, func(f map[string]any) bool {
		s, ok := f["text"].(string)
		return ok && card(f) == nil && pred(s)
	})
	return f["text"].(string)
}

// TestLLMAgentThroughTheBinary runs the LLM agent as deployed: `silas
// serve` configured only through the documented environment keys, talking
// to a scripted OpenAI-compatible endpoint, used through the web chat's
// WebSocket: a plain question gets the model's answer; an outcome gets a
// plan card, a step card, a tap, the step verified and the summary; /tasks
// lists the task.
func TestLLMAgentThroughTheBinary(t *testing.T) {
	t.Parallel() // a server of its own on a database of its own
	const key = "sk-e2e-binary-key"
	fake := llmtest.New(t, key, "e2e-model")
	dsn := storetest.NewDatabase(t)
	data := t.TempDir()
	s := startServer(t, dsn, data, llmEnv(t, fake, key)...)
	c := s.connect(t)

	// (a) A plain question: the proxy answers in text.
	fake.Script(llmtest.Reply{Content: "Four, as far as arithmetic goes."})
	c.say("what is two plus two?")
	textFrame(c, "the model's answer", func(s string) bool { return s == "Four, as far as arithmetic goes." })
	reqs := fake.Requests()
	if len(reqs) != 1 || reqs[0].Model != "e2e-model" || reqs[0].Authorization != "Bearer "+key {
		t.Fatalf("model requests = %d, first model %q, key sent right: %v", len(reqs), reqs[0].Model, reqs[0].Authorization == "Bearer "+key)
	}
	if last := reqs[0].Messages[len(reqs[0].Messages)-1]; last.Role != "user" || !strings.Contains(last.Text(), "what is two plus two?") {
		t.Fatalf("the proxy was not asked the question: [%s] %q", last.Role, last.Text())
	}

	// (b) An outcome: plan card → step card → tap → verified → summary.
	fake.Script(
		llmToolCall("plan_task", `{"goal":"say hello from the sandbox"}`),
		llmPlan("Say hello", "Print a greeting", data),
		llmToolCall("shell", `{"argv":["echo","hello-from-e2e"],"intent":"Print a greeting"}`),
		llmtest.Reply{Content: "STEP DONE: greeted"},
	)
	c.say("say hello from the sandbox")
	pf := c.expect("the plan card", func(f map[string]any) bool { d := card(f); return d != nil && d.Intent == "Plan: Say hello" })
	plan := card(pf)
	if plan.Open() || !strings.Contains(plan.Details, "1. Print a greeting") || !strings.Contains(plan.Details, "sandbox is there") {
		t.Fatalf("plan card = %+v", plan)
	}
	step := c.cardFor("echo hello-from-e2e", cards.StatusPending)
	if !strings.HasPrefix(step.Intent, "Step 1 of 1 — Say hello") || !step.Open() {
		t.Fatalf("step card = %+v", step)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM executions`); n != 0 {
		t.Fatalf("executions before the tap: %d", n)
	}
	done := approveCard(c, step)
	if !strings.Contains(done.Outcome, "exit code 0 ✓") || !strings.Contains(done.Output, "hello-from-e2e") {
		t.Fatalf("executed card = %+v", done)
	}
	sum := textFrame(c, "the summary", func(s string) bool { return strings.HasPrefix(s, "Done: Say hello ✓") })
	for _, want := range []string{"What ran: `echo hello-from-e2e` (step 1).", "Checked by the gateway: sandbox is there ✓.", "Spent: "} {
		if !strings.Contains(sum, want) {
			t.Fatalf("summary lacks %q:\n%s", want, sum)
		}
	}
	c.cardStatus(plan.ID, cards.StatusDone)
	if n := dbCount(t, dsn, `SELECT count(*) FROM executions WHERE status = 'verified'`); n != 1 {
		t.Fatalf("verified executions = %d, want 1", n)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM tasks WHERE state = 'done'`); n != 1 {
		t.Fatalf("done tasks = %d, want 1", n)
	}
	if n := len(fake.Requests()); n != 5 {
		t.Fatalf("%d model calls, want 5", n)
	}

	// (c) /tasks lists it (a command: no model call). The proxy's hand-off
	// is the message's, not the task's: the task spent the planner's call
	// and the executor's two.
	c.say("/tasks")
	list := textFrame(c, "the task list", func(s string) bool { return strings.HasPrefix(s, "Tasks (newest first):") })
	if !strings.Contains(list, "• Say hello — done; spent 3 model call(s)") || !strings.Contains(list, "1 tool call(s)") {
		t.Fatalf("/tasks:\n%s", list)
	}
	if n := len(fake.Requests()); n != 5 {
		t.Fatalf("%d model calls after /tasks, want 5", n)
	}
	s.stop()
	if strings.Contains(s.logs.String(), key) {
		t.Fatal("the API key appears in the log")
	}
}

// TestLLMTaskSurvivesKill kills `silas serve` with SIGKILL while a task's
// step card waits for its tap; the restarted server takes the tap, runs the
// step exactly once, asks the model nothing it already asked, and finishes
// the task.
func TestLLMTaskSurvivesKill(t *testing.T) {
	t.Parallel() // a server of its own on a database of its own
	const key = "sk-e2e-kill-key"
	fake := llmtest.New(t, key, "e2e-model")
	dsn := storetest.NewDatabase(t)
	data := t.TempDir()
	env := append(llmEnv(t, fake, key), shortLease) // the restart adopts what the killed one left once its row expires
	s := startServer(t, dsn, data, env...)
	c := s.connect(t)
	fake.Script(
		llmToolCall("plan_task", `{"goal":"write a marker"}`),
		llmPlan("Write a marker", "Write the marker file", data),
		llmToolCall("shell", `{"argv":["sh","-c","echo ran > ran"],"intent":"Write the marker file"}`),
	)
	c.say("write a marker")
	step := c.cardFor("sh -c 'echo ran > ran'", cards.StatusPending)
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	s.waitExit(t)
	if n := fake.Pending(); n != 0 {
		t.Fatalf("%d scripted replies unused before the kill", n)
	}
	// Only the executor's answer after the step is scripted: a model call
	// repeated by the restart would find nothing and fail the test.
	fake.Script(llmtest.Reply{Content: "STEP DONE: wrote the marker"})

	s2 := startServer(t, dsn, data, env...)
	c2 := s2.connect(t)
	done := approveCard(c2, step)
	if !strings.Contains(done.Outcome, "exit code 0 ✓") {
		t.Fatalf("after the restart: %+v", done)
	}
	textFrame(c2, "the summary", func(s string) bool { return strings.HasPrefix(s, "Done: Write a marker ✓") })
	runs, _ := filepath.Glob(filepath.Join(data, "sandbox", "exec-*", "ran"))
	if len(runs) != 1 {
		t.Fatalf("the step ran %d times, want exactly 1", len(runs))
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM audit_log WHERE kind = 'execution.started'`); n != 1 {
		t.Fatalf("execution.started = %d, want 1", n)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM task_calls`); n != 1 {
		t.Fatalf("task calls = %d, want 1", n)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM tasks WHERE state = 'done'`); n != 1 {
		t.Fatalf("done tasks = %d, want 1", n)
	}
	if n := len(fake.Requests()); n != 4 {
		t.Fatalf("%d model calls, want 4 (nothing asked twice)", n)
	}
}
