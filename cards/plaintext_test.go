package cards

import (
	"strings"
	"testing"
)

func TestPlainText(t *testing.T) {
	open := Card{ID: "abc", Kind: KindApproval, Intent: "Run uname", Risk: RiskHigh, Rationale: "You asked.",
		Command: "uname -a", Details: "shown for high risk", Status: StatusPending,
		Choices: []Choice{{ID: "approve", Label: "Run `uname -a`"}, {ID: "decline", Label: "Decline"}}}
	closed := open
	closed.Status, closed.Outcome = StatusDeclined, "Declined by telegram:1."
	low := open
	low.Risk = RiskLow
	tests := []struct {
		name     string
		card     Card
		want     []string
		wantNone []string
	}{
		{"open card numbers its choices and names the replies", open,
			[]string{"Run uname\n", "Risk: high", "Command: uname -a", "shown for high risk",
				"1. Run `uname -a` — reply \"approve abc\"", "2. Decline — reply \"decline abc\""}, nil},
		{"details collapsed for low risk", low, []string{"1. Run"}, []string{"shown for high risk"}},
		{"closed card offers nothing", closed, []string{"Result: Declined by telegram:1.", "Status: declined"},
			[]string{"reply", "1. "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.card.PlainText()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("PlainText lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.wantNone {
				if strings.Contains(got, w) {
					t.Errorf("PlainText has %q:\n%s", w, got)
				}
			}
		})
	}
}
