// Package policy is the deterministic risk policy: per tool and argument
// pattern it decides allow / auth_required / blocked, a risk level and who
// may approve. It reads only the action, never the conversation or the
// agent's words.
package policy

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// Decision is what policy says about one action.
type Decision string

const (
	Allow        Decision = "allow"
	AuthRequired Decision = "auth_required"
	Blocked      Decision = "blocked"
)

// Rule matches actions by tool and a regular expression over the command
// line (argv joined by single spaces, argv[0] reduced to its base name, so
// `/bin/rm -rf '/'` is matched as `rm -rf /`). The first matching rule wins.
type Rule struct {
	// Name is shown in audit entries and refusals.
	Name string `yaml:"name" json:"name"`
	// Tool the rule applies to ("shell"); "*" for any.
	Tool string `yaml:"tool" json:"tool"`
	// Match is a regular expression (RE2) searched in the command line;
	// empty matches everything.
	Match    string     `yaml:"match" json:"match,omitempty"`
	Decision Decision   `yaml:"decision" json:"decision"`
	Risk     cards.Risk `yaml:"risk" json:"risk"`
	// Approvers lists identities ("telegram:123") and roles ("role:owner",
	// "role:auth"); empty means role:owner.
	Approvers []string `yaml:"approvers" json:"approvers,omitempty"`
	// Reason is shown when the rule blocks an action.
	Reason string `yaml:"reason" json:"reason,omitempty"`

	re *regexp.Regexp
}

// Result is a decision with its context.
type Result struct {
	Decision  Decision
	Risk      cards.Risk
	Approvers []string
	Rule      string
	Reason    string
}

// Policy is an ordered rule list.
type Policy struct {
	rules []Rule
}

// DefaultRules block obviously destructive commands and require approval for
// every other shell command. Low-risk read-only commands are one tap;
// everything else takes a confirm tap too.
func DefaultRules() []Rule {
	return []Rule{
		{Name: "rm-root", Tool: "shell", Match: `^rm( .*)? -[a-zA-Z]*[rR][a-zA-Z]*( .*)? (/|/\*|~|\$HOME)( |$)|^rm( .*)? --recursive( .*)? (/|/\*)( |$)|--no-preserve-root`, Decision: Blocked, Risk: cards.RiskIrreversible, Reason: "recursive delete of the root or home directory"},
		{Name: "mkfs", Tool: "shell", Match: `^(mkfs(\.[a-z0-9]+)?|mke2fs|mkswap|wipefs)( |$)`, Decision: Blocked, Risk: cards.RiskIrreversible, Reason: "formats a filesystem"},
		{Name: "dd-device", Tool: "shell", Match: `^dd( .*)? of=/dev/`, Decision: Blocked, Risk: cards.RiskIrreversible, Reason: "writes raw data to a device"},
		{Name: "power", Tool: "shell", Match: `^(shutdown|reboot|halt|poweroff|init [06])( |$)`, Decision: Blocked, Risk: cards.RiskHigh, Reason: "stops the host"},
		{Name: "fork-bomb", Tool: "shell", Match: `:\(\)\s*\{`, Decision: Blocked, Risk: cards.RiskHigh, Reason: "fork bomb"},
		{Name: "chmod-root", Tool: "shell", Match: `^(chmod|chown)( .*)? -[a-zA-Z]*R[a-zA-Z]*( .*)? /( |$)`, Decision: Blocked, Risk: cards.RiskIrreversible, Reason: "recursive permission change of the root directory"},
		{Name: "read-only", Tool: "shell", Match: `^(uname|echo|date|whoami|id|uptime|hostname|pwd|ls|cat|head|tail|wc|df|du|free|env|printenv|true|false|sleep|seq|sort|grep)( |$)`, Decision: AuthRequired, Risk: cards.RiskLow},
		{Name: "shell", Tool: "shell", Decision: AuthRequired, Risk: cards.RiskMedium},
		{Name: "default", Tool: "*", Decision: AuthRequired, Risk: cards.RiskHigh},
	}
}

// New compiles and validates rules. Errors name the rule index and field.
func New(rules []Rule) (*Policy, error) {
	if len(rules) == 0 {
		rules = DefaultRules()
	}
	p := &Policy{rules: make([]Rule, len(rules))}
	for i, r := range rules {
		where := fmt.Sprintf("policy.rules[%d]", i)
		if r.Name != "" {
			where += " (" + r.Name + ")"
		}
		if r.Tool == "" {
			return nil, fmt.Errorf("%s.tool: required (use \"*\" for any tool)", where)
		}
		switch r.Decision {
		case Allow, AuthRequired, Blocked:
		default:
			return nil, fmt.Errorf("%s.decision: %q is not allow, auth_required or blocked", where, r.Decision)
		}
		if !r.Risk.Valid() {
			return nil, fmt.Errorf("%s.risk: %q is not low, medium, high or irreversible", where, r.Risk)
		}
		if r.Match != "" {
			re, err := regexp.Compile(r.Match)
			if err != nil {
				return nil, fmt.Errorf("%s.match: %w", where, err)
			}
			r.re = re
		}
		for _, a := range r.Approvers {
			if !strings.Contains(a, ":") {
				return nil, fmt.Errorf("%s.approvers: %q must be an identity (platform:id) or a role (role:owner, role:auth)", where, a)
			}
		}
		if len(r.Approvers) == 0 {
			r.Approvers = []string{"role:owner"}
		}
		p.rules[i] = r
	}
	return p, nil
}

// MatchLine is the string rules match against.
func MatchLine(a core.Action) string {
	if len(a.Argv) == 0 {
		return ""
	}
	parts := append([]string{filepath.Base(a.Argv[0])}, a.Argv[1:]...)
	return strings.Join(parts, " ")
}

// Evaluate decides one action. An action no rule matches is blocked: the
// policy fails closed.
func (p *Policy) Evaluate(a core.Action) Result {
	line := MatchLine(a)
	for _, r := range p.rules {
		if r.Tool != "*" && r.Tool != a.Tool {
			continue
		}
		if r.re != nil && !r.re.MatchString(line) {
			continue
		}
		res := Result{Decision: r.Decision, Risk: r.Risk, Approvers: r.Approvers, Rule: r.Name, Reason: r.Reason}
		// Network access or a secret raises the risk of anything below
		// medium: the approver confirms on the same card.
		if (a.Network || len(a.Secrets) > 0) && res.Risk.Rank() < cards.RiskMedium.Rank() {
			res.Risk = cards.RiskMedium
		}
		return res
	}
	return Result{Decision: Blocked, Risk: cards.RiskHigh, Rule: "", Reason: "no policy rule matches this action"}
}
