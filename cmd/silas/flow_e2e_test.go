package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/storetest"
)

// A flow through the real binary and the web chat, killed with SIGKILL
// at the core's failpoints while its action node runs: after the restart
// the run resumes (the execution's settling transaction queues the run's
// step job), the action has run exactly once, and the progress card
// reaches its final state. Then `silas flow run` starts a run from the
// command line, picked up by the serving process.

const crashFlow = `name: crashy
version: "1"
description: a gate, then one action, then a log line
nodes:
  - id: ask
    type: control.gate
    config:
      prompt: "Write the file?"
      choices: [yes, no]
  - id: write
    type: action.shell
    config:
      command: "sh -c 'echo ran > ran'"
      expect:
        - {name: wrote, file_exists: ran}
  - id: done
    type: system.log
    config:
      message: "wrote it"
edges:
  - {from: ask, to: write, when: "nodes.ask.response.choice == 'yes'"}
  - {from: write, to: done}
`

func flowsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "crashy.yaml"), []byte(crashFlow), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runFlowToGate starts crashy in the web chat and answers its gate.
func runFlowToGate(c *client) (progress cards.ID) {
	c.say("/flow run crashy")
	f := c.expect("the progress card", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && strings.HasPrefix(cd.Intent, "Flow crashy v1 — run ")
	})
	progress = card(f).ID
	g := c.expect("the gate", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Intent == "Flow crashy asks: Write the file?" && cd.Status == cards.StatusPending
	})
	c.tap(string(card(g).ID), card(g).Choices[0].ID)
	return progress
}

func TestFlowSurvivesSIGKILL(t *testing.T) {
	t.Parallel() // servers of their own on databases of their own
	for _, fp := range []string{"after-approve", "after-execute"} {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			dsn := storetest.NewDatabase(t)
			data, flows := t.TempDir(), flowsDir(t)
			s := startServer(t, dsn, data, "SILAS_FAILPOINT="+fp, "SILAS_FLOWS_DIR="+flows)
			c := s.connect(t)
			progress := runFlowToGate(c)
			cd := c.cardFor("sh -c 'echo ran > ran'", cards.StatusPending)
			c.tap(string(cd.ID), "approve")
			c.cardStatus(cd.ID, cards.StatusConfirming)
			c.write(map[string]any{"type": "tap", "id": "t-confirm-" + fp, "card_id": string(cd.ID), "choice": "confirm"})
			s.waitExit(t)

			s2 := startServer(t, dsn, data, "SILAS_FLOWS_DIR="+flows)
			c2 := s2.connect(t)
			c2.cardStatus(cd.ID, cards.StatusDone)
			final := c2.cardStatus(progress, cards.StatusDone)
			if !strings.Contains(final.Details, "✓ write") || !strings.Contains(final.Details, "✓ done") {
				t.Fatalf("progress card after restart:\n%s", final.Details)
			}
			c2.textContaining("Flow crashy (run ")
			runs, _ := filepath.Glob(filepath.Join(data, "sandbox", "exec-*", "ran"))
			if len(runs) != 1 {
				t.Fatalf("the action ran %d times, want exactly 1", len(runs))
			}
			if n := dbCount(t, dsn, `SELECT count(*) FROM flow_runs WHERE status = 'succeeded'`); n != 1 {
				t.Fatalf("succeeded runs = %d", n)
			}
			if n := dbCount(t, dsn, `SELECT count(*) FROM executions`); n != 1 {
				t.Fatalf("executions = %d, want 1", n)
			}
		})
	}
}

func TestFlowRunFromTheCommandLine(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	flows := flowsDir(t)
	s := startServer(t, dsn, t.TempDir(), "SILAS_FLOWS_DIR="+flows)
	c := s.connect(t)
	c.say("/flows")
	c.textContaining("• crashy v1 — a gate, then one action, then a log line")
	var conv, who string
	pool := testPool(t, dsn)
	if err := pool.QueryRow(t.Context(), `SELECT conversation, sender FROM turns ORDER BY seq DESC LIMIT 1`).Scan(&conv, &who); err != nil {
		t.Fatal(err)
	}
	out := s.silasCLI(t, "flow", "run", "--conversation", conv, "--as", who, "crashy")
	if !strings.HasPrefix(out, "Started flow crashy v1: run ") {
		t.Fatalf("flow run said %q", out)
	}
	c.expect("the CLI run's gate", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Intent == "Flow crashy asks: Write the file?" && cd.Status == cards.StatusPending
	})
	run := strings.Fields(strings.TrimPrefix(out, "Started flow crashy v1: run "))[0]
	c.say("/flow stop " + run[:8])
	c.textContaining("Flow crashy (run " + run[:8] + ") cancelled.")
	c.expect("the gate cancelled", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Intent == "Flow crashy asks: Write the file?" && cd.Status == cards.StatusDeclined
	})
	c.say("/flow status " + run[:8])
	c.textContaining("■ ask (control.gate) — cancelled")
	if n := dbCount(t, dsn, `SELECT count(*) FROM flow_runs WHERE status = 'cancelled'`); n != 1 {
		t.Fatalf("cancelled runs = %d", n)
	}
}

