package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/canon"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/verify"
)

// Tool names the model may call. Every one that acts becomes a core.Action
// proposal; the runtime, not the model, builds and hashes that action.
const (
	ToolShell    = "shell"
	ToolReadFile = "read_file"
	ToolListDir  = "list_dir"
	ToolHTTPGet  = "http_get"
	ToolAskUser  = "ask_user"
	// ToolReadOutput gives a task's executor an evicted output back by its
	// pointer; not an action (the runtime reads its own storage).
	ToolReadOutput = "read_output"
	// ToolPlanTask is the proxy's way to hand a request to the planner.
	ToolPlanTask = "plan_task"
)

// Limits on tool-call arguments (model output is untrusted input).
const (
	maxArgsBytes = 16 << 10
	maxArgv      = 64
	maxArgLen    = 4096
	maxChoices   = cards.MaxChoices
	maxSecrets   = 8
)

// Call is a decoded, validated tool call. Exactly one group of fields is
// set, by Name.
type Call struct {
	ID   string
	Name string
	// Argv and Secrets (shell: the names of stored secrets the program
	// gets as environment variables); Path (read_file, list_dir); URL
	// (http_get); Pointer (read_output).
	Argv    []string
	Secrets []string
	Pointer string
	Path    string
	URL     string
	// Question and Choices (ask_user); Goal (plan_task).
	Question string
	Choices  []string
	Goal     string
	// Intent is the model's one-line description of the call: shown on the
	// card as what the model says, never trusted for anything.
	Intent string
	// MCP and Arguments: a call to a pinned MCP tool, with its arguments
	// (canonical JSON).
	MCP       *MCPTool
	Arguments json.RawMessage
}

// ToolOptions decide which tools are offered.
type ToolOptions struct {
	// HTTPAllowDomains enables http_get for these hosts (and their
	// subdomains); empty: http_get is not offered.
	HTTPAllowDomains []string
	// Planner offers plan_task (the proxy's hand-off).
	Planner bool
	// Task offers read_output (a task's executor, whose results may be
	// evicted).
	Task bool
	// MCP are the pinned tools of the configured MCP servers, offered
	// next to Silas's own (mcp.go).
	MCP []MCPTool
}

// Tools returns the tool definitions offered to the model.
func Tools(o ToolOptions) []Tool {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	obj := func(req []string, props map[string]any) map[string]any {
		return map[string]any{"type": "object", "properties": props, "required": req, "additionalProperties": false}
	}
	intent := str("One short line saying what this call is for, shown to the user.")
	ts := []Tool{
		{Name: ToolShell, Description: "Propose running one program with arguments (no shell: pipes, redirections and variables are not interpreted). It runs only after policy allows it or the user approves it, in a sandbox without network.",
			Parameters: obj([]string{"argv", "intent"}, map[string]any{
				"argv": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 1, "maxItems": maxArgv, "description": "Program and arguments, e.g. [\"df\", \"-h\"]."},
				"secrets": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "maxItems": maxSecrets,
					"description": "Names of stored secrets the program needs; each arrives as an environment variable named in upper case. You never see the values."},
				"intent": intent})},
		{Name: ToolReadFile, Description: "Propose reading a text file (through the sandbox, inside the allowed directories).",
			Parameters: obj([]string{"path", "intent"}, map[string]any{"path": str("Absolute path of the file."), "intent": intent})},
		{Name: ToolListDir, Description: "Propose listing a directory (through the sandbox, inside the allowed directories).",
			Parameters: obj([]string{"path", "intent"}, map[string]any{"path": str("Absolute path of the directory."), "intent": intent})},
	}
	if len(o.HTTPAllowDomains) > 0 {
		ts = append(ts, Tool{Name: ToolHTTPGet, Description: "Propose fetching a web page with GET. Allowed hosts: " + strings.Join(o.HTTPAllowDomains, ", ") + ".",
			Parameters: obj([]string{"url", "intent"}, map[string]any{"url": str("An https:// URL on an allowed host."), "intent": intent})})
	}
	ts = append(ts, Tool{Name: ToolAskUser, Description: "Ask the user a question when a decision is theirs; optional short choices.",
		Parameters: obj([]string{"question"}, map[string]any{"question": str("The question, in plain words."),
			"choices": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "maxItems": maxChoices}})})
	if o.Task {
		ts = append(ts, Tool{Name: ToolReadOutput, Description: fmt.Sprintf("Get back an earlier tool output of this task that was evicted (shown as \"[EVICTED] Content at <pointer>\"); at most %d characters.", task.RehydrateMax),
			Parameters: obj([]string{"pointer"}, map[string]any{"pointer": str("The pointer, e.g. taskout-….")})})
	}
	ts = append(ts, mcpTools(o.MCP)...)
	if o.Planner {
		ts = append(ts, Tool{Name: ToolPlanTask, Description: "Hand a task that needs several steps to the planner.",
			Parameters: obj([]string{"goal"}, map[string]any{"goal": str("The outcome the user wants, in one or two sentences.")})})
	}
	return ts
}

