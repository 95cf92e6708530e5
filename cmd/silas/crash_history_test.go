package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/storetest"
)

// crashPolicy makes `touch` one tap (low) and `mkdir` tap + confirm
// (medium); both leave a marker in the execution's own work directory, so
// runs can be counted.
const crashPolicy = `policy:
  rules:
    - name: crash-low
      tool: shell
      match: '^touch '
      decision: auth_required
      risk: low
    - name: crash-medium
      tool: shell
      match: '^mkdir '
      decision: auth_required
      risk: medium
`

// kill SIGKILLs the server and waits for it to be gone.
func (s *server) kill(t *testing.T) {
	t.Helper()
	_ = s.cmd.Process.Kill()
	s.waitExit(t)
}

func (c *client) sawAck(id string) bool {
	for _, f := range c.seen {
		if f["type"] == "ack" && f["id"] == id {
			return true
		}
	}
	return false
}

// TestCrashCardsReachFinalState approves (low risk: one tap) and confirms
// (medium: approve, then confirm) actions through the real binary, SIGKILLs
// it at a random moment between the deciding tap and the verified result,
// restarts it and reconnects after a delay, as a person reopening the page
// would. Every card must then show, from the replayed history alone, the
// state the database recorded — done (verified, run exactly once) or
// interrupted (not run again) — with no buttons, and no action may have run
// twice. A tap the killed server had not acknowledged is re-sent with the
// same id, as the page does.
//
// SILAS_CRASH_TRIALS sets the number of trials (5 by default, so `make
// test` stays fast; the issue asks for at least 40 once).
func TestCrashCardsReachFinalState(t *testing.T) {
	if testing.Short() {
		t.Skip("crash trials restart the binary many times")
	}
	trials := 5
	if v := os.Getenv("SILAS_CRASH_TRIALS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SILAS_CRASH_TRIALS=%q: want a positive number", v)
		}
		trials = n
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (SILAS_CRASH_SEED reproduces the kill delays)", seed)
	if v := os.Getenv("SILAS_CRASH_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	// serve refuses SILAS_* variables that name no configuration key, and
	// every test's servers inherit this environment: unset them for good
	// (restoring them would break the servers of tests still running),
	// before the parallel tests start.
	for _, k := range []string{"SILAS_CRASH_TRIALS", "SILAS_CRASH_SEED"} {
		os.Unsetenv(k)
	}
	t.Parallel() // servers of its own on a database of its own

	dsn := storetest.NewDatabase(t)
	data := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "silas.yaml")
	if err := os.WriteFile(cfg, []byte(crashPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	env := "SILAS_CONFIG=" + cfg
	s := startServer(t, dsn, data, env, shortLease)

	type result struct {
		card            cards.ID
		marker          string
		delay           time.Duration
		acked           bool
		status          cards.Status
		runs, execStart int
	}
	var results []result
	for i := range trials {
		medium := i%2 == 1
		marker := fmt.Sprintf("mark-%d", i)
		command := "touch " + marker
		choice := "approve"
		if medium {
			command, choice = "mkdir "+marker, "confirm"
		}
		c := s.connect(t)
		c.say("/run " + command)
		cd := c.cardFor(command, cards.StatusPending)
		if medium {
			c.tap(string(cd.ID), "approve")
			c.cardStatus(cd.ID, cards.StatusConfirming)
		}
		// The deciding tap, then SIGKILL somewhere between it and the
		// verified result (a run takes a few tens of milliseconds here;
		// some kills land before the tap is even stored, some after
		// everything is done).
		tapID := fmt.Sprintf("t-crash-%d", i)
		delay := time.Duration(rng.Int64N(int64(250 * time.Millisecond)))
		c.write(map[string]any{"type": "tap", "id": tapID, "card_id": string(cd.ID), "choice": choice})
		time.Sleep(delay)
		s.kill(t)
		c.drain(200 * time.Millisecond)
		r := result{card: cd.ID, marker: marker, delay: delay, acked: c.sawAck(tapID)}
		c.conn.CloseNow()

		s = startServer(t, dsn, data, env, shortLease)
		// Reconnect a while later: the results of the restart (a resumed
		// run, "interrupted") are recorded while nobody looks.
		time.Sleep(time.Duration(200+rng.IntN(400)) * time.Millisecond)
		c2 := s.connect(t)
		if !r.acked {
			c2.write(map[string]any{"type": "tap", "id": tapID, "card_id": string(cd.ID), "choice": choice})
			c2.expectNew("ack "+tapID, func(f map[string]any) bool { return f["type"] == "ack" && f["id"] == tapID })
		}
		c2.expect("card "+string(cd.ID)+" final", func(f map[string]any) bool {
			x := card(f)
			return x != nil && x.ID == cd.ID && !x.Status.Open() && x.Status != cards.StatusApproved && x.Status != cards.StatusRunning
		})
		c2.conn.CloseNow()
		waitQuiet(t, dsn)

		// A fresh connection: its replay alone shows the final state.
		c3 := s.connect(t)
		var shown *cards.Card
		for _, f := range replayOf(c3) {
			if x := card(f); x != nil && x.ID == cd.ID {
				shown = x
			}
		}
		c3.conn.CloseNow()
		if shown == nil {
			t.Fatalf("trial %d: card %s is not in the replayed history", i, cd.ID)
		}
		r.status = shown.Status
		r.runs = countRuns(t, data, marker)
		r.execStart = dbCount(t, dsn, `SELECT count(*) FROM audit_log WHERE kind = 'execution.started' AND data->>'approval' = $1`, string(cd.ID))
		checkFinal(t, i, dsn, r.card, shown, r.runs)
		results = append(results, r)
	}

	// At the end, every card's state fetched by id matches too.
	c := s.connect(t)
	for i, r := range results {
		// Paced under the per-session frame limit (10 a second).
		time.Sleep(120 * time.Millisecond)
		id := fmt.Sprintf("g-%d", i)
		c.write(map[string]any{"type": "get_card", "id": id, "card_id": string(r.card)})
		f := c.expectNew("card_state "+id, func(f map[string]any) bool { return f["id"] == id })
		x := card(f)
		if f["type"] != "card_state" || x == nil || x.Status != r.status {
			t.Errorf("trial %d: get_card = %v, want status %s", i, f, r.status)
		}
	}

	var done, interrupted, unacked, doubled int
	for _, r := range results {
		switch r.status {
		case cards.StatusDone:
			done++
		case cards.StatusInterrupted:
			interrupted++
		}
		if !r.acked {
			unacked++
		}
		if r.runs > 1 || r.execStart > 1 {
			doubled++
		}
	}
	t.Logf("%d trials: %d done (verified, ran once), %d interrupted (not re-run), %d killed before the tap was acknowledged (re-sent), %d doubled executions",
		len(results), done, interrupted, unacked, doubled)
	for i, r := range results {
		t.Logf("trial %2d: kill after %3dms, acked=%-5v → %-11s runs=%d", i, r.delay.Milliseconds(), r.acked, r.status, r.runs)
	}
	if doubled != 0 {
		t.Fatalf("%d doubled executions", doubled)
	}
}

// replayOf returns the replayed frames of a fresh connection (connect
// has consumed hello): every frame marked replay that arrives at once.
func replayOf(c *client) []map[string]any {
	var out []map[string]any
	for _, f := range c.seen {
		if f["replay"] == true {
			out = append(out, f)
		}
	}
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				return out
			}
			c.seen = append(c.seen, f)
			if f["replay"] == true {
				out = append(out, f)
			}
		case <-time.After(500 * time.Millisecond):
			return out
		}
	}
}

