// Package policy is the deterministic risk policy: per tool and argument
// pattern it decides allow / auth_required / blocked, a risk level and who
// may approve. It reads only the action, never the conversation or the
// agent's words.
package policy

import (
	"fmt"
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

// RiskAuto, as a rule's risk, lets the built-in ladder decide the risk from
// the program and its arguments (see classify and docs/policy.md). Such a
// rule must be auth_required.
const RiskAuto cards.Risk = "auto"

// Rule matches actions by tool and a regular expression over the command
// line (argv joined by single spaces, argv[0] reduced to its base name, so
// `/bin/rm -rf '/'` is matched as `rm -rf /`). The first matching rule wins.
// A blocked rule also matches the commands found inside the action (behind
// wrappers such as env or sudo, in sh -c scripts), so `env curl …` cannot
// slip past a rule that blocks curl.
type Rule struct {
	// Name is shown in audit entries and refusals.
	Name string `yaml:"name" json:"name"`
	// Tool the rule applies to ("shell"); "*" for any. Calls to other MCP
	// servers' tools are "mcp" (every one), "mcp:<server>/*" (every tool
	// of one server) or "mcp:<server>/<tool>" (one tool).
	Tool string `yaml:"tool" json:"tool"`
	// Match is a regular expression (RE2) searched in the command line;
	// empty matches everything.
	Match    string   `yaml:"match" json:"match,omitempty"`
	Decision Decision `yaml:"decision" json:"decision"`
	// Risk is low, medium, high, irreversible or auto (the built-in
	// ladder decides).
	Risk cards.Risk `yaml:"risk" json:"risk"`
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
	// Rule names what decided: a configured rule's name, "<rule>/<step>"
	// for the ladder (shell/read-only, shell/interpreter…) or
	// "blocklist/<check>" for the built-in blocklist.
	Rule   string
	Reason string
}

// Config is everything a Policy is built from.
type Config struct {
	// Rules are evaluated in order after the built-in blocklist; the
	// first match wins. Empty means DefaultRules.
	Rules []Rule
	// ProtectedPaths are absolute directories or files (Silas's data
	// directory, key files kept elsewhere, the config file) no action may
	// name: any argument, or path inside an argument or script, that is
	// one of them or lies inside one is blocked. While any is set, a
	// relative path that climbs out of the work directory with `..` and
	// /proc/<pid>/{root,cwd,fd} paths are blocked too. Checked lexically
	// (no symlinks followed); the sandbox is the boundary.
	ProtectedPaths []string
}

// Policy is the built-in blocklist, protected paths and an ordered rule
// list.
type Policy struct {
	rules     []Rule
	protected [][]string
}

// DefaultRules make every shell command need approval at the risk the
// built-in ladder gives it: low (one tap) only for known read-only programs
// with read-only arguments, medium for ordinary file changes in the work
// directory, high (owner) for everything else. A call to an MCP server's
// tool is high unless the owner marked its server trusted and its pinned
// definition is read-only (low). Any other tool is high.
// The built-in blocklist is evaluated before these (and before any
// configured rules) and cannot be overridden.
func DefaultRules() []Rule {
	return []Rule{
		{Name: "shell", Tool: "shell", Decision: AuthRequired, Risk: RiskAuto},
		{Name: "mcp", Tool: "mcp", Decision: AuthRequired, Risk: RiskAuto},
		{Name: "default", Tool: "*", Decision: AuthRequired, Risk: cards.RiskHigh},
	}
}

// New builds a policy from rules alone (no protected paths); see Build.
func New(rules []Rule) (*Policy, error) {
	return Build(Config{Rules: rules})
}

// Build compiles and validates a policy. Errors name the rule index and
// field.
func Build(cfg Config) (*Policy, error) {
	rules := cfg.Rules
	if len(rules) == 0 {
		rules = DefaultRules()
	}
	prot, err := compileProtected(cfg.ProtectedPaths)
	if err != nil {
		return nil, err
	}
	p := &Policy{rules: make([]Rule, len(rules)), protected: prot}
	for i, r := range rules {
		where := fmt.Sprintf("policy.rules[%d]", i)
		if r.Name != "" {
			where += " (" + r.Name + ")"
		}
		if r.Tool == "" {
			return nil, fmt.Errorf("%s.tool: required (use \"*\" for any tool)", where)
		}
		if rest, ok := strings.CutPrefix(r.Tool, "mcp:"); ok {
			server, tool, found := strings.Cut(rest, "/")
			if !found || server == "" || tool == "" || strings.Contains(tool, "/") {
				return nil, fmt.Errorf("%s.tool: %q must be mcp:<server>/<tool> or mcp:<server>/*", where, r.Tool)
			}
		}
		switch r.Decision {
		case Allow, AuthRequired, Blocked:
		default:
			return nil, fmt.Errorf("%s.decision: %q is not allow, auth_required or blocked", where, r.Decision)
		}
		if r.Risk == RiskAuto {
			if r.Decision != AuthRequired {
				return nil, fmt.Errorf("%s.risk: auto needs decision auth_required (the ladder's high risk must never be allowed without a person)", where)
			}
		} else if !r.Risk.Valid() {
			return nil, fmt.Errorf("%s.risk: %q is not low, medium, high, irreversible or auto", where, r.Risk)
		} else if r.Risk == cards.RiskIrreversible && r.Decision == Allow {
			return nil, fmt.Errorf("%s.risk: irreversible needs decision auth_required (it runs only after a passkey step-up, docs/passkeys.md)", where)
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
	if a.Tool == core.ToolMCP {
		// "<server>/<tool> <arguments as canonical JSON>".
		return strings.TrimPrefix(a.CommandLine(), "mcp:")
	}
	return argvLine(a.Argv)
}

// toolMatches reports whether a rule's tool names the action's tool.
func toolMatches(rule string, a core.Action) bool {
	if rule == "*" || rule == a.Tool {
		return true
	}
	if a.Tool != core.ToolMCP || !strings.HasPrefix(rule, "mcp:") {
		return false
	}
	return rule == a.MCPTool() || rule == "mcp:"+a.Server+"/*"
}

func argvLine(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	parts := append([]string{base(argv[0])}, argv[1:]...)
	return strings.Join(parts, " ")
}

// Evaluate decides one action: first the built-in blocklist and protected
// paths over every command the action may run, then the first matching
// rule. An action no rule matches is blocked: the policy fails closed.
func (p *Policy) Evaluate(a core.Action) Result {
	var an *analysis
	if len(a.Argv) > 0 {
		an = analyze(a.Argv)
		if res, blocked := p.blocked(an); blocked {
			return res
		}
	}
	line := MatchLine(a)
	for _, r := range p.rules {
		if !toolMatches(r.Tool, a) {
			continue
		}
		if r.re != nil && !r.matches(line, an) {
			continue
		}
		res := Result{Decision: r.Decision, Risk: r.Risk, Approvers: r.Approvers, Rule: r.Name, Reason: r.Reason}
		if r.Risk == RiskAuto && a.Tool == core.ToolMCP {
			// An MCP tool's annotations are hints from its server: without
			// them it counts as destructive and open-world. Only a read-only
			// hint of a server the owner marked trusted (ReadOnlyHint, set
			// from the pinned definition and checked again before the call)
			// lowers it.
			res.Risk, res.Rule = cards.RiskHigh, "mcp/unannotated"
			if a.ReadOnlyHint {
				res.Risk, res.Rule = cards.RiskLow, "mcp/read-only-trusted"
			}
			if r.Name != "" {
				res.Rule = r.Name + "/" + strings.TrimPrefix(res.Rule, "mcp/")
			}
		} else if r.Risk == RiskAuto {
			risk, step := classify(a.Argv, 0)
			res.Risk = risk
			res.Rule = step
			if r.Name != "" {
				res.Rule = r.Name + "/" + step
			}
		}
		// Network access or a secret raises the risk of anything below
		// medium: the approver confirms on the same card.
		if (a.Network || len(a.Secrets) > 0) && res.Risk.Rank() < cards.RiskMedium.Rank() {
			res.Risk = cards.RiskMedium
		}
		return res
	}
	return Result{Decision: Blocked, Risk: cards.RiskHigh, Rule: "", Reason: "no policy rule matches this action"}
}

// matches applies the rule's pattern to the command line and, for blocked
// rules, to every command found inside it. Other rules see only the line as
// written: an allow rule for `echo` must not match `sh -c 'echo; rm …'`.
func (r Rule) matches(line string, an *analysis) bool {
	if r.re.MatchString(line) {
		return true
	}
	if r.Decision != Blocked || an == nil {
		return false
	}
	for _, v := range an.views {
		if r.re.MatchString(argvLine(v)) {
			return true
		}
	}
	return false
}
