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

// The consent card through the real binary and the web chat, configured
// only by documented keys: a 40-step flow (a gate after step 10). The
// first step has no consent, so it asks with its card and the run's
// consent card states what a tap covers; one tap on it approves the
// waiting first step and every later one under that consent — each with
// its own token, a line instead of a card — through all 40 steps. A second
// run is revoked from /consents while its gate waits: step 11 does not
// run under it, says why in plain words, and asks with its card.
func TestRunConsentCardViaWebChat(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("name: forty\nversion: \"3\"\ndescription: forty steps, a gate after ten\nnodes:\n")
	b.WriteString("  - id: half\n    type: control.gate\n    config:\n      prompt: \"Half way: go on?\"\n      choices: [go, stop]\n")
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, "  - id: s%d\n    type: action.shell\n    config:\n      command: \"echo step-%d\"\n", i, i)
	}
	b.WriteString("edges:\n  - {from: s10, to: half}\n  - {from: half, to: s11, when: \"nodes.half.response.choice == 'go'\"}\n")
	for i := 1; i < 40; i++ {
		if i != 10 {
			fmt.Fprintf(&b, "  - {from: s%d, to: s%d}\n", i, i+1)
		}
	}
	dsn, s := startFlowsServer(t, "forty", b.String())
	c := s.connect(t)

	// startRun runs the flow up to its gate under one tap on its consent
	// card, and returns the run's id and its gate card.
	old := map[cards.ID]bool{}
	fresh := func(what string, pred func(*cards.Card) bool) *cards.Card {
		t.Helper()
		cd := card(c.expect(what, func(f map[string]any) bool {
			cd := card(f)
			return cd != nil && !old[cd.ID] && pred(cd)
		}))
		old[cd.ID] = true
		return cd
	}
	startRun := func() (string, *cards.Card) {
		t.Helper()
		c.say("/flow run forty")
		fresh("step 1's card", func(cd *cards.Card) bool { return cd.Command == "echo step-1" && cd.Status == cards.StatusPending })
		offer := fresh("the consent card", func(cd *cards.Card) bool {
			return strings.HasPrefix(string(cd.ID), "run-consent-") && cd.Status == cards.StatusPending
		})
		run := strings.TrimPrefix(string(offer.ID), "run-consent-")
		for _, want := range []string{"Run " + run + " of flow forty, pinned at version 3.", "Steps: s1, s2,", "s40 — nothing else",
			"only the programs echo", "Up to medium risk", "lanes: offline", "At most 40 runs and 40 units", "for 1h0m0s from now"} {
			if !strings.Contains(offer.Details, want) {
				t.Fatalf("consent card details lack %q:\n%s", want, offer.Details)
			}
		}
		if n := dbCount(t, dsn, `SELECT count(*) FROM audit_log WHERE kind = 'consent.refused' AND data->>'code' = 'consent_required' AND data->>'run' = $1`, run); n != 1 {
			t.Fatalf("consent_required refusals = %d", n)
		}
		c.tap(string(offer.ID), "allow_run")
		c.cardStatus(offer.ID, cards.StatusApproved)
		var cid string
		if err := testPool(t, dsn).QueryRow(t.Context(), `SELECT id FROM consents WHERE run_id = $1`, run).Scan(&cid); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 10; i++ {
			c.textContaining(fmt.Sprintf("s%d ran under consent %s…", i, cid[:8]))
		}
		gate := fresh("the gate", func(cd *cards.Card) bool {
			return cd.Intent == "Flow forty asks: Half way: go on?" && cd.Status == cards.StatusPending
		})
		return run, gate
	}

	runA, gate := startRun()
	c.tap(string(gate.ID), gate.Choices[0].ID)
	for i := 11; i <= 40; i++ {
		c.textContaining(fmt.Sprintf("s%d ran under consent", i))
	}
	c.textContaining("41 succeeded")
	if n := dbCount(t, dsn, `SELECT count(*) FROM approvals WHERE decided_by LIKE 'consent:%' AND task_id = $1`, "flow:"+runA); n != 40 {
		t.Fatalf("run A: %d steps approved under its consent, want 40", n)
	}
	if n := dbCount(t, dsn, `SELECT uses FROM consents WHERE run_id = $1`, runA); n != 40 {
		t.Fatalf("run A: %d uses counted", n)
	}

	runB, gate := startRun()
	c.say("/consents")
	listed := card(c.expectNew("run B's consent on /consents", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && strings.HasPrefix(string(cd.ID), "consent-") && strings.Contains(cd.Intent, "for run "+runB)
	}))
	c.tap(string(listed.ID), "revoke")
	c.cardStatus(listed.ID, cards.StatusDeclined)
	c.tap(string(gate.ID), gate.Choices[0].ID)
	c.textContaining("s11 did not run under the consent: your standing approval was revoked (consent_revoked)")
	eleventh := fresh("step 11's card", func(cd *cards.Card) bool { return cd.Command == "echo step-11" && cd.Status == cards.StatusPending })
	if n := dbCount(t, dsn, `SELECT uses FROM consents WHERE run_id = $1`, runB); n != 10 {
		t.Fatalf("run B: %d uses counted, want 10", n)
	}
	for kind, want := range map[string]int{"consent.offered": 2, "consent.minted": 2, "consent.revoked": 1} {
		if n := dbCount(t, dsn, `SELECT count(*) FROM audit_log WHERE kind = $1`, kind); n != want {
			t.Fatalf("%s audited %d times, want %d", kind, n, want)
		}
	}
	c.tap(string(eleventh.ID), "decline")
}

// startFlowsServer starts the binary with run consents on and one flow
// file, name.yaml, in its flows.dir.
func startFlowsServer(t *testing.T, name, doc string) (string, *server) {
	t.Helper()
	flows := t.TempDir()
	if err := os.WriteFile(filepath.Join(flows, name+".yaml"), []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	dsn := storetest.NewDatabase(t)
	return dsn, startServer(t, dsn, t.TempDir(), "SILAS_FLOWS_DIR="+flows, "SILAS_FLOWS_RUN_WRITES=true", "SILAS_FLOWS_AUTOMATABLE_EXECUTION=true")
}
