package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/storetest"
)

// A run consent through the real binary and the web chat, configured
// only by documented keys: a flow of a gate and eight steps; while the gate
// waits, the owner gives the run a consent for five uses (`silas consents
// allow-run`); after the gate the steps run without a card — each with its
// own token, a line on the chat — until the uses are spent, and the sixth
// step asks with its card. A consent for another run is never used.
func TestRunConsentViaWebChat(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("name: many\nversion: \"2\"\ndescription: a gate, then eight steps\nnodes:\n  - id: ask\n    type: control.gate\n    config:\n      prompt: \"Go?\"\n      choices: [go, stop]\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&b, "  - id: s%d\n    type: action.shell\n    config:\n      command: \"echo step-%d\"\n", i, i)
	}
	b.WriteString("edges:\n  - {from: ask, to: s1, when: \"nodes.ask.response.choice == 'go'\"}\n")
	for i := 1; i < 8; i++ {
		fmt.Fprintf(&b, "  - {from: s%d, to: s%d}\n", i, i+1)
	}
	flows := t.TempDir()
	if err := os.WriteFile(filepath.Join(flows, "many.yaml"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	dsn := storetest.NewDatabase(t)
	s := startServer(t, dsn, t.TempDir(), "SILAS_FLOWS_DIR="+flows, "SILAS_FLOWS_RUN_WRITES=true", "SILAS_FLOWS_AUTOMATABLE_EXECUTION=true")
	c := s.connect(t)
	c.say("/flow run many")
	g := c.expect("the gate", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Intent == "Flow many asks: Go?" && cd.Status == cards.StatusPending
	})
	var run string
	if err := testPool(t, dsn).QueryRow(t.Context(), `SELECT id FROM flow_runs`).Scan(&run); err != nil {
		t.Fatal(err)
	}
	out := s.silasCLI(t, "consents", "allow-run", "--nodes", "s1,s2,s3,s4,s5,s6,s7,s8", "--programs", "echo", "--uses", "5", "--max-risk", "low", run)
	if !strings.Contains(out, "5 uses") {
		t.Fatalf("allow-run = %q", out)
	}
	if list := s.silasCLI(t, "consents", "list"); !strings.Contains(list, "run "+run) {
		t.Fatalf("consents list = %q", list)
	}
	c.tap(string(card(g).ID), card(g).Choices[0].ID)
	for i := 1; i <= 5; i++ {
		c.textContaining(fmt.Sprintf("s%d ran under consent", i))
	}
	sixth := c.cardFor("echo step-6", cards.StatusPending)
	if n := dbCount(t, dsn, `SELECT count(*) FROM approvals WHERE decided_by LIKE 'consent:%'`); n != 5 {
		t.Fatalf("approved under the consent = %d, want 5", n)
	}
	if n := dbCount(t, dsn, `SELECT uses FROM consents`); n != 5 {
		t.Fatalf("uses = %d", n)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM audit_log WHERE kind = 'consent.refused' AND data->>'code' = 'uses_exhausted' AND data->>'node' = 's6'`); n != 1 {
		t.Fatalf("uses_exhausted refusals for s6 = %d", n)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM consent_inflight`); n != 5 {
		t.Fatalf("in-flight rows = %d", n)
	}
	c.tap(string(sixth.ID), "decline")
}
