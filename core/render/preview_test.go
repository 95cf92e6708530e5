package render_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/render"
)

// The card's preview says what will change: each argument exactly as
// passed and the working directory; an MCP call's tool and arguments; the
// flow step it belongs to.
func TestPreview(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		act  core.Action
		step string
		want []string
	}{
		{name: "shell", act: core.Action{Tool: "shell", Argv: []string{"rm", "-rf", "a b"}, Secrets: []string{"TOKEN"}},
			want: []string{"Program: rm", `Argument 2: "a b"`, "Working directory:", "Receives secret TOKEN"}},
		{name: "mcp", act: core.Action{Tool: core.ToolMCP, Server: "files", Name: "write", Arguments: json.RawMessage(`{"path":"/x"}`)},
			want: []string{"Calls tool write on MCP server files", `"path": "/x"`}},
		{name: "mcp write_file: the new content as a diff", act: core.Action{Tool: core.ToolMCP, Server: "files", Name: "write_file",
			Arguments: json.RawMessage(`{"path":"/srv/app.conf","content":"port=80\nhost=a\n"}`)},
			want: []string{"Calls tool write_file on MCP server files, which writes the whole file /srv/app.conf", "--- /srv/app.conf\n+++ /srv/app.conf\n+port=80\n+host=a"}},
		{name: "mcp edit_file: each edit as a diff", act: core.Action{Tool: core.ToolMCP, Server: "files", Name: "edit_file",
			Arguments: json.RawMessage(`{"path":"/srv/app.conf","edits":[{"oldText":"a\nport=80\nz","newText":"a\nport=8080\nz"}],"dryRun":false}`)},
			want: []string{"which edits the file /srv/app.conf", "@@ edit 1 @@\n a\n-port=80\n+port=8080\n z", "Other arguments:\n{\n  \"dryRun\": false\n}"}},
		{name: "mcp edits without texts: the arguments as they are", act: core.Action{Tool: core.ToolMCP, Server: "files", Name: "edit_file",
			Arguments: json.RawMessage(`{"path":"/x","edits":[{"oldText":"a"}]}`)},
			want: []string{"with arguments:", `"oldText": "a"`}},
		{name: "flow step", act: core.Action{Tool: "shell", Argv: []string{"systemctl", "restart", "web"}}, step: "node restart (action.shell), iteration 0, attempt 1",
			want: []string{"Flow step: node restart", `Argument 2: "web"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := render.Preview(tt.act, tt.step)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Fatalf("preview %q lacks %q", got, w)
				}
			}
		})
	}
}
