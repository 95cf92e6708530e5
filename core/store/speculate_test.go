package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// roundTrips records every round trip the store's connections make: a
// batch as its statements, a query alone as itself.
type roundTrips struct {
	mu    sync.Mutex
	trips [][]string
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.trips = append(r.trips, []string{d.SQL})
	r.mu.Unlock()
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records the whole batch as sent (TraceBatchQuery sees
// only the statements whose results were read: none after a failed one).
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	r.mu.Lock()
	r.trips = append(r.trips, sqls)
	r.mu.Unlock()
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// since returns the round trips from the n-th on, and how many there are now.
func (r *roundTrips) since(n int) ([][]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]string(nil), r.trips[n:]...), len(r.trips)
}

func (r *roundTrips) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.trips)
}

// last is the statements of the last round trip.
func (r *roundTrips) last() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trips[len(r.trips)-1]
}

// with returns the round trips that carry a statement containing sql.
func with(trips [][]string, sql string) [][]string {
	var out [][]string
	for _, t := range trips {
		for _, s := range t {
			if strings.Contains(s, sql) {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

func carries(trip []string, sql string) bool { return len(with([][]string{trip}, sql)) == 1 }

// TestSpeculation: an op that speculates queues a compare-and-swap guarded
// and what depends on it at once. When the swap applies, the swap, what
// follows, the audit rows and COMMIT go in one round trip. When it does
// not, the guard fails the transaction on the server — even with COMMIT
// queued behind it in the same round trip — nothing of it commits, and
// the writer runs the op again without speculation, which gets the
// ordinary answer (the swap did not apply). Also when the op swallowed
// the guard's error (a read after it failed in the aborted transaction).
func TestSpeculation(t *testing.T) {
	t.Parallel()
	rt := &roundTrips{}
	s, ctx, _ := setupDSN(t, Options{QueryTracer: rt})
	insertApproval(t, ctx, s, "spec-a", true) // queued; its audit entry sets the writer's head

	// op moves the execution from → running: speculating, the card edit
	// and the entry are queued with the guarded swap; otherwise as the
	// executor did before (the swap's result, then a Finally function).
	type run struct{ speculated, applied bool }
	op := func(runs *[]run, from core.ExecStatus, swallow bool) Op {
		return func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			id := core.ApprovalID("spec-a")
			entry := []audit.Entry{{Kind: "test.moved", Actor: "silas", Conversation: "webchat:local", Data: map[string]any{"approval": "spec-a"}}}
			edit := func() error {
				return tx.QueueMessage("webchat", core.OpUpdate, "spec-a", core.OutMessage{Conversation: "webchat:local", Text: "moved"})
			}
			if tx.Speculate() {
				*runs = append(*runs, run{speculated: true, applied: true})
				if err := tx.QueueGuardedTransitionExecution(id, from, core.ExecRunning, core.ExecUpdate{Started: true}); err != nil {
					return nil, err
				}
				if err := edit(); err != nil {
					return nil, err
				}
				if swallow {
					var one int
					_ = tx.queryRow(ctx, "SELECT 1").Scan(&one) // fails after a failed guard; ignored
				}
				return entry, nil
			}
			*runs = append(*runs, run{})
			r := &(*runs)[len(*runs)-1]
			if err := tx.QueueTransitionExecution(id, from, core.ExecRunning, core.ExecUpdate{Started: true}, func(ok bool) { r.applied = ok }); err != nil {
				return nil, err
			}
			tx.Finally(func() ([]audit.Entry, error) {
				if !r.applied {
					return nil, nil
				}
				return entry, edit()
			})
			return nil, nil
		}
	}
	counts := func() (edits, moved int64) {
		return queryInt(t, ctx, s, `SELECT count(*) FROM outbox WHERE message_key = 'spec-a'`),
			queryInt(t, ctx, s, `SELECT count(*) FROM audit_log WHERE kind = 'test.moved'`)
	}

	for _, swallow := range []bool{false, true} {
		// The row is queued (the second time round, running): a swap from
		// executed misses.
		var runs []run
		edits0, moved0 := counts()
		_, n := rt.since(0)
		if err := s.Do(ctx, op(&runs, core.ExecExecuted, swallow)); err != nil {
			t.Fatalf("swallow=%v: Do = %v", swallow, err)
		}
		trips, _ := rt.since(n)
		if len(runs) != 2 || !runs[0].speculated || runs[1].speculated || runs[1].applied {
			t.Fatalf("swallow=%v: runs %+v, want a speculated one, then one without speculation that did not apply", swallow, runs)
		}
		if edits, moved := counts(); edits != edits0 || moved != moved0 {
			t.Fatalf("swallow=%v: a lost speculation committed %d card edits and %d entries", swallow, edits, moved)
		}
		if g := with(trips, "WITH g AS (UPDATE executions"); len(g) != 1 || !swallow && !carries(g[0], "COMMIT") {
			t.Fatalf("swallow=%v: the guarded swap went in %d round trips (%q), want one, with COMMIT", swallow, len(g), g)
		}
		if swallow {
			continue
		}
		// Now the swap from queued applies: one round trip from BEGIN to
		// COMMIT.
		runs = nil
		_, n = rt.since(0)
		if err := s.Do(ctx, op(&runs, core.ExecQueued, false)); err != nil {
			t.Fatal(err)
		}
		trips, _ = rt.since(n)
		if len(runs) != 1 || !runs[0].speculated {
			t.Fatalf("runs %+v, want one, speculated", runs)
		}
		if edits, moved := counts(); edits != edits0+1 || moved != moved0+1 {
			t.Fatalf("%d card edits and %d entries committed, want 1 and 1", edits, moved)
		}
		if len(trips) != 1 || !carries(trips[0], "BEGIN") || !carries(trips[0], "WITH g AS (UPDATE executions") || !carries(trips[0], "COMMIT") {
			t.Fatalf("the transaction went in %d round trips (%q), want one: BEGIN, the swap, …, COMMIT", len(trips), trips)
		}
	}
}

// TestApproveSpeculation: Approve, speculating, answers "applied, nonce
// fresh, no start recorded" at once and queues its statement guarded, so
// the decision and COMMIT travel in one round trip. Every other outcome
// fails the guard; run again without speculation, Approve then gives the
// answer it always gave: a replayed nonce (not fresh: the caller rolls
// back), an approval no longer open (not applied, nothing written), a
// start of the execution already in the log (Decided says so, for the
// claim with the decision to refuse).
func TestApproveSpeculation(t *testing.T) {
	t.Parallel()
	rt := &roundTrips{}
	s, ctx, _ := setupDSN(t, Options{QueryTracer: rt})
	errReplay := errors.New("replay")
	type answer struct {
		ok, fresh, started bool
		err                error
		runs               []bool // Speculate, per run of the op
	}
	approve := func(id, nonce string) answer {
		var a answer
		a.err = s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			a.runs = append(a.runs, tx.Speculate())
			ok, fresh, err := tx.Approve(ctx, core.ApprovalID(id), []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming},
				"webchat:local", []byte("token"), []byte(nonce), "tok-"+nonce)
			if err != nil {
				return nil, err
			}
			a.ok, a.fresh = ok, fresh
			_, _, a.started, _ = tx.Decided(core.ApprovalID(id))
			if ok && !fresh {
				return nil, errReplay
			}
			return []audit.Entry{{Kind: "test.decided", Actor: "webchat:local", Conversation: "webchat:local", Data: map[string]any{"approval": id}}}, nil
		})
		return a
	}
	status := func(id string) string {
		var st string
		mustScan(t, s.Pool().QueryRow(ctx, `SELECT status FROM approvals WHERE id = $1`, id), &st)
		return st
	}
	nonces := func(id string) int64 {
		return queryInt(t, ctx, s, `SELECT count(*) FROM token_nonces WHERE approval_id = $1`, id)
	}
	for _, id := range []string{"ap-fresh", "ap-replay", "ap-started"} {
		insertApproval(t, ctx, s, id, false)
	}
	mustDo(t, ctx, s, entriesOp(audit.Entry{Kind: audit.KindExecutionStarted, Actor: "silas", Conversation: "webchat:local", Data: map[string]any{"approval": "ap-started"}}))

	_, n := rt.since(0)
	if a := approve("ap-fresh", "n1"); a.err != nil || !a.ok || !a.fresh || a.started || !slices.Equal(a.runs, []bool{true}) {
		t.Fatalf("a fresh approval: %+v, want applied, fresh, not started, speculated once", a)
	}
	trips, _ := rt.since(n)
	if len(trips) != 1 || !carries(trips[0], "BEGIN") || !carries(trips[0], "UPDATE approvals") || !carries(trips[0], "COMMIT") {
		t.Fatalf("a fresh approval went in %d round trips (%q), want one: BEGIN, the decision, …, COMMIT", len(trips), trips)
	}
	if status("ap-fresh") != "approved" || nonces("ap-fresh") != 1 {
		t.Fatalf("a fresh approval: %s with %d nonces, want approved with 1", status("ap-fresh"), nonces("ap-fresh"))
	}

	if a := approve("ap-replay", "n1"); !errors.Is(a.err, errReplay) || !a.ok || a.fresh || !slices.Equal(a.runs, []bool{true, false}) {
		t.Fatalf("a replayed nonce: %+v, want applied, not fresh (the op fails), after a lost speculation", a)
	}
	if status("ap-replay") != "pending" || nonces("ap-replay") != 0 {
		t.Fatalf("a replayed nonce: %s with %d nonces, want pending with none", status("ap-replay"), nonces("ap-replay"))
	}

	if a := approve("ap-fresh", "n2"); a.err != nil || a.ok || a.fresh || !slices.Equal(a.runs, []bool{true, false}) {
		t.Fatalf("already decided: %+v, want not applied, after a lost speculation", a)
	}
	if nonces("ap-fresh") != 1 || queryInt(t, ctx, s, `SELECT count(*) FROM audit_log WHERE kind = 'test.decided' AND data->>'approval' = 'ap-fresh'`) != 2 {
		t.Fatal("already decided: a nonce or the op's entry is missing or doubled")
	}

	if a := approve("ap-started", "n3"); a.err != nil || !a.ok || !a.fresh || !a.started || !slices.Equal(a.runs, []bool{true, false}) {
		t.Fatalf("a start recorded: %+v, want applied, fresh, started, after a lost speculation", a)
	}
	if _, err := s.VerifyAudit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSpeculationFenced: a speculating op in a transaction the server
// fails for another reason — here a turn no longer this instance's to
// finish (finished already, as after another instance adopted it) — gets
// that failure, as without speculation: ErrFenced, nothing committed,
// whether its guard held (the fence fails the transaction after it) or
// not (the run without speculation meets the fence).
func TestSpeculationFenced(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	insertApproval(t, ctx, s, "fence-a", true) // its execution queued
	var seq int64
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		var err error
		seq, _, err = tx.InsertTurn(ctx, testTurn("webchat", "fence-spec"))
		return nil, err
	})
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		tx.QueueFinishTurn(seq, core.TurnDone, "")
		return nil, nil
	})
	for _, from := range []core.ExecStatus{core.ExecQueued, core.ExecExecuted} { // the guard holds, misses
		var runs []bool
		err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			runs = append(runs, tx.Speculate())
			if tx.Speculate() {
				if err := tx.QueueGuardedTransitionExecution("fence-a", from, core.ExecRunning, core.ExecUpdate{Started: true}); err != nil {
					return nil, err
				}
			} else if err := tx.QueueTransitionExecution("fence-a", from, core.ExecRunning, core.ExecUpdate{Started: true}, func(bool) {}); err != nil {
				return nil, err
			}
			tx.QueueFinishTurn(seq, core.TurnDone, "")
			return []audit.Entry{{Kind: "test.fenced", Actor: "silas"}}, nil
		})
		wantRuns := []bool{true}
		if from != core.ExecQueued {
			wantRuns = []bool{true, false}
		}
		if !errors.Is(err, core.ErrFenced) || !slices.Equal(runs, wantRuns) {
			t.Fatalf("from %s: Do = %v after runs %v; want core.ErrFenced after %v", from, err, runs, wantRuns)
		}
		var status string
		mustScan(t, s.Pool().QueryRow(ctx, `SELECT status FROM executions WHERE approval_id = 'fence-a'`), &status)
		if status != "queued" || queryInt(t, ctx, s, `SELECT count(*) FROM audit_log WHERE kind = 'test.fenced'`) != 0 {
			t.Fatalf("from %s: a fenced transaction committed (execution %s)", from, status)
		}
	}
}

