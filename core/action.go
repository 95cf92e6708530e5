package core

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/silas-gateway/silas/core/canon"
	"github.com/silas-gateway/silas/core/verify"
)

// Action is one proposed change to the world. Everything in it is covered by
// the action hash the approval token is bound to: changing any field after
// approval makes execution refuse it.
type Action struct {
	// Tool names the executor ("shell").
	Tool string `json:"tool"`
	// Argv is the exact program and arguments, run without a shell.
	Argv []string `json:"argv"`
	// Network asks for network access inside the sandbox (off by default).
	Network bool `json:"network"`
	// TimeoutSeconds bounds execution; 0 means the configured default.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// Secrets lists secret names the action receives as environment
	// variables. Names only; values never enter the action.
	Secrets []string `json:"secrets,omitempty"`
	// Verify lists the checks that decide whether the work is done.
	Verify []verify.Check `json:"verify"`

	// The fields of a call to another MCP server's tool (Tool "mcp",
	// core/mcptools); empty, and absent from the canonical form, for every
	// other tool, so the hash of a shell action is what it always was.

	// Server names the configured MCP server (mcp.servers[].name).
	Server string `json:"server,omitempty"`
	// Name is the tool's name on that server.
	Name string `json:"name,omitempty"`
	// Arguments is the tools/call arguments object, sent as approved.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// DefinitionHash is the hex sha256 of the RFC 8785 form of the tool's
	// definition the owner pinned: the call runs only while the server
	// still offers exactly that definition.
	DefinitionHash string `json:"definition_hash,omitempty"`
	// ReadOnlyHint: the pinned definition says readOnlyHint and the owner
	// marked the server trusted — the only case an MCP tool's annotation
	// may lower its risk (checked again before the call).
	ReadOnlyHint bool `json:"read_only_hint,omitempty"`
}

// ToolMCP is the tool of a call to another MCP server's tool.
const ToolMCP = "mcp"

// MCPTool is how policy rules and people name an MCP server's tool:
// "mcp:<server>/<tool>".
func (a Action) MCPTool() string { return "mcp:" + a.Server + "/" + a.Name }

// CommandLine renders Argv for display, quoting arguments that need it. It is
// for people, never for execution.
func (a Action) CommandLine() string {
	if a.Tool == ToolMCP {
		line := a.MCPTool()
		if len(a.Arguments) > 0 {
			line += " " + string(a.Arguments)
		}
		return line
	}
	parts := make([]string, len(a.Argv))
	for i, s := range a.Argv {
		if s == "" || strings.IndexFunc(s, unsafeShellRune) >= 0 {
			parts[i] = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		} else {
			parts[i] = s
		}
	}
	return strings.Join(parts, " ")
}

// unsafeShellRune reports runes that make an argument need quoting for
// display: anything outside a conservative safe set.
func unsafeShellRune(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	case strings.ContainsRune("_@%+=:,./-", r):
		return false
	}
	return true
}

// Canonical returns the RFC 8785 canonical JSON of the action.
func (a Action) Canonical() ([]byte, error) {
	raw, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("core: marshal action: %w", err)
	}
	return canon.Transform(raw)
}

// Hash returns sha256 of the canonical JSON: the value tokens are bound to.
func (a Action) Hash() ([]byte, error) {
	c, err := a.Canonical()
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256(c)
	return h[:], nil
}
