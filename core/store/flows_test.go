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
