// Package plan parses the planner's plans: markdown with YAML front matter
// (seed 003 §7.2) — a title, numbered steps, verify checks that are
// core/verify checks, a budget, and what to do when stuck — followed by the
// prose briefing the executor reads.
//
// The parser is strict because its input is model output: unknown keys,
// a second YAML document, a shell string where an argv is expected, a check
// with no expectation or an oversized plan are errors naming the field, so
// the runtime can send the model one repair round-trip and otherwise
// escalate. A plan never decides anything by itself: its verify commands
// run in the verification sandbox only after the risk policy has looked at
// them (Plan.VerifyCommands), and its budget can only lower the configured
// limits, never raise them (task.Limits).
package plan

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/silas-gateway/silas/core/verify"
)

// Limits of a plan.
const (
	MaxBytes     = 64 << 10
	MaxTitle     = 120
	MaxSteps     = 20
	MaxStepLen   = 300
	MaxChecks    = 10
	MaxIDLen     = 100
	maxBudgetInt = 1 << 40
)

// OnStuck is what the runtime does when a step keeps failing after its
// retries.
type OnStuck string

// The recovery a plan may ask for; "" means ConsultPlanner.
const (
	ConsultPlanner OnStuck = "consult_planner"
	Replan         OnStuck = "replan"
	Escalate       OnStuck = "escalate"
)

// Budget is what a plan asks to spend at most. Zero means "the configured
// default"; the runtime takes the smaller of this and the configuration.
type Budget struct {
	MaxTokens          int64   `yaml:"max_tokens,omitempty"`
	MaxModelCalls      int64   `yaml:"max_model_calls,omitempty"`
	MaxToolCalls       int64   `yaml:"max_tool_calls,omitempty"`
	MaxWallTimeSeconds int64   `yaml:"max_wall_time_seconds,omitempty"`
	MaxCostUSD         float64 `yaml:"max_cost_usd,omitempty"`
}

// Plan is a parsed plan.
type Plan struct {
	ID      string
	Title   string
	Steps   []string
	Verify  []verify.Check
	Budget  Budget
	OnStuck OnStuck
	// Body is the prose briefing after the front matter (# Context,
	// # What to do, # Constraints, # If you get stuck), trimmed.
	Body string
}

// Error is a parse error; Field names the front-matter key ("steps[2]",
// "verify[0].run") or is empty for the document's shape.
type Error struct {
	Field string
	Msg   string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return "plan: " + e.Msg
	}
	return "plan: " + e.Field + ": " + e.Msg
}

