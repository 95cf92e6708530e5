package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/riverqueue/river"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

func flowRunRow(id string) core.FlowRun {
	return core.FlowRun{ID: id, Flow: "f", Version: "1", FlowHash: "h", Document: []byte("d"), File: "f.yaml", Channel: "web",
		Conversation: "web:c", Requester: "web:me", Origin: json.RawMessage(`{}`), Status: "running", State: json.RawMessage(`{}`),
		ProgressCard: "flow-" + id}
}

// The run's compare-and-swap travels queued with the transition rows: a
// stale seq fails the transaction with ErrFlowRunChanged and nothing the
// op queued is committed; the current seq commits both.
func TestFlowRunQueuedCompareAndSwap(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	row := flowRunRow("r1")
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		tx.QueueInsertFlowRun(row)
		return nil, nil
	})
	advance := func(prev, next int64) error { return stepRun(ctx, s, row, prev, next, false) }
	if err := advance(0, 1); err != nil {
		t.Fatal(err)
	}
	// A writer that read the run at seq 0 lost the race.
	err := advance(0, 2)
	if !errors.Is(err, ErrFlowRunChanged) {
		t.Fatalf("stale compare-and-swap: err = %v, want ErrFlowRunChanged", err)
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM flow_transitions WHERE run_id = 'r1'`); n != 1 {
		t.Fatalf("%d transitions stored, want 1 (the lost one rolled back)", n)
	}
	if n := queryInt(t, ctx, s, `SELECT seq FROM flow_runs WHERE id = 'r1'`); n != 1 {
		t.Fatalf("seq = %d, want 1", n)
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM audit_log WHERE kind = $1`, string(audit.KindFlowNodeFinished)); n != 1 {
		t.Fatalf("%d audit entries, want 1", n)
	}
}

// stepRun stores transition next of row, compare-and-swapped from prev,
// with an audit entry and (job) a step job, as a step does.
func stepRun(ctx context.Context, s *Store, row core.FlowRun, prev, next int64, job bool) error {
	return s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		tx.QueueFlowTransition(row.ID, next, json.RawMessage(`{}`), json.RawMessage(`[]`), "")
		r := row
		r.Seq = next
		tx.QueueUpdateFlowRun(r, prev)
		if job {
			tx.QueueFlowStep(row.ID)
		}
		return []audit.Entry{{Kind: audit.KindFlowNodeFinished, Actor: "silas", Data: map[string]any{"seq": next}}}, nil
	})
}

// FlowRunOpen reads the run with its running attempts only.
func TestFlowRunOpen(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	if _, _, err := s.FlowRunOpen(ctx, "none"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("missing run: err = %v", err)
	}
	row := flowRunRow("r2")
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		tx.QueueInsertFlowRun(row)
		tx.QueueFlowAttempt(core.FlowAttempt{Run: row.ID, Node: "a", Attempt: 1, Type: "control.wait"})
		tx.QueueFlowAttempt(core.FlowAttempt{Run: row.ID, Node: "b", Attempt: 1, Type: "control.wait"})
		tx.QueueFlowAttemptEnd(core.FlowAttempt{Run: row.ID, Node: "a", Attempt: 1, Status: "succeeded", Output: json.RawMessage(`{"x":1}`)})
		return nil, nil
	})
	got, open, err := s.FlowRunOpen(ctx, row.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != row.ID || got.ProgressCard != row.ProgressCard {
		t.Fatalf("run = %+v", got)
	}
	if len(open) != 1 || open[0].Node != "b" || open[0].Status != "running" {
		t.Fatalf("open attempts = %+v, want b only", open)
	}
}

// FlowRunOpenAt leaves out state, origin and document only while the run
// is still at the seq the caller holds: once another writer moved it on,
// the row comes back whole.
func TestFlowRunOpenAt(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	row := flowRunRow("r3")
	row.State = json.RawMessage(`{"seq":0}`)
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		tx.QueueInsertFlowRun(row)
		return nil, nil
	})
	whole := func(got core.FlowRun, state string) {
		t.Helper()
		if string(got.State) != state || string(got.Document) != "d" || string(got.Origin) != "{}" {
			t.Fatalf("whole row: state %q document %q origin %q", got.State, got.Document, got.Origin)
		}
	}
	for _, have := range []int64{-1, 1} {
		got, _, err := s.FlowRunOpenAt(ctx, row.ID, have)
		if err != nil {
			t.Fatal(err)
		}
		whole(got, `{"seq": 0}`)
	}
	got, _, err := s.FlowRunOpenAt(ctx, row.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 0 || got.State != nil || got.Document != nil || got.Origin != nil || got.ID != row.ID || got.FlowHash != "h" || got.Status != "running" {
		t.Fatalf("at the held seq: %+v, want the row without state, document and origin", got)
	}
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		r := row
		r.Seq, r.State = 1, json.RawMessage(`{"seq":1}`)
		tx.QueueUpdateFlowRun(r, 0)
		return nil, nil
	})
	got, _, err = s.FlowRunOpenAt(ctx, row.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 1 {
		t.Fatalf("seq %d, want 1", got.Seq)
	}
	whole(got, `{"seq": 1}`)
	if _, _, err := s.FlowRunOpenAt(ctx, "none", 0); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("missing run: err = %v", err)
	}
}

