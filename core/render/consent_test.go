package render

import (
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/consent"
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

// The run's consent card states exactly what it covers, and is a valid
// card; the progress line and a refusal say the counts and the code in
// words.
func TestRunConsentOffer(t *testing.T) {
	g := consent.RunGrant{Run: "r-17", Flow: "nightly", FlowVersion: "3", Nodes: []string{"backup", "prune"}, Tool: "shell",
		Programs: []string{"restic"}, Secrets: []string{"restic_password"}, MaxRisk: cards.RiskMedium,
		Lanes: []string{consent.LaneNetwork}, MaxUses: 20, CostCap: 100}
	c := RunConsentOffer(g, time.Hour)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"r-17", "nightly", "version 3", "backup, prune", "restic", "medium", "network", "20 runs", "100 units", "1h0m0s", "restic_password", "single-use"} {
		if !strings.Contains(c.Intent+c.Details, want) {
			t.Errorf("card does not say %q:\n%s\n%s", want, c.Intent, c.Details)
		}
	}
	if c.Choices[0].ID != RunConsentChoice || c.Choices[0].Label != "Allow this for 1 h" {
		t.Fatalf("choices %+v", c.Choices)
	}
	cs := consent.Consent{ID: "abcdefgh1234", Scope: consent.ScopeRun, Run: "r-17", Flow: "nightly", FlowVersion: "3", Nodes: g.Nodes,
		Programs: g.Programs, Uses: 3, MaxUses: 20, Units: 7, CostCap: 100}
	if got, want := RunConsentLine("prune", cs), "prune ran under consent abcdefgh… (3/20 uses, 7/100 units)"; got != want {
		t.Fatalf("line %q, want %q", got, want)
	}
	if got := RunRefusalLine("prune", consent.CostCapped); !strings.Contains(got, "cost cap") || !strings.Contains(got, "cost_capped") {
		t.Fatalf("refusal %q", got)
	}
	if l := Consent(cs); !strings.Contains(l.Intent, "run r-17 of nightly v3") || !strings.Contains(l.Details, "backup, prune") || l.Validate() != nil {
		t.Fatalf("/consents card %+v", l)
	}
}