// waitQuiet waits until nothing is pending: turns, runs, deliveries.
func waitQuiet(t *testing.T, dsn string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := dbCount(t, dsn, `SELECT (SELECT count(*) FROM turns WHERE status = 'pending')
			+ (SELECT count(*) FROM executions WHERE status IN ('queued', 'running', 'executed'))
			+ (SELECT count(*) FROM outbox WHERE status = 'pending')`)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d turns, executions or deliveries still pending", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countRuns counts the executions that left marker: each run has a work
// directory of its own.
func countRuns(t *testing.T, data, marker string) int {
	t.Helper()
	runs, err := filepath.Glob(filepath.Join(data, "sandbox", "exec-*", marker))
	if err != nil {
		t.Fatal(err)
	}
	return len(runs)
}

// checkFinal compares the card the chat shows with what the database
// recorded for its action.
func checkFinal(t *testing.T, trial int, dsn string, id cards.ID, shown *cards.Card, runs int) {
	t.Helper()
	if len(shown.Choices) != 0 {
		t.Errorf("trial %d: final card %s still has buttons: %+v", trial, shown.Status, shown.Choices)
	}
	exec := dbString(t, dsn, `SELECT COALESCE((SELECT status FROM executions WHERE approval_id = $1), 'none')`, string(id))
	switch {
	case exec == "verified" && shown.Status == cards.StatusDone:
		if runs != 1 || !strings.Contains(shown.Outcome, "exit code 0") {
			t.Errorf("trial %d: done, but ran %d times (outcome %q)", trial, runs, shown.Outcome)
		}
	case exec == "interrupted" && shown.Status == cards.StatusInterrupted:
		if runs > 1 {
			t.Errorf("trial %d: interrupted, but ran %d times", trial, runs)
		}
	default:
		t.Errorf("trial %d: the chat shows %s (%q) but the execution is %s", trial, shown.Status, shown.Outcome, exec)
	}
}

func dbString(t *testing.T, dsn, q string, args ...any) string {
	t.Helper()
	var s string
	if err := testPool(t, dsn).QueryRow(context.Background(), q, args...).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
