package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/audit"
)

func TestDoBatchIsolation(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	modes := []struct {
		name  string
		bad   func(ctx context.Context, tx *Tx) ([]audit.Entry, error)
		check func(t *testing.T, err error)
	}{
		{
			name: "op returns an error",
			bad: func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
				if _, _, err := tx.InsertTurn(ctx, testTurn("iso", "bad")); err != nil {
					return nil, err
				}
				return []audit.Entry{{Kind: "bad"}}, errBoom
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, errBoom) {
					t.Errorf("bad op: Do = %v, want %v", err, errBoom)
				}
			},
		},
		{
			name: "op hits a constraint violation",
			bad: func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
				if _, _, err := tx.InsertTurn(ctx, testTurn("iso", "bad")); err != nil {
					return nil, err
				}
				a := testApproval("bad", tx.Now())
				a.Risk = cards.Risk("bogus")
				tx.QueueApproval(a)
				return []audit.Entry{{Kind: "bad"}}, nil
			},
			check: func(t *testing.T, err error) {
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != "23514" {
					t.Errorf("bad op: Do = %v, want a check_violation (23514)", err)
				}
			},
		},
		{
			name: "op swallows an SQL error",
			bad: func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
				if _, _, err := tx.InsertTurn(ctx, testTurn("iso", "bad")); err != nil {
					return nil, err
				}
				_, _ = tx.exec(ctx, "SELECT 1/0") // aborts the transaction
				return []audit.Entry{{Kind: "bad"}}, nil
			},
			check: func(t *testing.T, err error) {
				if err == nil {
					t.Errorf("bad op: Do succeeded in an aborted transaction")
				}
			},
		},
		{
			name: "op's audit data cannot be encoded",
			bad: func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
				if _, _, err := tx.InsertTurn(ctx, testTurn("iso", "bad")); err != nil {
					return nil, err
				}
				return []audit.Entry{{Kind: "bad", Data: map[string]any{"x": math.Inf(1)}}}, nil
			},
			check: func(t *testing.T, err error) {
				var ue *json.UnsupportedValueError
				if !errors.As(err, &ue) {
					t.Errorf("bad op: Do = %v, want a *json.UnsupportedValueError", err)
				}
			},
		},
		{
			name: "PostgreSQL rejects the op's audit entry",
			bad: func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
				if _, _, err := tx.InsertTurn(ctx, testTurn("iso", "bad")); err != nil {
					return nil, err
				}
				return []audit.Entry{{Kind: "bad\x00kind"}}, nil
			},
			check: func(t *testing.T, err error) {
				if err == nil {
					t.Errorf("bad op: Do succeeded with a NUL byte in kind")
				}
			},
		},
	}
	const good = 6
	for _, mode := range modes {
		for _, badAt := range []int{0, good / 2, good} {
			t.Run(fmt.Sprintf("%s/position %d", mode.name, badAt), func(t *testing.T) {
				t.Parallel()
				// One writer loop, so holding it holds every op.
				s, ctx, _ := setupDSN(t, Options{Writers: 1})

				// Hold the writer inside a transaction, queue the ops in a
				// known order, then let them all go as one batch.
				release := holdWriter(t, ctx, s)

				type attempt struct{ txid int64 }
				attempts := make([][]attempt, good+1)
				var mu sync.Mutex
				record := func(ctx context.Context, tx *Tx, j int) {
					var id int64
					_ = tx.queryRow(ctx, "SELECT txid_current()").Scan(&id) // 0 in an aborted transaction
					mu.Lock()
					attempts[j] = append(attempts[j], attempt{id})
					mu.Unlock()
				}
				ops := make([]Op, 0, good+1)
				names := make([]string, 0, good+1)
				for j := range good + 1 {
					if j == badAt {
						ops = append(ops, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
							record(ctx, tx, j)
							return mode.bad(ctx, tx)
						})
						names = append(names, "bad")
						continue
					}
					ev := fmt.Sprintf("good%d", j)
					names = append(names, ev)
					ops = append(ops, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
						record(ctx, tx, j)
						if _, dup, err := tx.InsertTurn(ctx, testTurn("iso", ev)); err != nil {
							return nil, err
						} else if dup {
							return nil, fmt.Errorf("%s: duplicate turn", ev)
						}
						return []audit.Entry{{Kind: "good", Data: map[string]any{"op": ev}}}, nil
					})
				}
				results := make([]chan error, len(ops))
				for j, op := range ops {
					results[j] = make(chan error, 1)
					go func() { results[j] <- s.Do(ctx, op) }()
					waitQueued(t, s, j+1)
				}
				release()

				for j, ch := range results {
					err := <-ch
					if j == badAt {
						mode.check(t, err)
						continue
					}
					if err != nil {
						t.Errorf("good op %d failed along with the bad one: %v", j, err)
					}
				}

				// The batch really was shared: every op that ran before the
				// bad one ran in one transaction with it.
				for j, as := range attempts {
					if len(as) == 0 {
						t.Fatalf("op %d never ran", j)
					}
				}
				batchTx := attempts[0][0].txid
				for j := 0; j <= badAt; j++ {
					if attempts[j][0].txid != batchTx {
						t.Errorf("op %d first ran in transaction %d, op 0 in %d: not one batch", j, attempts[j][0].txid, batchTx)
					}
				}
				// Every good op was finally committed alone.
				seen := map[int64]int{batchTx: -1}
				for j, as := range attempts {
					if j == badAt {
						continue
					}
					last := as[len(as)-1].txid
					if other, dup := seen[last]; dup {
						t.Errorf("op %d committed in transaction %d, shared with op %d", j, last, other)
					}
					seen[last] = j
					if j < badAt && len(as) != 2 {
						t.Errorf("op %d before the bad op ran %d times, want 2 (batch, then alone)", j, len(as))
					}
				}

				// State and audit: the good ops', once each; none of the bad op's.
				for j, name := range names {
					turns := queryInt(t, ctx, s, `SELECT count(*) FROM turns WHERE channel = 'iso' AND event_id = $1`, name)
					entries := queryInt(t, ctx, s, `SELECT count(*) FROM audit_log WHERE data->>'op' = $1`, name)
					want := int64(1)
					if j == badAt {
						want = 0
					}
					if turns != want || (j != badAt && entries != want) {
						t.Errorf("op %d (%s): %d turns, %d audit entries; want %d each", j, name, turns, entries, want)
					}
				}
				if n := queryInt(t, ctx, s, `SELECT count(*) FROM audit_log WHERE kind LIKE 'bad%'`); n != 0 {
					t.Errorf("%d audit entries of the failed op were appended", n)
				}
				if n, err := s.VerifyAudit(ctx); err != nil || n != good {
					t.Errorf("VerifyAudit = %d, %v; want %d, nil", n, err, good)
				}
			})
		}
	}
}