// TestGuardedTransitionLocksApprovalFirst: the guarded compare-and-swap
// keeps the transition's lock order (TestTransitionLocksApprovalFirst):
// the approval's row first, then the execution's — a tap holding the
// approval is waited for while the execution's row is still free.
func TestGuardedTransitionLocksApprovalFirst(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	insertApproval(t, ctx, s, "ap-guarded", true)
	tap, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Rollback(context.Background())
	if _, err := tap.Exec(ctx, `SELECT FROM approvals WHERE id = 'ap-guarded' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan []bool, 1)
	errs := make(chan error, 1)
	go func() {
		var runs []bool
		errs <- s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			runs = append(runs, tx.Speculate())
			if !tx.Speculate() {
				return nil, nil
			}
			return nil, tx.QueueGuardedTransitionExecution("ap-guarded", core.ExecQueued, core.ExecRunning, core.ExecUpdate{Started: true})
		})
		done <- runs
	}()
	deadline := time.Now().Add(10 * time.Second)
	for queryInt(t, ctx, s, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 0 {
		select {
		case err := <-errs:
			t.Fatalf("the guarded transition did not wait for the approval held by a tap (%v)", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the guarded transition neither waited for the approval's lock nor finished")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := tap.Exec(ctx, `SELECT FROM executions WHERE approval_id = 'ap-guarded' FOR SHARE NOWAIT`); err != nil {
		t.Fatalf("the waiting guarded transition had locked the execution's row already: %v", err)
	}
	if err := tap.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if runs := <-done; !slices.Equal(runs, []bool{true}) {
		t.Fatalf("runs %v, want one, speculated (the guard held)", runs)
	}
	var status string
	mustScan(t, s.Pool().QueryRow(ctx, `SELECT status FROM executions WHERE approval_id = 'ap-guarded'`), &status)
	if status != "running" {
		t.Fatalf("execution %s, want running", status)
	}
}