func errf(field, format string, a ...any) error {
	return &Error{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// frontMatter is the YAML the planner writes.
type frontMatter struct {
	ID      string      `yaml:"id,omitempty"`
	Type    string      `yaml:"type,omitempty"`
	Title   string      `yaml:"title"`
	Steps   []string    `yaml:"steps"`
	Verify  []checkYAML `yaml:"verify,omitempty"`
	Budget  Budget      `yaml:"budget,omitempty"`
	OnStuck string      `yaml:"on_stuck,omitempty"`
}

type checkYAML struct {
	Name           string     `yaml:"name,omitempty"`
	Run            yaml.Node  `yaml:"run,omitempty"`
	TimeoutSeconds int        `yaml:"timeout_seconds,omitempty"`
	Expect         expectYAML `yaml:"expect"`
}

type expectYAML struct {
	ExitCode   *int     `yaml:"exit_code,omitempty"`
	Equals     *string  `yaml:"equals,omitempty"`
	Contains   *string  `yaml:"contains,omitempty"`
	Regex      *string  `yaml:"regex,omitempty"`
	OutputLT   *float64 `yaml:"output_lt,omitempty"`
	OutputGT   *float64 `yaml:"output_gt,omitempty"`
	FileExists *string  `yaml:"file_exists,omitempty"`
	NotEmpty   bool     `yaml:"not_empty,omitempty"`
}

// Parse reads a plan. The document must start with a "---" line, the
// front matter must end with a "---" line, and the body follows. One
// enclosing markdown code fence (```markdown … ```) is tolerated because
// models wrap documents in one; nothing else is.
func Parse(doc string) (*Plan, error) {
	if len(doc) > MaxBytes {
		return nil, errf("", "%d bytes is more than the %d a plan may have", len(doc), MaxBytes)
	}
	if !utf8.ValidString(doc) {
		return nil, errf("", "not valid UTF-8")
	}
	if strings.ContainsRune(doc, 0) {
		return nil, errf("", "contains a NUL character")
	}
	doc = strings.ReplaceAll(doc, "\r\n", "\n")
	doc = unfence(strings.TrimSpace(strings.TrimPrefix(doc, "\ufeff")))
	rest, ok := strings.CutPrefix(doc, "---\n")
	if !ok {
		return nil, errf("", `must start with a "---" line opening the YAML front matter`)
	}
	var fm, body string
	if i := strings.Index(rest, "\n---\n"); i >= 0 {
		fm, body = rest[:i], rest[i+len("\n---\n"):]
	} else if strings.HasSuffix(rest, "\n---") {
		fm = strings.TrimSuffix(rest, "\n---")
	} else {
		return nil, errf("", `the front matter is not closed by a "---" line`)
	}
	var m frontMatter
	dec := yaml.NewDecoder(strings.NewReader(fm))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errf("", "the front matter is empty")
		}
		return nil, errf("", "front matter: %s", yamlMsg(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errf("", "the front matter must be one YAML document")
	}
	p := &Plan{ID: m.ID, Title: strings.TrimSpace(m.Title), Budget: m.Budget, OnStuck: OnStuck(m.OnStuck), Body: strings.TrimSpace(body)}
	if err := p.fill(m); err != nil {
		return nil, err
	}
	return p, nil
}

// unfence removes one code fence around the whole document.
func unfence(s string) string {
	if !strings.HasPrefix(s, "```") || !strings.HasSuffix(s, "```") || len(s) < 6 {
		return s
	}
	first, rest, ok := strings.Cut(s, "\n")
	if !ok {
		return s
	}
	lang := strings.TrimPrefix(first, "```")
	if lang != "" && lang != "markdown" && lang != "md" && lang != "yaml" {
		return s
	}
	inner := strings.TrimSuffix(rest, "```")
	if strings.Contains(inner, "```") {
		return s // the fence is not the only one: leave it to fail
	}
	return strings.TrimSpace(inner)
}

func (p *Plan) fill(m frontMatter) error {
	if m.Type != "" && m.Type != "task" {
		return errf("type", "%q: only task plans exist", m.Type)
	}
	if len(p.ID) > MaxIDLen || strings.IndexFunc(p.ID, unsafeRune) >= 0 || strings.ContainsAny(p.ID, " \n") {
		return errf("id", "must be at most %d characters without spaces or control characters", MaxIDLen)
	}
	if err := line("title", p.Title, MaxTitle); err != nil {
		return err
	}
	if len(m.Steps) == 0 {
		return errf("steps", "a plan needs at least one step")
	}
	if len(m.Steps) > MaxSteps {
		return errf("steps", "%d steps; at most %d", len(m.Steps), MaxSteps)
	}
	for i, s := range m.Steps {
		s = strings.TrimSpace(s)
		if err := line(fmt.Sprintf("steps[%d]", i), s, MaxStepLen); err != nil {
			return err
		}
		p.Steps = append(p.Steps, s)
	}
	if len(m.Verify) > MaxChecks {
		return errf("verify", "%d checks; at most %d", len(m.Verify), MaxChecks)
	}
	for i, c := range m.Verify {
		vc, err := c.check(fmt.Sprintf("verify[%d]", i))
		if err != nil {
			return err
		}
		p.Verify = append(p.Verify, vc)
	}
	b := p.Budget
	for _, f := range []struct {
		key string
		v   int64
	}{{"max_tokens", b.MaxTokens}, {"max_model_calls", b.MaxModelCalls}, {"max_tool_calls", b.MaxToolCalls}, {"max_wall_time_seconds", b.MaxWallTimeSeconds}} {
		if f.v < 0 || f.v > maxBudgetInt {
			return errf("budget."+f.key, "%d must be between 0 and %d", f.v, int64(maxBudgetInt))
		}
	}
	if b.MaxCostUSD < 0 || math.IsNaN(b.MaxCostUSD) || math.IsInf(b.MaxCostUSD, 0) || b.MaxCostUSD > 1e6 {
		return errf("budget.max_cost_usd", "must be a number between 0 and 1000000")
	}
	switch p.OnStuck {
	case "":
		p.OnStuck = ConsultPlanner
	case ConsultPlanner, Replan, Escalate:
	default:
		return errf("on_stuck", "%q is not consult_planner, replan or escalate", p.OnStuck)
	}
	return nil
}

// check converts one YAML check into a core/verify check.
func (c checkYAML) check(field string) (verify.Check, error) {
	vc := verify.Check{Name: strings.TrimSpace(c.Name), TimeoutSeconds: c.TimeoutSeconds}
	switch c.Run.Kind {
	case 0:
	case yaml.SequenceNode:
		if err := c.Run.Decode(&vc.Run); err != nil {
			return vc, errf(field+".run", "must be a list of strings (an argv)")
		}
		if len(vc.Run) == 0 {
			return vc, errf(field+".run", "must not be an empty list")
		}
	case yaml.ScalarNode:
		return vc, errf(field+".run", "must be an argv list such as [test, -d, /var/log], not a shell string: verification never runs a shell")
	default:
		return vc, errf(field+".run", "must be a list of strings (an argv)")
	}
	e := c.Expect
	vc.Expect = verify.Expect{ExitCode: e.ExitCode, Equals: e.Equals, Contains: e.Contains, Regex: e.Regex,
		OutputLT: e.OutputLT, OutputGT: e.OutputGT, FileExists: e.FileExists, NotEmpty: e.NotEmpty}
	if e == (expectYAML{}) {
		// verify passes a check without expectation; a plan check that
		// cannot fail would let the model mark its own work done.
		return vc, errf(field+".expect", "needs at least one of exit_code, equals, contains, regex, output_lt, output_gt, file_exists, not_empty")
	}
	if len(vc.Run) == 0 && e.FileExists == nil {
		// Without run a check judges "the execution", and a plan has many:
		// a plan's check looks at the world after the task instead.
		return vc, errf(field, "needs run (a command whose output is checked) or expect.file_exists")
	}
	if err := vc.Validate(); err != nil {
		return vc, errf(field, "%v", err)
	}
	return vc, nil
}

// VerifyCommands returns each check's argv that runs a command: the caller
// passes every one through the risk policy before the verification sandbox
// runs it, exactly like an action.
func (p *Plan) VerifyCommands() [][]string {
	var out [][]string
	for _, c := range p.Verify {
		if len(c.Run) > 0 {
			out = append(out, append([]string(nil), c.Run...))
		}
	}
	return out
}

// Markdown renders the plan in the form Parse reads (Parse(p.Markdown())
// gives p back).
func (p *Plan) Markdown() string {
	m := struct {
		ID      string     `yaml:"id,omitempty"`
		Title   string     `yaml:"title"`
		Steps   []string   `yaml:"steps"`
		Verify  []checkOut `yaml:"verify,omitempty"`
		Budget  *Budget    `yaml:"budget,omitempty"`
		OnStuck OnStuck    `yaml:"on_stuck"`
	}{ID: p.ID, Title: p.Title, Steps: p.Steps, OnStuck: p.OnStuck}
	if p.Budget != (Budget{}) {
		b := p.Budget
		m.Budget = &b
	}
	for _, c := range p.Verify {
		e := c.Expect
		m.Verify = append(m.Verify, checkOut{Name: c.Name, Run: c.Run, TimeoutSeconds: c.TimeoutSeconds, Expect: expectYAML{
			ExitCode: e.ExitCode, Equals: e.Equals, Contains: e.Contains, Regex: e.Regex, OutputLT: e.OutputLT, OutputGT: e.OutputGT,
			FileExists: e.FileExists, NotEmpty: e.NotEmpty}})
	}
	var b bytes.Buffer
	b.WriteString("---\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	_ = enc.Encode(m) // plain structs of strings and numbers always encode
	_ = enc.Close()
	b.WriteString("---\n")
	if p.Body != "" {
		b.WriteString("\n" + p.Body + "\n")
	}
	return b.String()
}

type checkOut struct {
	Name           string     `yaml:"name,omitempty"`
	Run            []string   `yaml:"run,omitempty,flow"`
	TimeoutSeconds int        `yaml:"timeout_seconds,omitempty"`
	Expect         expectYAML `yaml:"expect"`
}

// Summary is the plan card's text: title, numbered steps, checks, budget.
func (p *Plan) Summary() string {
	var b strings.Builder
	b.WriteString(p.Title + "\n")
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "%d. %s\n", i+1, s)
	}
	for _, c := range p.Verify {
		name := c.Name
		if name == "" {
			name = "check"
		}
		if len(c.Run) > 0 {
			fmt.Fprintf(&b, "✔ %s: %s\n", name, strings.Join(c.Run, " "))
		} else {
			fmt.Fprintf(&b, "✔ %s\n", name)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// line checks a one-line text field.
func line(field, s string, maxLen int) error {
	if s == "" {
		return errf(field, "must not be empty")
	}
	if n := utf8.RuneCountInString(s); n > maxLen {
		return errf(field, "%d characters; at most %d", n, maxLen)
	}
	if strings.IndexFunc(s, unsafeRune) >= 0 {
		return errf(field, "must be one line without control or bidirectional-override characters")
	}
	return nil
}

// unsafeRune reports control characters (newlines included) and the
// bidirectional overrides that make text read differently than it is.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}

// yamlMsg shortens yaml.v3's messages ("yaml: line 3: field x not found in
// type plan.frontMatter") to what a model can act on.
func yamlMsg(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = strings.ReplaceAll(s, " in type plan.frontMatter", "")
	s = strings.ReplaceAll(s, " in type plan.checkYAML", "")
	s = strings.ReplaceAll(s, " in type plan.expectYAML", "")
	s = strings.ReplaceAll(s, " in type plan.Budget", "")
	s = strings.ReplaceAll(s, "unmarshal errors:\n  ", "")
	return s
}
