package render

import (
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

func TestStandingOffered(t *testing.T) {
	req := func(argv []string, risk cards.Risk, status core.ApprovalStatus, seq int64) core.ApprovalRequest {
		raw, err := core.Action{Tool: "shell", Argv: argv}.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		return core.ApprovalRequest{ID: "a1", ActionCanonical: raw, Risk: risk, Status: status, TurnSeq: seq, Intent: "x", Rationale: "y"}
	}
	ls := []string{"ls", "-l"}
	for _, tt := range []struct {
		name string
		a    core.ApprovalRequest
		ttl  time.Duration
		want bool
	}{
		{"low, pending", req(ls, cards.RiskLow, core.ApprovalPending, 1), time.Hour, true},
		{"off", req(ls, cards.RiskLow, core.ApprovalPending, 1), 0, false},
		{"a task's or an outside agent's call", req(ls, cards.RiskLow, core.ApprovalPending, 0), time.Hour, false},
		{"medium, pending", req(ls, cards.RiskMedium, core.ApprovalPending, 1), time.Hour, false},
		{"medium, confirming", req(ls, cards.RiskMedium, core.ApprovalConfirming, 1), time.Hour, true},
		{"high, confirming", req(ls, cards.RiskHigh, core.ApprovalConfirming, 1), time.Hour, false},
		{"irreversible", req(ls, cards.RiskIrreversible, core.ApprovalConfirming, 1), time.Hour, false},
		{"shell", req([]string{"sh", "-c", "ls"}, cards.RiskLow, core.ApprovalPending, 1), time.Hour, false},
		{"wrapper", req([]string{"nice", "ls"}, cards.RiskLow, core.ApprovalPending, 1), time.Hour, false},
		{"decided", req(ls, cards.RiskLow, core.ApprovalApproved, 1), time.Hour, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := OfferStanding(Approval(tt.a, nil, 0), tt.a, tt.ttl)
			got := false
			for _, ch := range c.Choices {
				got = got || ch.ID == StandingChoice
			}
			if got != tt.want || Standing(tt.a, tt.ttl) != tt.want {
				t.Fatalf("offered = %v, want %v (choices %+v)", got, tt.want, c.Choices)
			}
			if got && (c.Choices[len(c.Choices)-1].ID != "decline" || c.Validate() != nil) {
				t.Fatalf("choices %+v: %v", c.Choices, c.Validate())
			}
		})
	}
	if l := StandingLabel(time.Hour); l != "Allow this for 1 h" {
		t.Fatalf("label %q", l)
	}
	if l := StandingLabel(30 * time.Minute); l != "Allow this for 30 min" {
		t.Fatalf("label %q", l)
	}
}