func TestDoAfterClose(t *testing.T) {
	t.Parallel()
	s, ctx, _ := setupDSN(t, Options{Writers: 1})
	// Ops queued when Close is called still commit; Do after Close fails.
	const queued = 50
	release := holdWriter(t, ctx, s)
	errs := make(chan error, queued)
	for i := range queued {
		go func() { errs <- s.Do(ctx, entriesOp(numberedEntry(i))) }()
	}
	waitQueued(t, s, queued)
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	for stopping := false; !stopping; {
		select {
		case <-s.w.stop:
			stopping = true
		case <-time.After(time.Millisecond):
		}
	}
	if err := s.Do(ctx, entriesOp(numberedEntry(0))); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close = %v, want ErrClosed", err)
	}
	release()
	timeout := time.After(30 * time.Second)
	for range queued {
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("op queued before Close: %v", err)
			}
		case <-timeout:
			t.Fatal("an op queued before Close never returned")
		}
	}
	select {
	case <-closed:
	case <-timeout:
		t.Fatal("Close did not return")
	}
	st := openStore(t, pgDSN(t, ctx, s), Options{})
	if n, err := st.VerifyAudit(ctx); err != nil || n != queued {
		t.Fatalf("VerifyAudit = %d, %v; want %d, nil", n, err, queued)
	}
}

// holdWriter parks s's writer inside a transaction until the returned
// function is called, so ops submitted meanwhile queue up in a known order.
func holdWriter(t *testing.T, ctx context.Context, s *Store) (release func()) {
	t.Helper()
	hold, started := make(chan struct{}), make(chan struct{})
	var once sync.Once
	blocked := make(chan error, 1)
	go func() {
		blocked <- s.Do(ctx, func(context.Context, *Tx) ([]audit.Entry, error) {
			once.Do(func() { close(started) })
			<-hold
			return nil, nil
		})
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the writer never ran the blocking op")
	}
	return func() {
		t.Helper()
		close(hold)
		if err := <-blocked; err != nil {
			t.Fatalf("blocking op: %v", err)
		}
	}
}

// waitQueued waits until n requests wait in the (held) writer's queue.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(s.w.reqs) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d ops queued after 30s", len(s.w.reqs), n)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// pgDSN returns a DSN for the database s is connected to.
func pgDSN(t *testing.T, ctx context.Context, s *Store) string {
	t.Helper()
	return s.Pool().Config().ConnString()
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

// DoLazy: the op returns at once and waits for company — it commits in the
// transaction of the next Do (one write transaction for both), and a
// DoBackground ends its wait within BackgroundDelay. Alone, it commits
// after LazyDelay.
func TestDoLazyRidesAlong(t *testing.T) {
	t.Parallel()
	s, ctx, _ := setupDSN(t, Options{LazyDelay: time.Hour})
	entry := func(actor string) Op {
		return func(context.Context, *Tx) ([]audit.Entry, error) {
			return []audit.Entry{{Kind: "test.lazy", Actor: actor}}, nil
		}
	}
	xmin := func(actor string) string {
		t.Helper()
		var x string
		if err := s.Pool().QueryRow(ctx, `SELECT coalesce(max(xmin::text), '') FROM audit_log WHERE actor = $1`, actor).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	done := make(chan error, 3)
	s.DoLazy(entry("lazy1"), func(err error) { done <- err })
	time.Sleep(30 * time.Millisecond)
	if x := xmin("lazy1"); x != "" {
		t.Fatalf("the lazy op committed alone (xmin %s); want it waiting for company", x)
	}
	if err := s.Do(ctx, entry("ordinary")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a, b := xmin("lazy1"), xmin("ordinary"); a == "" || a != b {
		t.Fatalf("lazy op in transaction %q, the next Do in %q; want the same", a, b)
	}
	// A background op ends a lazy one's wait (both then commit together).
	s.DoLazy(entry("lazy2"), func(err error) { done <- err })
	if err := s.DoBackground(ctx, entry("background")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a, b := xmin("lazy2"), xmin("background"); a == "" || a != b {
		t.Fatalf("lazy op in transaction %q, the background one in %q; want the same", a, b)
	}
	// Alone, it commits after LazyDelay.
	s2, _, _ := setupDSN(t, Options{LazyDelay: 20 * time.Millisecond})
	s2.DoLazy(entry("alone"), func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
