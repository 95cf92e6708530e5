package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

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
	advance := func(prev, next int64) error {
		return s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			tx.QueueFlowTransition(row.ID, next, json.RawMessage(`{}`), json.RawMessage(`[]`), "")
			r := row
			r.Seq = next
			tx.QueueUpdateFlowRun(r, prev)
			return []audit.Entry{{Kind: audit.KindFlowNodeFinished, Actor: "silas", Data: map[string]any{"seq": next}}}, nil
		})
	}
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
