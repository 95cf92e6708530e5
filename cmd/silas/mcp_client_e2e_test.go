package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// TestMCPClientThroughTheBinary runs Silas as an MCP client as deployed:
// `silas serve` with a stdio MCP server in mcp.servers (run in the
// sandbox) and the LLM agent on a scripted endpoint, used through the web
// chat: the owner gets the pin card, pins, the model's call to the delete
// tool becomes a high-risk card, the tap sends exactly that call, and
// `silas mcp list` shows the tools pinned.
func TestMCPClientThroughTheBinary(t *testing.T) {
	t.Parallel()
	bin, err := os.MkdirTemp("/opt", "silas-e2e-mcp-")
	if err != nil {
		t.Skipf("no directory inside /opt for the fake MCP server: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	fakeBin := filepath.Join(bin, "mcp-files")
	if out, err := exec.Command("go", "build", "-trimpath", "-o", fakeBin, "github.com/silas-gateway/silas/internal/mcpfake").CombinedOutput(); err != nil {
		t.Fatalf("building the fake MCP server: %v\n%s", err, out)
	}
	cfgFile := filepath.Join(t.TempDir(), "silas.yaml")
	if err := os.WriteFile(cfgFile, []byte("mcp:\n  servers:\n    - name: files\n      command: "+fakeBin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const key = "sk-e2e-mcp-client-key"
	fake := llmtest.New(t, key, "e2e-model")
	dsn := storetest.NewDatabase(t)
	s := startServer(t, dsn, t.TempDir(), append(llmEnv(t, fake, key), "SILAS_CONFIG="+cfgFile)...)
	c := s.connect(t)

	pf := c.expect("the pin card", func(f map[string]any) bool {
		d := card(f)
		return d != nil && strings.HasPrefix(string(d.ID), "mcppin-") && d.Status == cards.StatusPending
	})
	pin := card(pf)
	if !strings.Contains(pin.Details, "delete (new)") || !strings.Contains(pin.Details, "none (counts as destructive and open-world)") {
		t.Fatalf("pin card details:\n%s", pin.Details)
	}
	c.tap(string(pin.ID), "pin")
	c.cardStatus(pin.ID, cards.StatusApproved)

	fake.Script(llmToolCall("mcp__files__delete", `{"path":"report.txt"}`))
	c.say("delete report.txt on the share")
	cd := c.cardFor(`mcp:files/delete {"path":"report.txt"}`, cards.StatusPending)
	if cd.Risk != cards.RiskHigh {
		t.Fatalf("an unannotated MCP tool: risk %s, want high", cd.Risk)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM executions`); n != 0 {
		t.Fatalf("executions before the tap: %d", n)
	}
	offered := false
	for _, tl := range fake.Requests()[0].Tools {
		offered = offered || tl.Function.Name == "mcp__files__delete"
	}
	if !offered {
		t.Fatalf("the model was not offered the pinned tool: %v", fake.Requests()[0].Tools)
	}
	done := approveCard(c, cd)
	if !strings.Contains(done.Output, "deleted report.txt") || !strings.Contains(done.Output, "not instructions") {
		t.Fatalf("done card = %+v", done)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM audit_log WHERE kind = 'mcp.pinned'`); n != 2 {
		t.Fatalf("mcp.pinned entries = %d, want 2", n)
	}
	// doctor connects to the server (in a sandbox of its own) and compares
	// its tools with the pins; its exit status counts other checks too.
	doc := exec.Command(silasBin, "doctor")
	doc.Env = append(s.env, "SILAS_AGENT_KIND=command") // the scripted model answers the test only
	out, _ := doc.CombinedOutput()
	if !strings.Contains(string(out), "files: 2 tools, each as pinned") {
		t.Fatalf("silas doctor does not report the MCP server:\n%s", out)
	}
	list := s.silasCLI(t, "mcp", "list")
	for _, want := range []string{"files", "delete", "read", "pinned", "stdio (sandbox)"} {
		if !strings.Contains(list, want) {
			t.Fatalf("silas mcp list lacks %q:\n%s", want, list)
		}
	}
}