// A step's River job rides in one round trip with the statements queued
// before it (insertJobsThen): a stale compare-and-swap among them still
// fails the transaction with ErrFlowRunChanged, and the job rolls back
// with it.
func TestFlowRunCompareAndSwapWithJob(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	row := flowRunRow("r4")
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		tx.QueueInsertFlowRun(row)
		return nil, nil
	})
	advance := func(prev, next int64) error { return stepRun(ctx, s, row, prev, next, true) }
	if err := advance(0, 1); err != nil {
		t.Fatal(err)
	}
	if err := advance(0, 2); !errors.Is(err, ErrFlowRunChanged) {
		t.Fatalf("stale compare-and-swap with a job: err = %v, want ErrFlowRunChanged", err)
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM river_job WHERE kind = 'silas_flow_step'`); n != 1 {
		t.Fatalf("%d step jobs, want 1 (the lost transition's rolled back)", n)
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM audit_log`); n != 1 {
		t.Fatalf("%d audit entries, want 1", n)
	}
}

// sharedJob is a unique River job every op below inserts: concurrent
// transactions inserting it wait for each other (its unique key).
type sharedJob struct{}

func (sharedJob) Kind() string { return "test_shared" }

// Two processes (stores) step runs at once, each step's River jobs — one
// of them unique and shared, so inserts wait for each other — riding in
// the round trip that also takes the audit chain lock (insertJobsThen),
// while plain audit appends run beside them: every op commits (no
// deadlock between the chain lock and the jobs' rows), every job and
// transition is stored once, and the chain verifies.
func TestFlowStepsTwoStoresConcurrentAppenders(t *testing.T) {
	t.Parallel()
	s, ctx, dsn := setupDSN(t, Options{})
	two := stores(t, s, dsn, 2)
	const goroutines, steps = 8, 25
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		for g := range goroutines {
			tx.QueueInsertFlowRun(flowRunRow(fmt.Sprintf("g%d", g)))
		}
		return nil, nil
	})
	unique := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
	race(2*goroutines, func(g int) {
		st := two[g%2]
		for i := range steps {
			var err error
			if g >= goroutines {
				// A plain appender: entries only.
				err = st.Do(ctx, entriesOp(audit.Entry{Kind: "test.append", Actor: "silas", Data: map[string]any{"g": g, "i": i}}))
			} else {
				run := fmt.Sprintf("g%d", g)
				err = st.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
					r := flowRunRow(run)
					r.Seq = int64(i + 1)
					tx.QueueFlowTransition(run, r.Seq, json.RawMessage(`{}`), json.RawMessage(`[]`), "")
					tx.QueueUpdateFlowRun(r, int64(i))
					tx.QueueFlowStep(run)
					tx.QueueJob(sharedJob{}, unique)
					return []audit.Entry{{Kind: audit.KindFlowNodeFinished, Actor: "silas", Data: map[string]any{"run": run, "seq": r.Seq}}}, nil
				})
			}
			if err != nil {
				t.Errorf("goroutine %d op %d: %v", g, i, err)
				return
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	for _, c := range []struct {
		sql  string
		want int64
	}{
		{`SELECT count(*) FROM flow_transitions`, goroutines * steps},
		{`SELECT count(*) FROM river_job WHERE kind = 'silas_flow_step'`, goroutines * steps},
		{`SELECT count(*) FROM river_job WHERE kind = 'test_shared'`, 1},
		{`SELECT count(*) FROM audit_log`, 2 * goroutines * steps},
		{`SELECT count(*) FROM flow_runs WHERE seq = ` + fmt.Sprint(steps), goroutines},
	} {
		if n := queryInt(t, ctx, s, c.sql); n != c.want {
			t.Errorf("%s = %d, want %d", c.sql, n, c.want)
		}
	}
	for _, st := range two {
		if n, err := st.VerifyAudit(ctx); err != nil || n != 2*goroutines*steps {
			t.Errorf("chain: %d rows checked, %v", n, err)
		}
	}
}
