package policy

import (
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

func TestDefaults(t *testing.T) {
	p, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		argv []string
		want Decision
		risk cards.Risk
	}{
		{"uname", []string{"uname", "-a"}, AuthRequired, cards.RiskLow},
		{"echo", []string{"echo", "hi"}, AuthRequired, cards.RiskLow},
		{"touch is medium", []string{"touch", "x"}, AuthRequired, cards.RiskMedium},
		{"rm -rf /", []string{"rm", "-rf", "/"}, Blocked, cards.RiskIrreversible},
		{"rm -fr / with path", []string{"/bin/rm", "-fr", "/"}, Blocked, cards.RiskIrreversible},
		{"rm -r -f /", []string{"rm", "-r", "-f", "/"}, Blocked, cards.RiskIrreversible},
		{"rm --no-preserve-root", []string{"rm", "-r", "--no-preserve-root", "/"}, Blocked, cards.RiskIrreversible},
		{"rm in workdir", []string{"rm", "-rf", "build"}, AuthRequired, cards.RiskMedium},
		{"mkfs", []string{"mkfs.ext4", "/dev/sda1"}, Blocked, cards.RiskIrreversible},
		{"dd to device", []string{"dd", "if=/dev/zero", "of=/dev/sda"}, Blocked, cards.RiskIrreversible},
		{"dd to file", []string{"dd", "if=/dev/zero", "of=out.img", "count=1"}, AuthRequired, cards.RiskMedium},
		{"reboot", []string{"reboot"}, Blocked, cards.RiskHigh},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := p.Evaluate(core.Action{Tool: "shell", Argv: tt.argv})
			if r.Decision != tt.want || r.Risk != tt.risk {
				t.Fatalf("Evaluate(%q) = %s/%s (rule %s), want %s/%s", tt.argv, r.Decision, r.Risk, r.Rule, tt.want, tt.risk)
			}
		})
	}
	if r := p.Evaluate(core.Action{Tool: "shell", Argv: []string{"echo"}, Network: true}); r.Risk != cards.RiskMedium {
		t.Fatalf("network echo risk = %s, want medium", r.Risk)
	}
}

func TestNewErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name  string
		rules []Rule
		want  string
	}{
		{"bad decision", []Rule{{Tool: "shell", Decision: "maybe", Risk: cards.RiskLow}}, "policy.rules[0].decision"},
		{"bad risk", []Rule{{Tool: "shell", Decision: Allow, Risk: "huge"}}, "policy.rules[0].risk"},
		{"bad regex", []Rule{{Tool: "shell", Decision: Allow, Risk: cards.RiskLow, Match: "("}}, "policy.rules[0].match"},
		{"no tool", []Rule{{Decision: Allow, Risk: cards.RiskLow}}, "policy.rules[0].tool"},
		{"bad approver", []Rule{{Tool: "shell", Decision: Allow, Risk: cards.RiskLow, Approvers: []string{"bob"}}}, "policy.rules[0].approvers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.rules)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want error naming %s", err, tt.want)
			}
		})
	}
}

func TestNoRuleBlocks(t *testing.T) {
	p, _ := New([]Rule{{Tool: "shell", Match: "^echo", Decision: Allow, Risk: cards.RiskLow}})
	if r := p.Evaluate(core.Action{Tool: "shell", Argv: []string{"ls"}}); r.Decision != Blocked {
		t.Fatalf("unmatched action = %s, want blocked", r.Decision)
	}
}
