package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

func TestMCPRules(t *testing.T) {
	call := func(server, name string, readOnly bool) core.Action {
		return core.Action{Tool: core.ToolMCP, Server: server, Name: name, Arguments: json.RawMessage(`{"path":"x"}`),
			DefinitionHash: "ab", ReadOnlyHint: readOnly}
	}
	custom := []Rule{
		{Name: "no-delete", Tool: "mcp:files/delete", Decision: Blocked, Risk: cards.RiskHigh, Reason: "never"},
		{Name: "files-read", Tool: "mcp:files/*", Match: `^files/read `, Decision: AuthRequired, Risk: cards.RiskMedium},
		{Name: "shell", Tool: "shell", Decision: AuthRequired, Risk: RiskAuto},
	}
	tests := []struct {
		name     string
		rules    []Rule
		act      core.Action
		decision Decision
		risk     cards.Risk
		rule     string
	}{
		{"unannotated, default rules: high", nil, call("files", "delete", false), AuthRequired, cards.RiskHigh, "mcp/unannotated"},
		{"read-only of a trusted server: low", nil, call("files", "read", true), AuthRequired, cards.RiskLow, "mcp/read-only-trusted"},
		{"a rule naming the tool", custom, call("files", "delete", false), Blocked, cards.RiskHigh, "no-delete"},
		{"a rule naming the server's tools, matching the line", custom, call("files", "read", false), AuthRequired, cards.RiskMedium, "files-read"},
		{"another server: no rule, blocked", custom, call("web", "read", false), Blocked, cards.RiskHigh, ""},
		{"shell rules do not match an MCP call", []Rule{{Name: "shell", Tool: "shell", Decision: Allow, Risk: cards.RiskLow}}, call("files", "read", true), Blocked, cards.RiskHigh, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.rules)
			if err != nil {
				t.Fatal(err)
			}
			res := p.Evaluate(tt.act)
			if res.Decision != tt.decision || res.Risk != tt.risk || res.Rule != tt.rule {
				t.Fatalf("got %s/%s by %q, want %s/%s by %q", res.Decision, res.Risk, res.Rule, tt.decision, tt.risk, tt.rule)
			}
		})
	}
}

func TestMCPRuleToolValidated(t *testing.T) {
	for _, tool := range []string{"mcp:files", "mcp:/x", "mcp:files/", "mcp:files/a/b"} {
		_, err := New([]Rule{{Name: "r", Tool: tool, Decision: AuthRequired, Risk: cards.RiskHigh}})
		if err == nil || !strings.Contains(err.Error(), "policy.rules[0] (r).tool") {
			t.Errorf("tool %q: %v", tool, err)
		}
	}
}
