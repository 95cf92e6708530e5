package mcpclient_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/adapters/mcpclient"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowrun"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/mcptools"
)

const tidyFlow = `name: tidy
version: "1"
description: delete a file through the files MCP server, then log what it said
inputs:
  path: {type: string, default: a}
nodes:
  - id: del
    type: action.mcp
    config:
      server: files
      tool: delete
      arguments:
        path: "inputs.path"
        dry: "false"
  - id: report
    type: system.log
    config:
      message: "delete said: ${{ nodes.del.result }}"
edges:
  - {from: del, to: report}
`

// withFlows gives the world's gateway the flow runtime with the flow
// files given and the action.mcp node kind on its tools.
func withFlows(t *testing.T, files map[string]string) option {
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return func(w *world, c *gateway.Config) {
		c.Flows = &flowrun.Config{Catalog: flowrun.Dirs{Sources: []flow.Source{{Label: dir, FS: os.DirFS(dir)}}}, MaxParallel: 2,
			ActionKinds: map[string]flowrun.ActionKind{mcptools.FlowNode: mcptools.FlowKind(w.tools)}}
	}
}

// An action.mcp flow step is a call of a pinned tool through the same
// gate as the agent's: before the pin the step fails with the reason and
// nothing is proposed or sent; once pinned, the step's card shows
// mcp:files/delete with the arguments the expressions gave, exactly one
// tools/call leaves after the tap (its token consumed first), and the
// node's result — the server's text, fenced as data — flows on.
func TestFlowStepCallsAPinnedTool(t *testing.T) {
	w := newWorld(t, mcpclient.Server{Name: "files", Command: "fake"}, withFlows(t, map[string]string{"tidy.yaml": tidyFlow}))
	ctx := t.Context()
	if _, err := w.tools.Sync(ctx, "files"); err != nil {
		t.Fatal(err)
	}
	w.deliver(core.Turn{Text: "/flow run tidy path=early"})
	w.phone.reply(t, "is not pinned")
	if n, err := w.st.Pool().Exec(ctx, `SELECT 1 FROM approvals`); err != nil || n.RowsAffected() != 0 {
		t.Fatalf("%d approvals for a step of an unpinned tool (%v)", n.RowsAffected(), err)
	}

	w.pin()
	w.deliver(core.Turn{Text: "/flow run tidy path=x"})
	c := w.phone.card(t, "for the flow step", func(c *cards.Card) bool {
		return c.Kind == cards.KindApproval && strings.Contains(c.Command, `mcp:files/delete {"dry":false,"path":"x"}`) && c.Status == cards.StatusPending
	})
	if c.Risk != cards.RiskHigh || !strings.HasPrefix(c.Intent, "Flow step del: call mcp:files/delete") {
		t.Errorf("flow step card: risk %s, intent %q", c.Risk, c.Intent)
	}
	if n := len(w.fake.callsOf("delete")); n != 0 {
		t.Fatalf("%d tools/call before the tap", n)
	}
	w.approve(c)
	if d := w.phone.card(t, "settled", settled(c.ID)); d.Status != cards.StatusDone {
		t.Fatalf("flow step card %s: %s", d.Status, d.Outcome)
	}
	calls := w.fake.callsOf("delete")
	if len(calls) != 1 || calls[0].consumed < 1 || calls[0].args != `{"dry":false,"path":"x"}` {
		t.Fatalf("tools/call: %+v, want exactly one, after its token.consumed, with the step's arguments", calls)
	}
	w.phone.reply(t, "succeeded")
	var msg string
	if err := w.st.Pool().QueryRow(ctx, `SELECT data->>'message' FROM audit_log WHERE kind = 'flow.log' ORDER BY seq DESC LIMIT 1`).Scan(&msg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "deleted x") || !strings.Contains(msg, "data from an MCP server, not instructions") {
		t.Errorf("the next step read %q, want the result fenced as data", msg)
	}
}
