package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

func TestInsertTurnIdempotent(t *testing.T) {
	t.Parallel()
	s, ctx, dsn := setupDSN(t, Options{})
	insert := func(st *Store, turn core.Turn) (int64, bool, error) {
		var seq int64
		var dup bool
		err := st.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var err error
			seq, dup, err = tx.InsertTurn(ctx, turn)
			if err != nil || dup {
				return nil, err
			}
			return []audit.Entry{{Kind: "turn.received", Conversation: string(turn.Conversation), Data: map[string]any{"seq": seq}}}, nil
		})
		return seq, dup, err
	}

	edited := testTurn("webchat", "e1")
	edited.Text = "edited on redelivery"
	steps := []struct {
		name    string
		turn    core.Turn
		wantDup bool
		sameAs  string // step whose seq this one must have
	}{
		{"first delivery", testTurn("webchat", "e1"), false, ""},
		{"redelivery", testTurn("webchat", "e1"), true, "first delivery"},
		{"redelivery with another body", edited, true, "first delivery"},
		{"same event id, other channel", testTurn("telegram", "e1"), false, ""},
		{"other event id", testTurn("webchat", "e2"), false, ""},
	}
	seqs := map[string]int64{}
	for _, st := range steps {
		seq, dup, err := insert(s, st.turn)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if dup != st.wantDup {
			t.Errorf("%s: dup = %v, want %v", st.name, dup, st.wantDup)
		}
		if st.sameAs != "" && seq != seqs[st.sameAs] {
			t.Errorf("%s: seq %d, want %d (%s)", st.name, seq, seqs[st.sameAs], st.sameAs)
		}
		if st.sameAs == "" && slices.Contains(slices.Collect(maps.Values(seqs)), seq) {
			t.Errorf("%s: seq %d reused", st.name, seq)
		}
		seqs[st.name] = seq
	}
	pending, err := s.PendingTurns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 3 || pending[0].Turn.Text != "hello e1" || pending[0].Turn.Evidence.Method != "test" {
		t.Fatalf("pending turns after redeliveries: %+v", pending)
	}

	for _, nstores := range []int{1, 2} {
		t.Run(fmt.Sprintf("concurrent, %d stores", nstores), func(t *testing.T) {
			sts := stores(t, s, dsn, nstores)
			// Each goroutine delivers the same events in its own order, so
			// batches in the two stores can lock them in opposite orders.
			const goroutines, events = 20, 10
			ch := fmt.Sprintf("race%d", nstores)
			var mu sync.Mutex
			seqOf := map[string]map[int64]bool{}
			firsts := map[string]int{}
			race(goroutines, func(g int) {
				for k := range events {
					ev := fmt.Sprintf("ev%d", (k*(g+1)+g)%events)
					seq, dup, err := insert(sts[g%nstores], testTurn(ch, ev))
					if err != nil {
						t.Errorf("goroutine %d %s: %v", g, ev, err)
						continue
					}
					mu.Lock()
					if seqOf[ev] == nil {
						seqOf[ev] = map[int64]bool{}
					}
					seqOf[ev][seq] = true
					if !dup {
						firsts[ev]++
					}
					mu.Unlock()
				}
			})
			if n := queryInt(t, ctx, s, `SELECT count(*) FROM turns WHERE channel = $1`, ch); n != int64(len(seqOf)) {
				t.Errorf("%d rows for %d distinct events", n, len(seqOf))
			}
			for ev, seqs := range seqOf {
				if len(seqs) != 1 || firsts[ev] != 1 {
					t.Errorf("%s: seqs %v, %d non-duplicate inserts; want one seq, one insert", ev, seqs, firsts[ev])
				}
			}
			// One audit entry per stored turn.
			if n := queryInt(t, ctx, s, `SELECT count(*) FROM audit_log a JOIN turns t ON (a.data->>'seq')::bigint = t.seq WHERE t.channel = $1`, ch); n != int64(len(seqOf)) {
				t.Errorf("%d audit entries for %d turns", n, len(seqOf))
			}
			if _, err := s.VerifyAudit(ctx); err != nil {
				t.Errorf("VerifyAudit: %v", err)
			}
		})
	}
}

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

// TestInlineTurnStoredOnce: a turn stored and processed in one transaction
// (InsertInlineTurn, a tap answered inline) is written once, done — its
// finish in the same transaction writes no second row version (the first
// tuple of a fresh table stays the live one: ctid (0,1)) — while a finish
// as failed is still written, and an op that fails leaves nothing.
func TestInlineTurnStoredOnce(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	inline := func(ev string, status core.TurnStatus, fail bool) (int64, error) {
		var seq int64
		err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var dup bool
			var err error
			seq, dup, err = tx.InsertInlineTurn(ctx, testTurn("webchat", ev))
			if err != nil || dup {
				return nil, err
			}
			tx.QueueFinishTurn(seq, status, "it broke")
			if fail {
				return nil, fmt.Errorf("processing failed")
			}
			return []audit.Entry{{Kind: "turn.received", Conversation: "webchat:chat1", Data: map[string]any{"seq": seq}}}, nil
		})
		return seq, err
	}
	seq, err := inline("done-1", core.TurnDone, false)
	if err != nil {
		t.Fatal(err)
	}
	var status, errText string
	var first, processed bool
	mustScan(t, s.Pool().QueryRow(ctx, `SELECT status, COALESCE(error, ''), ctid = '(0,1)'::tid, processed_at IS NOT NULL FROM turns WHERE seq = $1`, seq),
		&status, &errText, &first, &processed)
	if status != "done" || errText != "" || !processed {
		t.Errorf("inline turn: status %q, error %q, processed %v; want done, no error, processed", status, errText, processed)
	}
	if !first {
		t.Error("the inline turn's row was written twice (its finish in the same transaction updated it)")
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM turns WHERE status = 'pending'`); n != 0 {
		t.Errorf("%d pending turns, want 0", n)
	}

	seq, err = inline("failed-1", core.TurnFailed, false)
	if err != nil {
		t.Fatal(err)
	}
	mustScan(t, s.Pool().QueryRow(ctx, `SELECT status, COALESCE(error, '') FROM turns WHERE seq = $1`, seq), &status, &errText)
	if status != "failed" || errText != "it broke" {
		t.Errorf("inline turn finished failed: status %q, error %q; want failed, %q", status, errText, "it broke")
	}

	if _, err := inline("rolled-back", core.TurnDone, true); err == nil {
		t.Fatal("the failing op committed")
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM turns WHERE event_id = 'rolled-back'`); n != 0 {
		t.Errorf("a failed op's inline turn was stored (%d rows)", n)
	}
	// A redelivery of a stored event stores nothing and is reported as one.
	err = s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		_, dup, err := tx.InsertInlineTurn(ctx, testTurn("webchat", "done-1"))
		if err == nil && !dup {
			err = fmt.Errorf("a redelivered inline turn was not a duplicate")
		}
		return nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
}
