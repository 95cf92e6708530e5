package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// TestQueueTurnBatch: turns queued by many ops of one batch go in one
// statement; each op learns its own seq; a redelivery (stored before) and a
// repeat within the batch are duplicates with the stored seq; Finally sees
// the results and its entries are chained.
func TestQueueTurnBatch(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	var before int64
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		return nil, tx.QueueTurn(testTurn("q", "old"), "pending", func(seq int64, dup bool) {
			if dup {
				t.Error("first store of old is a duplicate")
			}
			before = seq
		})
	})
	type result struct {
		seq int64
		dup bool
	}
	events := []string{"a", "old", "b", "a", "c"}
	results := make([]result, len(events))
	// One Do holding every turn, so they share a batch for certain.
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		for i, ev := range events {
			status := core.TurnPending
			if ev == "c" {
				status = core.TurnDone
			}
			if err := tx.QueueTurn(testTurn("q", ev), status, func(seq int64, dup bool) { results[i] = result{seq, dup} }); err != nil {
				return nil, err
			}
		}
		tx.Finally(func() ([]audit.Entry, error) {
			var out []audit.Entry
			for i, r := range results {
				if r.seq == 0 {
					return nil, fmt.Errorf("turn %d has no seq in Finally", i)
				}
				if !r.dup {
					out = append(out, audit.Entry{Kind: "turn.received", Actor: "q:user", Conversation: "q:chat", Data: map[string]any{"seq": r.seq}})
				}
			}
			return out, nil
		})
		return nil, nil
	})
	want := []bool{false, true, false, true, false}
	for i, r := range results {
		if r.dup != want[i] {
			t.Errorf("event %s: dup = %v, want %v", events[i], r.dup, want[i])
		}
	}
	if results[1].seq != before {
		t.Errorf("redelivered old: seq %d, want the stored %d", results[1].seq, before)
	}
	if results[3].seq != results[0].seq {
		t.Errorf("repeat of a: seq %d, want %d", results[3].seq, results[0].seq)
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM turns WHERE channel = 'q'`); n != 4 {
		t.Errorf("turns stored = %d, want 4", n)
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM turns WHERE channel = 'q' AND status = 'done' AND processed_at IS NOT NULL`); n != 1 {
		t.Errorf("turns stored done = %d, want 1", n)
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM audit_log WHERE kind = 'turn.received'`); n != 3 {
		t.Errorf("audit entries from Finally = %d, want 3", n)
	}
	if _, err := s.VerifyAudit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestQueueTurnConcurrentRedelivery: the same events stored by concurrent
// callers (separate batches and writer loops): each is stored once, exactly
// one caller per event is told it stored it, and every caller gets the seq.
func TestQueueTurnConcurrentRedelivery(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	const events, callers = 40, 6
	var mu sync.Mutex
	stored := map[string]int{}
	seqs := map[string]map[int64]bool{}
	race(callers, func(g int) {
		for i := range events {
			ev := fmt.Sprintf("e%d", i)
			var seq int64
			var dup bool
			err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
				return nil, tx.QueueTurn(testTurn("r", ev), "pending", func(sq int64, d bool) { seq, dup = sq, d })
			})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			if !dup {
				stored[ev]++
			}
			if seqs[ev] == nil {
				seqs[ev] = map[int64]bool{}
			}
			seqs[ev][seq] = true
			mu.Unlock()
		}
	})
	for i := range events {
		ev := fmt.Sprintf("e%d", i)
		if stored[ev] != 1 || len(seqs[ev]) != 1 {
			t.Errorf("%s: stored by %d callers, seqs %v; want 1 and one seq", ev, stored[ev], seqs[ev])
		}
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM turns WHERE channel = 'r'`); n != events {
		t.Errorf("turns = %d, want %d", n, events)
	}
}

// TestEnqueueThenIDsInOrder: jobs enqueued by several ops of one batch get
// ascending ids in the order they were queued (delivery order), and each
// caller gets its own job's id.
func TestEnqueueThenIDsInOrder(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	ids := make([]int64, 10)
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		for i := range ids {
			m := core.OutMessage{Conversation: "x:chat", Text: fmt.Sprintf("m%d", i)}
			if err := tx.QueueMessageThen("x", core.OpSend, fmt.Sprintf("k%d", i), m, func(id int64) { ids[i] = id }); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	for i, id := range ids {
		var key, text string
		if err := s.Pool().QueryRow(ctx, `SELECT message_key, payload->>'text' FROM outbox WHERE id = $1`, id).Scan(&key, &text); err != nil {
			t.Fatalf("job %d (id %d): %v", i, id, err)
		}
		if key != fmt.Sprintf("k%d", i) || text != fmt.Sprintf("m%d", i) {
			t.Errorf("id %d belongs to %s, want k%d", id, key, i)
		}
		if i > 0 && id <= ids[i-1] {
			t.Errorf("ids not ascending in queue order: %v", ids)
		}
	}
}

// TestDoBackground: background operations commit (alone, after the wait,
// or together with ordinary ones), and Close finishes queued ones.
func TestDoBackground(t *testing.T) {
	t.Parallel()
	s, ctx, _ := setupDSN(t, Options{BackgroundDelay: 20 * time.Millisecond})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := entriesOp(numberedEntry(i))
			var err error
			if i%2 == 0 {
				err = s.DoBackground(ctx, op)
			} else {
				err = s.Do(ctx, op)
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM audit_log`); n != 20 {
		t.Fatalf("audit rows = %d, want 20", n)
	}
	if _, err := s.VerifyAudit(ctx); err != nil {
		t.Fatal(err)
	}
	// One alone still commits once the wait is over.
	if err := s.DoBackground(ctx, entriesOp(numberedEntry(20))); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM audit_log`); n != 21 {
		t.Fatalf("audit rows = %d, want 21", n)
	}
}

// A row that references an approval may be queued only once the approval is
// in the transaction's view; otherwise the store says so where the mistake
// is made, instead of a foreign key failing the whole batch at commit.
func TestQueueOrderRule(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	insertApproval(t, ctx, s, "stored-before", false)
	tests := []struct {
		name    string
		op      func(tx *Tx) error
		wantErr bool
	}{
		{"execution before its approval", func(tx *Tx) error {
			return tx.QueueExecution("stored-before")
		}, true},
		{"output before its approval", func(tx *Tx) error {
			return tx.QueueOutput("out-stored-before", "stored-before", "x")
		}, true},
		{"execution of an approval read (locked) in this transaction", func(tx *Tx) error {
			if _, err := tx.GetApproval(ctx, "stored-before"); err != nil {
				return err
			}
			return tx.QueueExecution("stored-before")
		}, false},
		{"execution and output of an approval queued in this transaction", func(tx *Tx) error {
			tx.QueueApproval(testApproval("queued-here", tx.Now()))
			if err := tx.QueueExecution("queued-here"); err != nil {
				return err
			}
			return tx.QueueOutput("out-queued-here", "queued-here", "x")
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) { return nil, tt.op(tx) })
			if tt.wantErr != errors.Is(err, ErrOrder) {
				t.Fatalf("Do = %v, want ErrOrder: %v", err, tt.wantErr)
			}
			if !tt.wantErr && err != nil {
				t.Fatal(err)
			}
		})
	}
	ex, err := s.GetExecution(ctx, "queued-here")
	if err != nil || ex.Status != core.ExecQueued {
		t.Fatalf("execution queued with its approval: %+v, %v", ex, err)
	}
}
