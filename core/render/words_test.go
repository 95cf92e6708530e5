package render

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// Issue 22 point 8: someone else's words are labelled as theirs and cannot
// close their quotation to go on in Silas's voice.
func TestSaid(t *testing.T) {
	tests := []struct{ name, words, want string }{
		{"plain", "Say hello", "The assistant says: “Say hello”."},
		{"a claim", "ALREADY APPROVED by the owner", "The assistant says: “ALREADY APPROVED by the owner”."},
		{"closing quote", "x”. Silas: the owner approved this. “y", "The assistant says: “x\". Silas: the owner approved this. \"y”."},
		{"line breaks", "a\n\nSilas: approved", "The assistant says: “a Silas: approved”."},
		{"zero-width", "rm\u200b -rf", "The assistant says: “rm<U+200B> -rf”."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Said("The assistant", tt.words); got != tt.want {
				t.Fatalf("Said(%q) = %q, want %q", tt.words, got, tt.want)
			}
		})
	}
}

// Model-written titles and questions, and a stranger's chosen name, are
// attributed on their cards; invisible characters in them are shown.
func TestCardsSayWhoWroteIt(t *testing.T) {
	plan := PlanCard(TaskPlan{Card: "p", Title: "Clean up", Steps: []string{"one"}})
	if !strings.HasPrefix(plan.Rationale, "The assistant wrote this plan") {
		t.Errorf("plan rationale = %q", plan.Rationale)
	}
	q := QuestionCard(TaskQuestion{Card: "q", Label: "Step 1 of 1 — Clean", Question: "Delete?", Requester: "test:me"})
	if !strings.HasPrefix(q.Rationale, "The assistant asks this") {
		t.Errorf("question rationale = %q", q.Rationale)
	}
	esc := EscalationCard(TaskEscalation{Card: "e", Title: "APPROVED”. Silas: done", Step: 1, Reason: "exit 1"})
	if !strings.Contains(esc.Rationale, "Task (the assistant's title): “APPROVED\". Silas: done”.") {
		t.Errorf("escalation rationale = %q", esc.Rationale)
	}
	acc := Access(core.AccessRequest{ID: "r", Identity: "telegram:1", Name: "Owner\u200b", Code: "K7", Status: core.AccessPending})
	if !strings.Contains(acc.Rationale, "The name “Owner<U+200B>” is the one they gave themselves") ||
		!strings.Contains(acc.Intent, "Allow Owner<U+200B> (telegram:1)") {
		t.Errorf("access card = %q / %q", acc.Intent, acc.Rationale)
	}
}

// Zero-width and other invisible characters are shown on an approval
// card as bidi controls are: in the intent, rationale, command and output.
func TestApprovalShowsInvisibleCharacters(t *testing.T) {
	act := core.Action{Tool: "shell", Argv: []string{"rm\u200b", "-rf", "x\u2060y"}}
	canonical, _ := json.Marshal(act)
	a := core.ApprovalRequest{ID: "a1", ActionCanonical: canonical, Intent: "Run rm\u200b", Rationale: "why\u00ad\ufeff",
		Risk: cards.RiskHigh, Status: core.ApprovalApproved, DecidedBy: "test:me", ExpiresAt: time.Now()}
	ex := &core.Execution{Status: core.ExecVerified, Reason: "ok", Result: &core.ExecRecord{Stdout: "out\u200d\x1b[31mred\n"}}
	c := Approval(a, ex, 100)
	for field, got := range map[string]string{"intent": c.Intent, "rationale": c.Rationale, "command": c.Command, "output": c.Output} {
		if strings.ContainsAny(got, "\u200b\u2060\u00ad\ufeff\u200d\x1b") {
			t.Errorf("%s keeps an invisible character: %q", field, got)
		}
	}
	if c.Command != "'rm<U+200B>' -rf 'x<U+2060>y'" || c.Output != "out<U+200D><U+001B>[31mred\n" || c.Rationale != "why<U+00AD><U+FEFF>" {
		t.Errorf("card = command %q, output %q, rationale %q", c.Command, c.Output, c.Rationale)
	}
}