// ArgsError is a tool call the runtime refused to decode; its text is sent
// back to the model as the tool result so it can correct itself.
type ArgsError struct {
	Tool string
	Msg  string
}

func (e *ArgsError) Error() string { return fmt.Sprintf("invalid arguments for %s: %s", e.Tool, e.Msg) }

// DecodeArgs decodes and validates a tool call's arguments strictly: one
// JSON object (I-JSON: no duplicate keys, checked by core/canon), no
// unknown fields, sizes bounded, no NUL or control characters in argv or
// paths. Tools not offered by o are refused.
func DecodeArgs(tc ToolCall, o ToolOptions) (Call, error) {
	bad := func(format string, a ...any) (Call, error) {
		return Call{}, &ArgsError{Tool: tc.Name, Msg: fmt.Sprintf(format, a...)}
	}
	if len(tc.Arguments) > maxArgsBytes {
		return bad("%d bytes of arguments; at most %d", len(tc.Arguments), maxArgsBytes)
	}
	raw := []byte(tc.Arguments)
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	canonical, err := canon.Transform(raw)
	if err != nil {
		return bad("arguments are not one well-formed JSON object: %v", err)
	}
	if t, ok := findMCP(tc.Name, o.MCP); ok {
		// The server's tool validates its own arguments; Silas checks they
		// are one JSON object and shows them, exactly, on the card.
		if len(canonical) == 0 || canonical[0] != '{' {
			return bad("arguments must be a JSON object")
		}
		return Call{ID: tc.ID, Name: tc.Name, MCP: &t, Arguments: canonical}, nil
	}
	var a struct {
		Argv     []string `json:"argv"`
		Path     *string  `json:"path"`
		URL      *string  `json:"url"`
		Question *string  `json:"question"`
		Choices  []string `json:"choices"`
		Goal     *string  `json:"goal"`
		Intent   string   `json:"intent"`
		Secrets  []string `json:"secrets"`
		Pointer  *string  `json:"pointer"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return bad("%v", err)
	}
	c := Call{ID: tc.ID, Name: tc.Name, Intent: oneLine(a.Intent, 200)}
	allowed := func(fields ...string) error {
		present := map[string]bool{"argv": a.Argv != nil, "path": a.Path != nil, "url": a.URL != nil,
			"question": a.Question != nil, "choices": a.Choices != nil, "goal": a.Goal != nil, "secrets": a.Secrets != nil, "pointer": a.Pointer != nil}
		for k, v := range present {
			if v && !slices.Contains(fields, k) {
				return fmt.Errorf("%s takes no %q", tc.Name, k)
			}
		}
		return nil
	}
	switch tc.Name {
	case ToolShell:
		if err := allowed("argv", "secrets"); err != nil {
			return bad("%v", err)
		}
		if len(a.Secrets) > maxSecrets {
			return bad("at most %d secrets", maxSecrets)
		}
		for i, n := range a.Secrets {
			if secrets.ValidateName(n) != nil {
				return bad("secrets[%d] is not a secret name (letters, digits, _ and -)", i)
			}
			if slices.Contains(a.Secrets[:i], n) {
				return bad("secrets[%d]: %q is listed twice", i, n)
			}
		}
		c.Secrets = a.Secrets
		if len(a.Argv) == 0 || len(a.Argv) > maxArgv {
			return bad("argv must have 1 to %d items", maxArgv)
		}
		for i, s := range a.Argv {
			if err := cleanArg(s); err != nil {
				return bad("argv[%d]: %v", i, err)
			}
		}
		if a.Argv[0] == "" {
			return bad("argv[0] must name a program")
		}
		c.Argv = a.Argv
	case ToolReadFile, ToolListDir:
		if err := allowed("path"); err != nil {
			return bad("%v", err)
		}
		if a.Path == nil || *a.Path == "" {
			return bad("path is required")
		}
		if err := cleanArg(*a.Path); err != nil {
			return bad("path: %v", err)
		}
		if !strings.HasPrefix(*a.Path, "/") {
			return bad("path must be absolute")
		}
		c.Path = *a.Path
	case ToolHTTPGet:
		if len(o.HTTPAllowDomains) == 0 {
			return bad("http_get is not enabled")
		}
		if err := allowed("url"); err != nil {
			return bad("%v", err)
		}
		if a.URL == nil {
			return bad("url is required")
		}
		u, err := url.Parse(*a.URL)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || cleanArg(*a.URL) != nil {
			return bad("url must be an https:// URL without credentials")
		}
		if !hostAllowed(u.Hostname(), o.HTTPAllowDomains) {
			return bad("host %q is not in the allowed list (%s)", u.Hostname(), strings.Join(o.HTTPAllowDomains, ", "))
		}
		c.URL = u.String()
	case ToolAskUser:
		if err := allowed("question", "choices"); err != nil {
			return bad("%v", err)
		}
		if a.Question == nil || strings.TrimSpace(*a.Question) == "" {
			return bad("question is required")
		}
		if len(a.Choices) > maxChoices {
			return bad("at most %d choices", maxChoices)
		}
		c.Question = strings.TrimSpace(*a.Question)
		if utf8.RuneCountInString(c.Question) > 1000 {
			return bad("question is longer than 1000 characters")
		}
		for _, ch := range a.Choices {
			if ch = oneLine(ch, 60); ch != "" {
				c.Choices = append(c.Choices, ch)
			}
		}
	case ToolReadOutput:
		if !o.Task {
			return bad("read_output is only offered inside a task")
		}
		if err := allowed("pointer"); err != nil {
			return bad("%v", err)
		}
		if a.Pointer == nil || strings.TrimSpace(*a.Pointer) == "" {
			return bad("pointer is required")
		}
		if err := cleanArg(*a.Pointer); err != nil || len(*a.Pointer) > 100 {
			return bad("pointer is not one this task gave")
		}
		c.Pointer = strings.TrimSpace(*a.Pointer)
	case ToolPlanTask:
		if !o.Planner {
			return bad("plan_task is not offered here")
		}
		if err := allowed("goal"); err != nil {
			return bad("%v", err)
		}
		if a.Goal == nil || strings.TrimSpace(*a.Goal) == "" {
			return bad("goal is required")
		}
		c.Goal = oneLine(*a.Goal, 1000)
	default:
		return bad("no such tool")
	}
	return c, nil
}

func hostAllowed(host string, allow []string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, d := range allow {
		d = strings.ToLower(strings.TrimPrefix(d, "."))
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}

func cleanArg(s string) error {
	if len(s) > maxArgLen {
		return fmt.Errorf("longer than %d bytes", maxArgLen)
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if r == 0 || (r < 0x20 && r != '\t') || r == 0x7f {
			return errors.New("contains a control character")
		}
	}
	return nil
}

// oneLine makes model text safe for a card line: control characters become
// spaces, and it is cut to n characters.
func oneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069') {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	return shorten(strings.Join(strings.Fields(s), " "), n)
}

// Action turns a call that acts into the action the runtime proposes. The
// runtime builds it (and the engine hashes it): nothing the model wrote
// besides the arguments themselves goes into it. Each action is checked by
// its exit code, like /run. ask_user, read_output and plan_task are not
// actions.
func (c Call) Action() (core.ProposedAction, bool) {
	if c.MCP != nil {
		return c.mcpAction(), true
	}
	var a core.Action
	var intent string
	switch c.Name {
	case ToolShell:
		a = core.Action{Tool: "shell", Argv: slices.Clone(c.Argv), Secrets: slices.Clone(c.Secrets)}
		intent = "Run " + a.CommandLine()
	case ToolReadFile:
		a = core.Action{Tool: "shell", Argv: []string{"cat", "--", c.Path}}
		intent = "Read " + c.Path
	case ToolListDir:
		a = core.Action{Tool: "shell", Argv: []string{"ls", "-la", "--", c.Path}}
		intent = "List " + c.Path
	case ToolHTTPGet:
		a = core.Action{Tool: "shell", Argv: []string{"curl", "--fail", "--silent", "--show-error", "--max-time", "30", "--proto", "=https", "--", c.URL}, Network: true}
		intent = "Fetch " + c.URL
	default:
		return core.ProposedAction{}, false
	}
	a.Verify = []verify.Check{verify.ExitCodeZero()}
	// The model's words are labelled as its own (render.Said): on a card
	// they must never read as Silas's ("ALREADY APPROVED by the owner").
	rationale := "The assistant proposed this."
	if c.Intent != "" {
		rationale = render.Said("The assistant", strings.TrimSuffix(c.Intent, "."))
	}
	rationale += " Silas runs it without a shell, in a sandbox, and counts it as done only if it exits with code 0."
	return core.ProposedAction{Action: a, Intent: intent, Rationale: rationale}, true
}
