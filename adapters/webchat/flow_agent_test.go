package webchat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/adapters/channeltest"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowrun"
	coregateway "github.com/silas-gateway/silas/core/gateway"
)

// An agent.run node as a person in the web chat lives it: /flow run → the
// node starts a task of the task runtime (the scripted model plans, then
// calls a tool) → the tool call is an ordinary approval card → tap → the
// step runs and is verified → the plan's check → the node succeeds with
// the task's summary as its output → a later node reads it (its command
// is rendered from it, and is itself approved on a card).
const agentFlow = `name: investigate
version: "1"
description: ask the agent, then act on its result
nodes:
  - id: look
    type: agent.run
    config:
      goal: "check that the root directory is there"
      tools: [shell]
      max_steps: 3
  - id: after
    type: action.shell
    config:
      command: "echo ${{ nodes.look.result.startsWith('Done: Check the root') }}"
edges:
  - {from: look, to: after}
`

func TestFlowAgentRunThroughTheWebChat(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "investigate.yaml"), []byte(agentFlow), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newLLMWeb(t, task.Limits{}, func(c *coregateway.Config) {
		c.Flows = &flowrun.Config{Catalog: flowrun.Dirs{Sources: []flow.Source{{Label: dir, FS: os.DirFS(dir)}}, Options: flow.Options{Model: true}},
			Options: flow.Options{Model: true}, MaxParallel: 4}
	})
	web := h.web
	h.fake.Script(
		llmtest.Reply{Content: "---\ntitle: Check the root\nsteps:\n  - List the root directory\nverify:\n  - name: root is a directory\n" +
			"    run: [test, -d, /]\n    expect: { exit_code: 0 }\n---\n# Context\nA test plan."},
		llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "shell", Arguments: `{"argv":["echo","root listed"],"intent":"List the root"}`}}},
		llmtest.Reply{Content: "STEP DONE: listed the root"},
	)
	web.Say(t, channeltest.Approver, "/flow run investigate")
	progress := waitShown(t, web, "the progress card", func(s *shown) bool {
		return s.card != nil && strings.HasPrefix(s.card.Intent, "Flow investigate v1 — run ")
	})
	// The agent's tool call is an ordinary approval card: nothing runs
	// before the tap.
	step := pendingStep(t, web, "echo 'root listed'")
	if n := h.count(t, `SELECT count(*) FROM executions`); n != 0 {
		t.Fatalf("%d executions before the tap", n)
	}
	if n := h.count(t, `SELECT count(*) FROM tasks WHERE flow_step = 'look/0/1' AND flow_run IS NOT NULL`); n != 1 {
		t.Fatalf("%d tasks for the node's step, want 1", n)
	}
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: step.ID}, "approve")
	// The later node's command is rendered from the agent's result and
	// asks for its own tap.
	after := pendingStep(t, web, "echo true")
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: after.ID}, "approve")
	sum := waitShown(t, web, "the flow's summary", func(s *shown) bool { return strings.HasPrefix(s.text, "Flow investigate (run ") })
	if !strings.Contains(sum.text, "succeeded.") {
		t.Fatalf("summary = %q", sum.text)
	}
	final := waitShown(t, web, "the progress card's final state", func(s *shown) bool {
		return s.card != nil && s.card.ID == progress.card.ID && s.card.Status == cards.StatusDone
	})
	for _, want := range []string{"✓ look", "✓ after"} {
		if !strings.Contains(final.card.Details, want) {
			t.Fatalf("progress card lacks %q:\n%s", want, final.card.Details)
		}
	}
	if n := h.count(t, `SELECT count(*) FROM executions WHERE status = 'verified'`); n != 2 {
		t.Fatalf("%d verified executions, want 2 (the agent's and the later node's)", n)
	}
	if n := h.count(t, `SELECT count(*) FROM flow_attempts WHERE node = 'look' AND status = 'succeeded' AND output->>'result' LIKE 'Done: Check the root%'`); n != 1 {
		t.Fatalf("the agent node's output lacks the task's summary (%d rows)", n)
	}
	if got := len(h.fake.Requests()); got != 3 {
		t.Fatalf("%d model calls, want 3 (plan, tool call, step done)", got)
	}
}
