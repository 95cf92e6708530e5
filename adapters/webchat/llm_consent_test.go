package webchat

import (
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/channeltest"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/consent"
	coregateway "github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/render"
)

// The owner's standing approval ("Allow this for 1 h" on a /run card)
// covers the LLM agent's identical tool call inside a task: the step runs
// with a line instead of a card, under its own token, the use counted.
func TestLLMTaskStepUnderStandingApproval(t *testing.T) {
	t.Parallel()
	h := newLLMWeb(t, task.Limits{}, func(c *coregateway.Config) {
		c.Consents = consent.Limits{TTL: time.Hour, MaxTTL: 24 * time.Hour, MaxUses: 5}
	})
	web := h.web
	web.Say(t, channeltest.Approver, "/run echo listed")
	first := pendingStep(t, web, "echo listed")
	web.Tap(t, channeltest.Approver, channeltest.Message{Card: first.ID}, render.StandingChoice)
	waitShown(t, web, "the /run card done", func(s *shown) bool { return s.card != nil && s.card.ID == first.ID && s.card.Status == "done" })

	h.fake.Script(
		planTask("list it"),
		planOf("title: List it\nsteps:\n  - List it\nverify:\n  - name: root is a directory\n    run: [test, -d, /]\n    expect: { exit_code: 0 }\n"),
		shell(`["echo","listed"]`),
		llmtest.Reply{Content: "STEP DONE: listed"},
	)
	web.Say(t, channeltest.Approver, "list it")
	waitShown(t, web, "the standing line", func(s *shown) bool {
		return s.card == nil && strings.Contains(s.text, "under your standing approval") && strings.Contains(s.text, "(1/5 uses")
	})
	waitShown(t, web, "the summary", func(s *shown) bool { return s.card == nil && strings.HasPrefix(s.text, "Done: List it ✓") })
	if n := h.count(t, `SELECT count(*) FROM approvals WHERE task_id IS NOT NULL AND decided_by LIKE 'consent:%'`); n != 1 {
		t.Fatalf("task steps approved under the consent = %d, want 1", n)
	}
	if n := h.count(t, `SELECT uses FROM consents`); n != 1 {
		t.Fatalf("uses = %d, want 1", n)
	}
}
