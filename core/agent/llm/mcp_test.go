package llm

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core"
)

func TestMCPToolsOffered(t *testing.T) {
	pinned := []MCPTool{
		{Server: "files", Name: "delete", Description: "Delete a file.", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`), Hash: "h1"},
		{Server: "files", Name: "read", Description: "Read.", InputSchema: json.RawMessage(`{"type":"object"}`), Hash: "h2", ReadOnlyHint: true},
		{Server: "files", Name: "bad.name", Hash: "h3"},
	}
	o := ToolOptions{MCP: pinned}
	names := map[string]Tool{}
	for _, tl := range Tools(o) {
		names[tl.Name] = tl
	}
	if _, ok := names["mcp__files__delete"]; !ok {
		t.Fatalf("pinned tool not offered: %v", names)
	}
	if d := names["mcp__files__delete"].Description; !strings.Contains(d, "in its words") || !strings.Contains(d, "Delete a file.") {
		t.Errorf("description %q", d)
	}
	for n := range names {
		if strings.Contains(n, "bad.name") {
			t.Errorf("a tool name the model cannot use was offered: %s", n)
		}
	}
	tests := []struct {
		name, tool, args, err string
	}{
		{"call", "mcp__files__delete", `{"path": "a"}`, ""},
		{"not an object", "mcp__files__delete", `["a"]`, "must be a JSON object"},
		{"not offered", "mcp__files__format", `{}`, "no such tool"},
		{"duplicate keys", "mcp__files__delete", `{"path":"a","path":"b"}`, "well-formed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := DecodeArgs(ToolCall{ID: "1", Name: tt.tool, Arguments: tt.args}, o)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pa, ok := c.Action()
			a := pa.Action
			if !ok || a.Tool != core.ToolMCP || a.Server != "files" || a.Name != "delete" || string(a.Arguments) != `{"path":"a"}` || a.DefinitionHash != "h1" || a.ReadOnlyHint {
				t.Fatalf("action %+v", a)
			}
		})
	}
}
