package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
)

// A run consent's cost cap and the step frontier through the real binary
// and the web chat, configured only by documented keys: a gate, then four
// steps. The owner gives the run a consent of ten uses but two units
// (`silas consents allow-run --cost-cap 2`): after the gate, s1 and s2
// run under it, and s3 is refused cost_capped — a line in plain words, and
// its card asks. Skipping s4 while s3 waits is out of order; s3 skipped
// (not_applicable) closes its card and the run goes on to s4; marking s4
// done without verified evidence is refused. A second run outlives its
// consent while its gate waits: expiry takes effect before the next step.
func TestRunConsentCostCapAndFrontierViaWebChat(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("name: capped\nversion: \"1\"\ndescription: a gate, then four steps\nnodes:\n  - id: ask\n    type: control.gate\n    config:\n      prompt: \"Go?\"\n      choices: [go, stop]\n")
	for i := 1; i <= 4; i++ {
		fmt.Fprintf(&b, "  - id: s%d\n    type: action.shell\n    config:\n      command: \"echo step-%d\"\n", i, i)
	}
	b.WriteString("edges:\n  - {from: ask, to: s1, when: \"nodes.ask.response.choice == 'go'\"}\n")
	for i := 1; i < 4; i++ {
		fmt.Fprintf(&b, "  - {from: s%d, to: s%d}\n", i, i+1)
	}
	dsn, s := startFlowsServer(t, "capped", b.String())
	c := s.connect(t)
	c.say("/flow run capped")
	g := c.expect("the gate", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Intent == "Flow capped asks: Go?" && cd.Status == cards.StatusPending
	})
	var run string
	if err := testPool(t, dsn).QueryRow(t.Context(), `SELECT id FROM flow_runs`).Scan(&run); err != nil {
		t.Fatal(err)
	}
	out := s.silasCLI(t, "consents", "allow-run", "--nodes", "s1,s2,s3,s4", "--programs", "echo", "--uses", "10", "--cost-cap", "2", "--max-risk", "low", run)
	if !strings.Contains(out, "10 uses") {
		t.Fatalf("allow-run = %q", out)
	}
	c.tap(string(card(g).ID), card(g).Choices[0].ID)
	c.textContaining("s1 ran under consent")
	c.textContaining("s2 ran under consent")
	c.textContaining("s3 did not run under the consent: your standing approval's cost cap is reached (cost_capped)")
	third := c.cardFor("echo step-3", cards.StatusPending)
	if n := dbCount(t, dsn, `SELECT count(*) FROM audit_log WHERE kind = 'consent.refused' AND data->>'code' = 'cost_capped' AND data->>'node' = 's3'`); n != 1 {
		t.Fatalf("cost_capped refusals for s3 = %d", n)
	}
	if n := dbCount(t, dsn, `SELECT units FROM consents`); n != 2 {
		t.Fatalf("units = %d, want 2", n)
	}

	c.say("/flow skip " + run + " s4 policy")
	c.textContaining("Not skipped: this step is not next: the steps before it have not finished, or it already ended (step_out_of_order).")
	c.say("/flow skip " + run + " s3 not_applicable")
	c.textContaining("Skipped s3 of run")
	c.cardStatus(third.ID, cards.StatusDeclined)
	c.textContaining("s4 did not run under the consent: your standing approval's cost cap is reached (cost_capped)")
	fourth := c.cardFor("echo step-4", cards.StatusPending)
	c.say("/flow done " + run + " s4")
	c.textContaining("(verification_unsatisfied).")
	for code, want := range map[string]int{"step_out_of_order": 1, "verification_unsatisfied": 1} {
		if n := dbCount(t, dsn, `SELECT count(*) FROM audit_log WHERE kind = 'consent.refused' AND data->>'code' = $1 AND data->>'op' IS NOT NULL`, code); n != want {
			t.Fatalf("%s refusals = %d, want %d", code, n, want)
		}
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM audit_log WHERE kind = 'flow.step_skipped' AND data->>'node' = 's3'`); n != 1 {
		t.Fatalf("flow.step_skipped for s3 = %d", n)
	}
	c.tap(string(fourth.ID), "decline")

	// A second run outlives its consent while its gate waits (given for
	// one second): the first step after the gate does not run under it,
	// says why, and asks with its card.
	c.say("/flow run capped")
	g2 := c.expectNew("the second run's gate", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Intent == "Flow capped asks: Go?" && cd.Status == cards.StatusPending && cd.ID != card(g).ID
	})
	var run2 string
	if err := testPool(t, dsn).QueryRow(t.Context(), `SELECT id FROM flow_runs WHERE id <> $1`, run).Scan(&run2); err != nil {
		t.Fatal(err)
	}
	s.silasCLI(t, "consents", "allow-run", "--nodes", "s1,s2,s3,s4", "--programs", "echo", "--ttl", "1s", "--max-risk", "low", run2)
	for dbCount(t, dsn, `SELECT count(*) FROM consents WHERE run_id = $1 AND expires_at < now() - interval '100 ms'`, run2) == 0 {
		time.Sleep(100 * time.Millisecond)
	}
	c.tap(string(card(g2).ID), card(g2).Choices[0].ID)
	c.textContaining("s1 did not run under the consent: your standing approval has expired (consent_expired)")
	first := c.cardFor("echo step-1", cards.StatusPending)
	if n := dbCount(t, dsn, `SELECT uses FROM consents WHERE run_id = $1`, run2); n != 0 {
		t.Fatalf("run 2: %d uses of an expired consent", n)
	}
	c.tap(string(first.ID), "decline")
}
