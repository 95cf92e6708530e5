package render_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/verify"
)

// TestApprovalOfIsApproval: the executor renders its cards from the action
// its gate decoded (render.ApprovalOf) instead of decoding the row's again;
// the card is the one render.Approval makes from the row, for every kind of
// action and every state an execution passes through.
func TestApprovalOfIsApproval(t *testing.T) {
	t.Parallel()
	zero := 0
	acts := []core.Action{
		{Tool: "shell", Argv: []string{"echo", "x"}},
		{Tool: "shell", Argv: []string{"rm\u200b", "-rf", "a b", ""}, Network: true, TimeoutSeconds: 5, Secrets: []string{"TOKEN", "KEY"},
			Verify: []verify.Check{{Name: "exit", Expect: verify.Expect{ExitCode: &zero}}, {Run: []string{"test", "-f", "x"}}}},
		{Tool: core.ToolMCP, Server: "files", Name: "write", Arguments: json.RawMessage(`{"path":"/x"}`), DefinitionHash: "h", ReadOnlyHint: true},
	}
	exs := []*core.Execution{
		nil,
		{Status: core.ExecQueued},
		{Status: core.ExecRunning},
		{Status: core.ExecVerified, Reason: "ran 3 ms; verified: 1/1", Result: &core.ExecRecord{Stdout: "x\n", DurationMS: 3}},
		{Status: core.ExecFailed, Reason: "not verified", Result: &core.ExecRecord{Stdout: "a long output\n", Stderr: "err", ExitCode: 1, OutputRef: "out-a1"}},
		{Status: core.ExecRefused, Reason: "no"},
		{Status: core.ExecInterrupted, Reason: "interrupted by restart"},
	}
	for i, act := range acts {
		canonical, err := act.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		var decoded core.Action
		if err := json.Unmarshal(canonical, &decoded); err != nil {
			t.Fatal(err)
		}
		for _, st := range []core.ApprovalStatus{core.ApprovalApproved, core.ApprovalPending, core.ApprovalDeclined} {
			a := core.ApprovalRequest{ID: "a1", ActionCanonical: canonical, Intent: "Run it", Rationale: "why", Risk: cards.RiskMedium,
				Status: st, DecidedBy: "test:me", ExpiresAt: time.Unix(1700000000, 0), Preview: "it changes x"}
			for j, ex := range exs {
				want := render.Approval(a, ex, 5)
				if got := render.ApprovalOf(a, decoded, ex, 5); !reflect.DeepEqual(got, want) {
					t.Errorf("action %d, %s, execution %d: ApprovalOf = %+v\nApproval = %+v", i, st, j, got, want)
				}
			}
		}
	}
}