const stepFlow = `name: stepper
version: "1"
description: one action, then a log line
nodes:
  - id: write
    type: action.shell
    config:
      command: "sh -c 'echo ran > ran'"
  - id: done
    type: system.log
    config:
      message: "wrote it"
edges:
  - {from: write, to: done}
`

// SIGKILL right after a step job's transaction committed (the run
// started, its action proposed and its card queued), before anything
// after it ran: the restarted process delivers the card from the outbox,
// and the run goes on from its stored transition.
func TestFlowSurvivesSIGKILLAfterAStep(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	data, flows := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(flows, "stepper.yaml"), []byte(stepFlow), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, dsn, data, "SILAS_FAILPOINT=flow-after-step", "SILAS_FLOWS_DIR="+flows)
	c := s.connect(t)
	c.say("/whoami")
	c.textContaining("owner trust")
	var conv, who string
	if err := testPool(t, dsn).QueryRow(t.Context(), `SELECT conversation, sender FROM turns ORDER BY seq DESC LIMIT 1`).Scan(&conv, &who); err != nil {
		t.Fatal(err)
	}
	// Started from the command line: the serving process's step job
	// starts the run — and the failpoint kills it after that commit.
	s.silasCLI(t, "flow", "run", "--conversation", conv, "--as", who, "stepper")
	s.waitExit(t)
	if n := dbCount(t, dsn, `SELECT count(*) FROM flow_transitions`); n < 1 {
		t.Fatalf("no transition stored before the kill")
	}

	s2 := startServer(t, dsn, data, "SILAS_FLOWS_DIR="+flows)
	c2 := s2.connect(t)
	cd := c2.cardFor("sh -c 'echo ran > ran'", cards.StatusPending)
	c2.tap(string(cd.ID), "approve")
	c2.cardStatus(cd.ID, cards.StatusConfirming)
	c2.tap(string(cd.ID), "confirm")
	c2.cardStatus(cd.ID, cards.StatusDone)
	c2.textContaining("Flow stepper (run ")
	if n := dbCount(t, dsn, `SELECT count(*) FROM flow_runs WHERE status = 'succeeded'`); n != 1 {
		t.Fatalf("succeeded runs = %d", n)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM approvals`); n != 1 {
		t.Fatalf("approvals = %d, want 1 (the step was proposed once)", n)
	}
	runs, _ := filepath.Glob(filepath.Join(data, "sandbox", "exec-*", "ran"))
	if len(runs) != 1 {
		t.Fatalf("the action ran %d times, want exactly 1", len(runs))
	}
}

const timedFlow = `name: timed
version: "1"
description: a short wait, then one action
nodes:
  - id: nap
    type: control.wait
    config: {duration: 1s}
  - id: write
    type: action.shell
    config:
      command: "sh -c 'echo ran > ran'"
edges:
  - {from: nap, to: write}
`

// SIGKILL at each kind of transition a run makes, beside the core's own
// failpoints above. Every transition is written by one of three paths: a
// person's turn (a gate's tap here; /flow run, stop, say, signal and a
// reply to a card take the same path), a step job (a timer fired here, an
// action's outcome, a run started from the CLI in
// TestFlowSurvivesSIGKILLAfterAStep), or the core's decision and
// execution (after-approve, after-execute). Each kill lands right after
// the transition's commit and before its after-commit work; after the
// restart the run goes on from its stored state, each card arrives, the
// action runs exactly once and the run succeeds.
func TestFlowSurvivesSIGKILLAtEachTransition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, failpoint, flow string
		// before drives the first process until the kill; after drives
		// the second to the end.
		before func(t *testing.T, s *server, c *client, dsn string)
		after  func(t *testing.T, c *client)
		// ended: the killed transition was the run's last (nothing is
		// left to store after the restart but the delivery of its cards).
		ended bool
	}{
		{name: "gate tap", failpoint: "flow-after-turn", flow: "crashy",
			before: func(t *testing.T, s *server, c *client, dsn string) {
				// Started from the CLI (a step job), so the first turn
				// that moves the run is the gate's tap.
				c.say("/whoami")
				c.textContaining("owner trust")
				var conv, who string
				if err := testPool(t, dsn).QueryRow(t.Context(), `SELECT conversation, sender FROM turns ORDER BY seq DESC LIMIT 1`).Scan(&conv, &who); err != nil {
					t.Fatal(err)
				}
				s.silasCLI(t, "flow", "run", "--conversation", conv, "--as", who, "crashy")
				g := c.expect("the gate", func(f map[string]any) bool {
					cd := card(f)
					return cd != nil && cd.Intent == "Flow crashy asks: Write the file?" && cd.Status == cards.StatusPending
				})
				c.write(map[string]any{"type": "tap", "id": "t-gate-kill", "card_id": string(card(g).ID), "choice": card(g).Choices[0].ID})
			},
			after: approveWrite},
		{name: "action outcome", failpoint: "flow-after-step", flow: "crashy",
			before: func(t *testing.T, s *server, c *client, dsn string) {
				runFlowToGate(c)
				cd := c.cardFor("sh -c 'echo ran > ran'", cards.StatusPending)
				c.tap(string(cd.ID), "approve")
				c.cardStatus(cd.ID, cards.StatusConfirming)
				c.write(map[string]any{"type": "tap", "id": "t-confirm-kill", "card_id": string(cd.ID), "choice": "confirm"})
			},
			after: func(t *testing.T, c *client) {}, ended: true},
		{name: "timer", failpoint: "flow-after-step", flow: "timed",
			before: func(t *testing.T, s *server, c *client, dsn string) {
				c.say("/flow run timed")
				c.textContaining("Started flow timed v1")
			},
			after: approveWrite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn := storetest.NewDatabase(t)
			data, flows := t.TempDir(), flowsDir(t)
			if err := os.WriteFile(filepath.Join(flows, "timed.yaml"), []byte(timedFlow), 0o600); err != nil {
				t.Fatal(err)
			}
			s := startServer(t, dsn, data, "SILAS_FAILPOINT="+tc.failpoint, "SILAS_FLOWS_DIR="+flows)
			tc.before(t, s, s.connect(t), dsn)
			s.waitExit(t)
			transitions := dbCount(t, dsn, `SELECT count(*) FROM flow_transitions`)

			s2 := startServer(t, dsn, data, "SILAS_FLOWS_DIR="+flows)
			c2 := s2.connect(t)
			tc.after(t, c2)
			c2.textContaining("Flow " + tc.flow + " (run ")
			if n := dbCount(t, dsn, `SELECT count(*) FROM flow_runs WHERE status = 'succeeded'`); n != 1 {
				t.Fatalf("succeeded runs = %d", n)
			}
			if n := dbCount(t, dsn, `SELECT count(*) FROM flow_transitions`); n <= transitions && !tc.ended {
				t.Fatalf("no transition after the restart (%d before, %d after)", transitions, n)
			}
			if n := dbCount(t, dsn, `SELECT count(*) FROM approvals`); n != 1 {
				t.Fatalf("approvals = %d, want 1 (the step was proposed once)", n)
			}
			if n := dbCount(t, dsn, `SELECT count(*) FROM executions`); n != 1 {
				t.Fatalf("executions = %d, want 1", n)
			}
			// No transition was stored twice, no attempt started twice.
			if n := dbCount(t, dsn, `SELECT count(*) FROM (SELECT run_id, node, iteration FROM flow_attempts GROUP BY 1, 2, 3 HAVING count(*) > 1) d`); n != 0 {
				t.Fatalf("%d nodes were attempted more than once", n)
			}
			runs, _ := filepath.Glob(filepath.Join(data, "sandbox", "exec-*", "ran"))
			if len(runs) != 1 {
				t.Fatalf("the action ran %d times, want exactly 1", len(runs))
			}
		})
	}
}

// approveWrite approves and confirms the write action's card, after a
// restart (the card delivered from the outbox), and waits until it is done.
func approveWrite(t *testing.T, c *client) {
	cd := c.cardFor("sh -c 'echo ran > ran'", cards.StatusPending)
	c.tap(string(cd.ID), "approve")
	c.cardStatus(cd.ID, cards.StatusConfirming)
	c.tap(string(cd.ID), "confirm")
	c.cardStatus(cd.ID, cards.StatusDone)
}
