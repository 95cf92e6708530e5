package render

import (
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

func TestClip(t *testing.T) {
	tests := []struct {
		name, in string
		n        int
		want     string
	}{
		{"short", "abc", 5, "abc"},
		{"exact", "abcde", 5, "abcde"},
		{"cut", "abcdef", 5, "abcd…"},
		{"runes, not bytes", "ééééé€", 5, "éééé…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Clip(tt.in, tt.n); got != tt.want {
				t.Fatalf("Clip(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
			}
		})
	}
}

func TestDescribeFoldsAnApprovalsSteps(t *testing.T) {
	at := time.Date(2026, 1, 2, 12, 4, 0, 0, time.Local)
	row := func(kind audit.Kind, actor string, data map[string]any) audit.Row {
		return audit.Row{At: at, Entry: audit.Entry{Kind: kind, Actor: actor, Data: data}}
	}
	rows := []audit.Row{
		row(audit.KindApprovalRequested, "test:me", map[string]any{"approval": "A", "command": "uname -a", "risk": "low"}),
		row(audit.KindApprovalApproved, "test:me", map[string]any{"approval": "A", "by": "test:me"}),
		row(audit.KindExecutionFinished, "silas", map[string]any{"approval": "A", "duration_ms": 38, "exit_code": 0}),
		row(audit.KindVerificationPassed, "silas", map[string]any{"approval": "A", "summary": "exit code 0 ✓"}),
		row(audit.KindExecutionRefused, "silas", map[string]any{"approval": "B", "reason": "altered"}),
		row("something.new", "silas", nil),
	}
	cmdOf := func(id string) string {
		if id == "A" {
			return "uname -a"
		}
		return ""
	}
	got := Describe(rows, "test:me", cmdOf)
	want := []string{
		"12:04 you asked to run `uname -a` (low risk)",
		"12:04 you approved `uname -a`; ran 38 ms, exit 0; verified: exit code 0 ✓",
		"12:04 card B refused at execution: altered",
		"12:04 something.new",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Describe =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Every kind /audit asks the store for has words of its own.
	for _, k := range HumanKinds {
		if line := Describe([]audit.Row{row(k, "x", map[string]any{"approval": "A"})}, "", cmdOf); strings.HasSuffix(line[0], " "+string(k)) {
			t.Errorf("kind %s has no description", k)
		}
	}
}

func TestAccessCard(t *testing.T) {
	r := core.AccessRequest{ID: "R", Identity: "telegram:7", Name: "Eve\u202e", Code: "ABC234", Status: core.AccessPending}
	tests := []struct {
		name    string
		status  core.AccessStatus
		want    cards.Status
		choices int
	}{
		{"pending", core.AccessPending, cards.StatusPending, 2},
		{"allowed", core.AccessAllowed, cards.StatusApproved, 0},
		{"denied", core.AccessDenied, cards.StatusDeclined, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.Status = tt.status
			c := Access(r)
			if c.Status != tt.want || len(c.Choices) != tt.choices {
				t.Fatalf("card = %+v", c)
			}
			if strings.ContainsRune(c.Intent, '\u202e') {
				t.Fatalf("a bidi control in a stranger's name is obeyed: %q", c.Intent)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestQuestionCard(t *testing.T) {
	base := TaskQuestion{Card: "ask-1", Label: "Step 1 of 2 — Clean", Question: "Keep how\nmany days?", Requester: "test:me",
		Choices: []string{"7", "30", "90", "180", "365", "forever"}}
	tests := []struct {
		name    string
		change  func(*TaskQuestion)
		status  cards.Status
		choices int
		outcome string
	}{
		{"open with choices (at most the card's five)", func(*TaskQuestion) {}, cards.StatusPending, 5, ""},
		{"free text", func(q *TaskQuestion) { q.Choices = nil }, cards.StatusPending, 0, ""},
		{"answered", func(q *TaskQuestion) { q.Answer, q.By = "30\u202e", "test:me" }, cards.StatusDone, 0, "Answered by test:me: 30"},
		{"cancelled", func(q *TaskQuestion) { q.Cancelled = "Cancelled: its task was stopped." }, cards.StatusDeclined, 0, "Cancelled: its task was stopped."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := base
			tt.change(&q)
			c := QuestionCard(q)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if c.Status != tt.status || len(c.Choices) != tt.choices || !strings.HasPrefix(c.Outcome, tt.outcome) {
				t.Fatalf("card = %+v", c)
			}
			if c.Intent != "Question: Keep how many days?" || !strings.Contains(c.Rationale, "Step 1 of 2 — Clean") {
				t.Fatalf("card = %+v", c)
			}
			for i, ch := range c.Choices {
				if ch.ID != QuestionChoice(i) || ch.Label != q.Choices[i] {
					t.Fatalf("choice %d = %+v", i, ch)
				}
			}
			if strings.ContainsRune(c.Outcome, '\u202e') {
				t.Fatalf("bidi control shown raw: %q", c.Outcome)
			}
		})
	}
}
