package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// 1. Migrations.

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t)
	ctx := t.Context()
	s := openStore(t, dsn, Options{})

	cur, latest, err := s.SchemaStatus(ctx)
	if err != nil {
		t.Fatalf("SchemaStatus on an empty database: %v", err)
	}
	if cur != 0 || latest < 1 {
		t.Fatalf("empty database: current %d latest %d, want 0 and >= 1", cur, latest)
	}
	p, db, err := s.provider()
	if err != nil {
		t.Fatal(err)
	}
	migrations := len(p.ListSources())
	db.Close()

	// The restart step uses a second Store: a new process migrating a
	// database another one already migrated.
	again := openStore(t, dsn, Options{})
	steps := []struct {
		name        string
		st          *Store
		wantApplied func(int) bool
	}{
		{"first run applies every migration", s, func(n int) bool { return n == migrations }},
		{"second run applies nothing", s, func(n int) bool { return n == 0 }},
		{"third run applies nothing", s, func(n int) bool { return n == 0 }},
		{"another process applies nothing", again, func(n int) bool { return n == 0 }},
	}
	for i, st := range steps {
		n, err := st.st.Migrate(ctx)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if !st.wantApplied(n) {
			t.Fatalf("%s: applied %d", st.name, n)
		}
		cur, l, err := st.st.SchemaStatus(ctx)
		if err != nil {
			t.Fatalf("%s: SchemaStatus: %v", st.name, err)
		}
		if cur != l || l != latest {
			t.Fatalf("%s: current %d latest %d, want both %d", st.name, cur, l, latest)
		}
		// The store still works after Migrate (which borrows its pool),
		// and a re-run keeps existing data.
		mustDo(t, ctx, st.st, entriesOp(numberedEntry(i+1)))
		if n, err := st.st.VerifyAudit(ctx); err != nil || n != int64(i+1) {
			t.Fatalf("%s: VerifyAudit = %d, %v; want %d, nil", st.name, n, err, i+1)
		}
	}
}

// Two processes starting on a fresh database (two `silas serve`, or serve
// and `silas migrate`) both run Migrate.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for round := range 10 {
		dsn := pgtest.NewDatabase(t)
		sts := stores(t, openStore(t, dsn, Options{}), dsn, 4)
		for _, s := range sts {
			// The losers poll for the lock; what is proved is that they
			// wait for the winner, not how long goose's interval is.
			s.migrateLockRetry = 20 * time.Millisecond
		}
		errs := make([]error, len(sts))
		race(len(sts), func(i int) { _, errs[i] = sts[i].Migrate(ctx) })
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, store %d: %v", round, i, err)
			}
		}
		if cur, latest, err := sts[0].SchemaStatus(ctx); err != nil || cur != latest {
			t.Errorf("round %d: SchemaStatus = %d, %d, %v", round, cur, latest, err)
		}
	}
}

// 2, 3. Concurrent appends.

// hammer runs goroutines×opsEach Do calls, spread round-robin over stores.
// Op (g, i) appends 1–3 entries; every fourth also inserts a turn. It
// returns the entry ids as ids[g][i][k] and the number of turns inserted.
func hammer(t *testing.T, ctx context.Context, stores []*Store, goroutines, opsEach int) (ids [][][]string, turns int) {
	t.Helper()
	ids = make([][][]string, goroutines)
	for g := range goroutines {
		ids[g] = make([][]string, opsEach)
		for i := range opsEach {
			n := 1 + (g*31+i*7)%3
			for k := range n {
				ids[g][i] = append(ids[g][i], fmt.Sprintf("g%d-i%d-k%d", g, i, k))
			}
			if (g+i)%4 == 0 {
				turns++
			}
		}
	}
	race(goroutines, func(g int) {
		st := stores[g%len(stores)]
		for i := range opsEach {
			var entries []audit.Entry
			for k, id := range ids[g][i] {
				entries = append(entries, audit.Entry{
					Kind: "test.concurrent", Actor: fmt.Sprintf("webchat:g%d", g), Conversation: "webchat:hammer",
					Data: map[string]any{"id": id, "g": g, "i": i, "k": k, "store": g % len(stores)},
				})
			}
			withTurn := (g+i)%4 == 0
			err := st.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
				if withTurn {
					if _, dup, err := tx.InsertTurn(ctx, testTurn("hammer", fmt.Sprintf("g%d-i%d", g, i))); err != nil {
						return nil, err
					} else if dup {
						return nil, fmt.Errorf("turn g%d-i%d is a duplicate", g, i)
					}
				}
				return entries, nil
			})
			if err != nil {
				t.Errorf("goroutine %d op %d: %v", g, i, err)
				return
			}
		}
	})
	return ids, turns
}

type chainRow struct {
	seq   int64
	at    time.Time
	id    string
	store int
}

// checkChain verifies the chain and that it holds exactly the entries in ids:
// each once, an op's entries adjacent and in order with one timestamp, and
// each goroutine's ops in the order it submitted them.
func checkChain(t *testing.T, ctx context.Context, s *Store, ids [][][]string) []chainRow {
	t.Helper()
	total := 0
	for _, g := range ids {
		for _, op := range g {
			total += len(op)
		}
	}
	n, err := s.VerifyAudit(ctx)
	if err != nil {
		t.Fatalf("VerifyAudit: %v", err)
	}
	if n != int64(total) {
		t.Fatalf("VerifyAudit checked %d entries, want %d", n, total)
	}
	var cnt, lo, hi int64
	if err := s.Pool().QueryRow(ctx, `SELECT count(*), coalesce(min(seq), 0), coalesce(max(seq), 0) FROM audit_log`).Scan(&cnt, &lo, &hi); err != nil {
		t.Fatal(err)
	}
	if cnt != int64(total) || lo != 1 || hi != int64(total) {
		t.Fatalf("audit_log: %d rows, seq %d..%d; want %d rows, seq 1..%d", cnt, lo, hi, total, total)
	}

	pgRows, err := s.Pool().Query(ctx, `SELECT seq, at, data->>'id', (data->>'store')::int FROM audit_log ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var rows []chainRow
	bySeq := map[string]chainRow{}
	for pgRows.Next() {
		var r chainRow
		if err := pgRows.Scan(&r.seq, &r.at, &r.id, &r.store); err != nil {
			t.Fatal(err)
		}
		if prev, ok := bySeq[r.id]; ok {
			t.Errorf("entry %s appended twice: seq %d and %d", r.id, prev.seq, r.seq)
		}
		bySeq[r.id] = r
		rows = append(rows, r)
	}
	if err := pgRows.Err(); err != nil {
		t.Fatal(err)
	}
	for g, ops := range ids {
		var last int64
		for i, op := range ops {
			first, ok := bySeq[op[0]]
			if !ok {
				t.Errorf("entry %s missing", op[0])
				continue
			}
			if first.seq <= last {
				t.Errorf("goroutine %d: op %d at seq %d, not after its previous op (seq %d)", g, i, first.seq, last)
			}
			for k, id := range op {
				r, ok := bySeq[id]
				switch {
				case !ok:
					t.Errorf("entry %s missing", id)
				case r.seq != first.seq+int64(k) || !r.at.Equal(first.at):
					t.Errorf("entry %s at seq %d (%v), want seq %d (%v): an op's entries must be adjacent, with one timestamp",
						id, r.seq, r.at, first.seq+int64(k), first.at)
				default:
					last = r.seq
				}
			}
		}
	}
	return rows
}

func TestAuditChainConcurrentDo(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	const goroutines, opsEach = 16, 200
	ids, turns := hammer(t, ctx, []*Store{s}, goroutines, opsEach)
	if t.Failed() {
		t.FailNow()
	}
	checkChain(t, ctx, s, ids)
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM turns`); n != int64(turns) {
		t.Errorf("%d turns stored, want %d", n, turns)
	}
	// Group commit: an op's entries share the batch's timestamp, so the
	// distinct timestamps count the transactions.
	batches := queryInt(t, ctx, s, `SELECT count(DISTINCT at) FROM audit_log`)
	t.Logf("%d ops committed in %d transactions", goroutines*opsEach, batches)
	if batches >= goroutines*opsEach {
		t.Errorf("%d transactions for %d concurrent ops: the writer never batched", batches, goroutines*opsEach)
	}
}

func TestAuditChainTwoStores(t *testing.T) {
	t.Parallel()
	s, ctx, dsn := setupDSN(t, Options{})
	two := stores(t, s, dsn, 2)
	const goroutines, opsEach = 16, 120
	ids, turns := hammer(t, ctx, two, goroutines, opsEach)
	if t.Failed() {
		t.FailNow()
	}
	for i, st := range two {
		// Both processes see the same, intact chain.
		rows := checkChain(t, ctx, st, ids)
		if i > 0 {
			continue
		}
		runs := 1
		for j := 1; j < len(rows); j++ {
			if rows[j].store != rows[j-1].store {
				runs++
			}
		}
		t.Logf("%d entries from 2 stores in %d runs", len(rows), runs)
		if runs < 3 {
			t.Errorf("entries of the two stores did not interleave (%d runs): the test did not exercise the advisory lock", runs)
		}
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM turns`); n != int64(turns) {
		t.Errorf("%d turns stored, want %d", n, turns)
	}
}

// Round trip through jsonb: the hash is computed from Go's JSON of the data
// and verified from PostgreSQL's jsonb text of it, so the two must agree
// after canonicalisation for every kind of value.
func TestAuditDataRoundTrip(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	cases := []struct {
		name  string
		entry audit.Entry
	}{
		{"nil data", audit.Entry{Kind: "k"}},
		{"empty data and empty strings", audit.Entry{Data: map[string]any{}}},
		{"html characters", audit.Entry{Kind: "a<b>&c", Actor: "x&y", Data: map[string]any{"s": "<script>&amp;</script>"}}},
		{"non-ASCII", audit.Entry{Kind: "héllo", Actor: "telegram:☃", Conversation: "💬", Data: map[string]any{"s": "日本語 😀 \u2028\u2029 é"}}},
		{"control characters and escapes", audit.Entry{Data: map[string]any{"s": "tab\t nl\n cr\r \x01 \x1f \x7f quote\" backslash\\ slash/"}}},
		{"key order", audit.Entry{Data: map[string]any{"b": 1, "a": 2, "aa": 3, "A": 4, "é": 5, "€": 6, "😀": 7, "": 8}}},
		{"integers", audit.Entry{Data: map[string]any{"zero": 0, "neg": -42, "big": int64(1) << 62, "max": uint64(math.MaxUint64), "unsafe": int64(9007199254740993)}}},
		{"floats", audit.Entry{Data: map[string]any{"a": 0.1, "b": 1e21, "c": 1e-7, "d": 5e-324, "e": math.MaxFloat64, "f": math.Copysign(0, -1), "g": 123456.789}}},
		{"nesting", audit.Entry{Data: map[string]any{"obj": map[string]any{"z": []any{1, "two", nil, true, map[string]any{}}}, "arr": []string{}, "nil": nil, "bytes": []byte{0, 1, 255}}}},
		{"long string", audit.Entry{Data: map[string]any{"s": strings.Repeat("x", 100_000)}}},
		{"invalid UTF-8 in data", audit.Entry{Data: map[string]any{"s": "bad \xff byte"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mustDo(t, ctx, s, entriesOp(tc.entry))
			if _, err := s.VerifyAudit(ctx); err != nil {
				var data string
				mustScan(t, s.Pool().QueryRow(ctx, `SELECT data::text FROM audit_log ORDER BY seq DESC LIMIT 1`), &data)
				t.Fatalf("VerifyAudit after appending %+v (stored data %s): %v", tc.entry, data, err)
			}
		})
	}

	// Values PostgreSQL cannot store are refused, and the chain stays intact.
	refused := []struct {
		name  string
		entry audit.Entry
	}{
		{"NUL in data", audit.Entry{Data: map[string]any{"s": "a\x00b"}}},
		{"NUL in kind", audit.Entry{Kind: "a\x00b"}},
		{"invalid UTF-8 in actor", audit.Entry{Actor: "bad \xff byte"}},
		{"NaN in data", audit.Entry{Data: map[string]any{"f": math.NaN()}}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			before := queryInt(t, ctx, s, `SELECT count(*) FROM audit_log`)
			if err := s.Do(ctx, entriesOp(numberedEntry(1), tc.entry)); err == nil {
				t.Fatalf("Do with %+v succeeded", tc.entry)
			} else {
				t.Logf("refused: %v", err)
			}
			if after := queryInt(t, ctx, s, `SELECT count(*) FROM audit_log`); after != before {
				t.Fatalf("%d entries appended by a failed op", after-before)
			}
			if n, err := s.VerifyAudit(ctx); err != nil || n != before {
				t.Fatalf("VerifyAudit = %d, %v; want %d, nil", n, err, before)
			}
		})
	}
}

// 4. Tamper detection.

func TestAuditTamperDetection(t *testing.T) {
	t.Parallel()
	const n = 20
	cases := []struct {
		name    string
		sql     string
		wantSeq int64 // 0: the change is not a change to the hashed entry
		reason  string
	}{
		{"data", `UPDATE audit_log SET data = '{"i": 7, "note": "entry 7 (edited)"}' WHERE seq = 7`, 7, "hash mismatch"},
		{"data: one number", `UPDATE audit_log SET data = jsonb_set(data, '{i}', '8') WHERE seq = 7`, 7, "hash mismatch"},
		{"data: field added", `UPDATE audit_log SET data = data || '{"x": null}' WHERE seq = 7`, 7, "hash mismatch"},
		{"kind", `UPDATE audit_log SET kind = 'approval.approved' WHERE seq = 7`, 7, "hash mismatch"},
		{"actor", `UPDATE audit_log SET actor = 'telegram:999' WHERE seq = 7`, 7, "hash mismatch"},
		{"conversation", `UPDATE audit_log SET conversation = 'webchat:other' WHERE seq = 7`, 7, "hash mismatch"},
		{"at: one second", `UPDATE audit_log SET at = at + interval '1 second' WHERE seq = 7`, 7, "hash mismatch"},
		{"at: one microsecond", `UPDATE audit_log SET at = at - interval '1 microsecond' WHERE seq = 7`, 7, "hash mismatch"},
		{"first row", `UPDATE audit_log SET actor = 'x' WHERE seq = 1`, 1, "hash mismatch"},
		{"last row", `UPDATE audit_log SET actor = 'x' WHERE seq = 20`, 20, "hash mismatch"},
		{"delete a row", `DELETE FROM audit_log WHERE seq = 7`, 7, "missing"},
		{"delete the first row", `DELETE FROM audit_log WHERE seq = 1`, 1, "missing"},
		{"delete a range", `DELETE FROM audit_log WHERE seq BETWEEN 7 AND 9`, 7, "missing"},
		{"renumber a row", `UPDATE audit_log SET seq = 100 WHERE seq = 7`, 7, "missing"},
		// The stored hash of row 7 is compared with the hash recomputed from
		// row 7's own content (and row 6's hash) before row 8 is looked at,
		// so a forged hash is reported at 7, not at 8 whose prev_hash no
		// longer matches. Fixing up row 8's prev_hash does not help.
		{"hash", `UPDATE audit_log SET hash = sha256(hash) WHERE seq = 7`, 7, "hash mismatch"},
		{"hash, with the next row's prev_hash fixed up", `UPDATE audit_log SET hash = CASE seq WHEN 7 THEN sha256(hash) ELSE hash END,
			prev_hash = CASE seq WHEN 8 THEN (SELECT sha256(hash) FROM audit_log WHERE seq = 7) ELSE prev_hash END WHERE seq IN (7, 8)`, 7, "hash mismatch"},
		{"prev_hash", `UPDATE audit_log SET prev_hash = sha256(prev_hash) WHERE seq = 7`, 7, "prev_hash"},
		{"swap two rows' data", `UPDATE audit_log a SET data = b.data FROM audit_log b WHERE (a.seq, b.seq) IN ((3, 12), (12, 3))`, 3, "hash mismatch"},
		{"swap two whole rows' contents", `UPDATE audit_log a SET at = b.at, kind = b.kind, actor = b.actor, conversation = b.conversation, data = b.data
			FROM audit_log b WHERE (a.seq, b.seq) IN ((3, 12), (12, 3))`, 3, "hash mismatch"},
		// Controls: the chain covers the JSON value, not its bytes.
		{"no-op update", `UPDATE audit_log SET data = data::text::jsonb, kind = kind, at = at WHERE seq = 7`, 0, ""},
		{"same data rebuilt in another key order", `UPDATE audit_log SET data = jsonb_build_object('note', data->'note', 'i', data->'i') WHERE seq = 7`, 0, ""},
		{"numerically equal number (7 as 7.0)", `UPDATE audit_log SET data = jsonb_set(data, '{i}', '7.0') WHERE seq = 7`, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ctx := setup(t)
			appendNumbered(t, ctx, s, n)
			if got, err := s.VerifyAudit(ctx); err != nil || got != n {
				t.Fatalf("before tampering: VerifyAudit = %d, %v; want %d, nil", got, err, n)
			}
			if tamper(t, ctx, s, tc.sql) == 0 {
				t.Fatal("tampering statement changed no row")
			}
			got, err := s.VerifyAudit(ctx)
			if tc.wantSeq == 0 {
				if err != nil || got != n {
					t.Fatalf("VerifyAudit = %d, %v; want %d, nil", got, err, n)
				}
				return
			}
			var be *audit.BrokenError
			if !errors.As(err, &be) {
				t.Fatalf("VerifyAudit = %d, %v; want a *audit.BrokenError", got, err)
			}
			if be.Seq != tc.wantSeq || !strings.Contains(be.Reason, tc.reason) {
				t.Fatalf("broken at seq %d (%s); want seq %d (%s)", be.Seq, be.Reason, tc.wantSeq, tc.reason)
			}
			if got != tc.wantSeq-1 {
				t.Errorf("VerifyAudit reported %d rows checked before the break, want %d", got, tc.wantSeq-1)
			}
		})
	}
}

// 5. Batch isolation.

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

// 6. Token nonces.

func TestConsumeNonce(t *testing.T) {
	t.Parallel()
	s, ctx, dsn := setupDSN(t, Options{})
	insertApproval(t, ctx, s, "ap1", false)
	consume := func(st *Store, nonce, tokenID, id string) (bool, error) {
		var ok bool
		err := st.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var err error
			ok, err = tx.ConsumeNonce(ctx, []byte(nonce), tokenID, core.ApprovalID(id))
			return nil, err
		})
		return ok, err
	}

	steps := []struct {
		name, nonce, tokenID, approval string
		want                           bool
		wantErr                        bool
	}{
		{"first use", "n1", "tok1", "ap1", true, false},
		{"replay", "n1", "tok1", "ap1", false, false},
		{"replay under another token id", "n1", "tok2", "ap1", false, false},
		{"new nonce, reused token id", "n2", "tok1", "ap1", false, false},
		{"unknown approval (foreign key)", "n3", "tok3", "nope", false, true},
	}
	for _, st := range steps {
		ok, err := consume(s, st.nonce, st.tokenID, st.approval)
		if ok != st.want || (err != nil) != st.wantErr {
			t.Errorf("%s: ConsumeNonce = %v, %v; want %v, error %v", st.name, ok, err, st.want, st.wantErr)
		}
	}

	for _, nstores := range []int{1, 2} {
		t.Run(fmt.Sprintf("concurrent, %d stores", nstores), func(t *testing.T) {
			sts := stores(t, s, dsn, nstores)
			nonce := fmt.Sprintf("race-%d", nstores)
			var wins atomic.Int32
			race(20, func(i int) {
				ok, err := consume(sts[i%nstores], nonce, nonce, "ap1")
				if err != nil {
					t.Errorf("goroutine %d: %v", i, err)
				}
				if ok {
					wins.Add(1)
				}
			})
			if wins.Load() != 1 {
				t.Fatalf("%d goroutines consumed the same nonce, want exactly 1", wins.Load())
			}
			if n := queryInt(t, ctx, s, `SELECT count(*) FROM token_nonces WHERE nonce = $1`, []byte(nonce)); n != 1 {
				t.Fatalf("%d rows for the nonce", n)
			}
		})
	}
}

// 7. Compare-and-swap transitions.

func TestTransitionApprovalSequence(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	insertApproval(t, ctx, s, "ap1", false)
	pending, open := []core.ApprovalStatus{core.ApprovalPending}, []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming}
	steps := []struct {
		name       string
		id         string
		from       []core.ApprovalStatus
		to         core.ApprovalStatus
		by         core.IdentityID
		token      []byte
		want       bool
		wantStatus core.ApprovalStatus
	}{
		{"pending → confirming", "ap1", pending, core.ApprovalConfirming, "webchat:a", nil, true, core.ApprovalConfirming},
		{"not in from", "ap1", pending, core.ApprovalApproved, "webchat:a", []byte("t1"), false, core.ApprovalConfirming},
		{"confirming → approved", "ap1", open, core.ApprovalApproved, "webchat:b", []byte("t2"), true, core.ApprovalApproved},
		{"already decided", "ap1", open, core.ApprovalDeclined, "webchat:c", nil, false, core.ApprovalApproved},
		{"unknown id", "nope", open, core.ApprovalApproved, "webchat:c", nil, false, ""},
	}
	for _, st := range steps {
		var ok bool
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			var err error
			ok, err = tx.TransitionApproval(ctx, core.ApprovalID(st.id), st.from, st.to, st.by, st.token)
			return nil, err
		})
		if ok != st.want {
			t.Errorf("%s: ok = %v, want %v", st.name, ok, st.want)
		}
		if st.wantStatus == "" {
			continue
		}
		a, err := s.GetApproval(ctx, core.ApprovalID(st.id))
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != st.wantStatus {
			t.Errorf("%s: status %s, want %s", st.name, a.Status, st.wantStatus)
		}
	}
	a, err := s.GetApproval(ctx, "ap1")
	if err != nil {
		t.Fatal(err)
	}
	if a.DecidedBy != "webchat:b" || string(a.Token) != "t2" || a.DecidedAt.IsZero() {
		t.Errorf("decided approval: by %q token %q at %v; want webchat:b, t2, set", a.DecidedBy, a.Token, a.DecidedAt)
	}
	if _, err := s.GetApproval(ctx, "nope"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("GetApproval(unknown) = %v, want core.ErrNotFound", err)
	}
}

func TestTransitionCAS(t *testing.T) {
	t.Parallel()
	const contenders = 20
	for _, nstores := range []int{1, 2} {
		t.Run(fmt.Sprintf("approval, %d stores", nstores), func(t *testing.T) {
			s, ctx, dsn := setupDSN(t, Options{})
			sts := stores(t, s, dsn, nstores)
			insertApproval(t, ctx, s, "ap1", false)
			var mu sync.Mutex
			var winners []int
			race(contenders, func(i int) {
				to, token := core.ApprovalApproved, []byte(fmt.Sprintf("token%d", i))
				if i%2 == 1 {
					to, token = core.ApprovalDeclined, nil
				}
				var ok bool
				err := sts[i%nstores].Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
					var err error
					ok, err = tx.TransitionApproval(ctx, "ap1", []core.ApprovalStatus{core.ApprovalPending}, to, core.IdentityID(fmt.Sprintf("webchat:u%d", i)), token)
					return nil, err
				})
				if err != nil {
					t.Errorf("contender %d: %v", i, err)
				}
				if ok {
					mu.Lock()
					winners = append(winners, i)
					mu.Unlock()
				}
			})
			if len(winners) != 1 {
				t.Fatalf("winners %v, want exactly one", winners)
			}
			w := winners[0]
			a, err := s.GetApproval(ctx, "ap1")
			if err != nil {
				t.Fatal(err)
			}
			wantStatus, wantToken := core.ApprovalApproved, fmt.Sprintf("token%d", w)
			if w%2 == 1 {
				wantStatus, wantToken = core.ApprovalDeclined, ""
			}
			if a.Status != wantStatus || a.DecidedBy != core.IdentityID(fmt.Sprintf("webchat:u%d", w)) || string(a.Token) != wantToken {
				t.Fatalf("approval after the race: %s by %s token %q; winner %d wanted %s token %q", a.Status, a.DecidedBy, a.Token, w, wantStatus, wantToken)
			}
		})

		t.Run(fmt.Sprintf("execution, %d stores", nstores), func(t *testing.T) {
			s, ctx, dsn := setupDSN(t, Options{})
			sts := stores(t, s, dsn, nstores)
			insertApproval(t, ctx, s, "ap1", true)
			var wins atomic.Int32
			race(contenders, func(i int) {
				var ok bool
				err := sts[i%nstores].Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
					var err error
					ok, err = tx.TransitionExecution(ctx, "ap1", core.ExecQueued, core.ExecRunning, core.ExecUpdate{Started: true})
					return nil, err
				})
				if err != nil {
					t.Errorf("contender %d: %v", i, err)
				}
				if ok {
					wins.Add(1)
				}
			})
			if wins.Load() != 1 {
				t.Fatalf("%d contenders moved queued → running, want exactly 1", wins.Load())
			}

			// The rest of the life cycle, each step once.
			rec := &core.ExecRecord{ExitCode: 0, Stdout: "ok\n", Isolation: "test"}
			steps := []struct {
				from, to core.ExecStatus
				u        core.ExecUpdate
				want     bool
			}{
				{core.ExecQueued, core.ExecRunning, core.ExecUpdate{Started: true}, false},
				{core.ExecRunning, core.ExecExecuted, core.ExecUpdate{Result: rec}, true},
				{core.ExecRunning, core.ExecExecuted, core.ExecUpdate{Result: rec}, false},
				{core.ExecExecuted, core.ExecVerified, core.ExecUpdate{Report: json.RawMessage(`{"ok":true}`), Done: true}, true},
				{core.ExecExecuted, core.ExecFailed, core.ExecUpdate{Reason: "late", Done: true}, false},
			}
			for _, st := range steps {
				var ok bool
				mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
					var err error
					ok, err = tx.TransitionExecution(ctx, "ap1", st.from, st.to, st.u)
					return nil, err
				})
				if ok != st.want {
					t.Errorf("%s → %s: ok = %v, want %v", st.from, st.to, ok, st.want)
				}
			}
			e, err := s.GetExecution(ctx, "ap1")
			if err != nil {
				t.Fatal(err)
			}
			if e.Status != core.ExecVerified || e.Result == nil || e.Result.Stdout != "ok\n" || e.Reason != "" ||
				e.StartedAt.IsZero() || e.FinishedAt.IsZero() || string(e.Report) == "" {
				t.Fatalf("execution after its life cycle: %+v", e)
			}
		})
	}
}

// 8. Turn idempotency.

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

// 9. Outbox heads.

func TestOutboxHeads(t *testing.T) {
	t.Parallel()
	base := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := &fakeClock{t: base}
	s, ctx, _ := setupDSN(t, Options{Now: clock.Now})

	// Jobs in id order: a1 b1 a2 c1 b2 a3.
	for _, key := range []string{"a1", "b1", "a2", "c1", "b2", "a3"} {
		conv := core.ConversationID("webchat:" + key[:1])
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			return nil, tx.QueueMessage("webchat", core.OpSend, key, core.OutMessage{Conversation: conv, Text: "text " + key})
		})
	}
	job := func(key string) core.OutboxJob {
		t.Helper()
		var j core.OutboxJob
		if err := s.Pool().QueryRow(ctx, `SELECT id, channel, conversation, message_key FROM outbox WHERE message_key = $1`, key).
			Scan(&j.ID, &j.Channel, &j.Conversation, &j.MessageKey); err != nil {
			t.Fatal(err)
		}
		return j
	}
	txOp := func(f func(ctx context.Context, tx *Tx) error) func() {
		return func() {
			mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) { return nil, f(ctx, tx) })
		}
	}

	steps := []struct {
		name   string
		action func()
		now    time.Time
		limit  int
		want   []string
	}{
		{"one head per conversation, oldest first", nil, base, 10, []string{"a1", "b1", "c1"}},
		{"limit", nil, base, 2, []string{"a1", "b1"}},
		{"nothing due yet", nil, base.Add(-time.Second), 10, nil},
		{"a head waiting for a retry blocks its conversation",
			txOp(func(ctx context.Context, tx *Tx) error {
				return tx.OutboxRetry(ctx, job("a1").ID, base.Add(time.Minute), "rate limited")
			}),
			base, 10, []string{"b1", "c1"}},
		{"the retry falls due", nil, base.Add(time.Minute), 10, []string{"a1", "b1", "c1"}},
		{"delivered head: the next job is the head",
			txOp(func(ctx context.Context, tx *Tx) error {
				// Only cards are edited later, so only a card's ref is kept.
				j := job("b1")
				j.Message.Card = &cards.Card{ID: "b1", Kind: cards.KindInfo, Intent: "x", Status: cards.StatusDone}
				tx.QueueDelivered(j, "ref-b1", core.OutboxDelivered)
				return nil
			}),
			base.Add(time.Minute), 10, []string{"a1", "c1", "b2"}}, // ordered by job id: c1 was queued before b2
		{"failed head: the conversation is empty",
			txOp(func(ctx context.Context, tx *Tx) error { return tx.OutboxFailed(ctx, job("c1").ID, "permanent") }),
			base.Add(time.Minute), 10, []string{"a1", "b2"}},
		{"superseded head",
			txOp(func(ctx context.Context, tx *Tx) error {
				tx.QueueDelivered(job("a1"), "", core.OutboxSuperseded)
				return nil
			}),
			base.Add(time.Minute), 10, []string{"a2", "b2"}},
	}
	for _, st := range steps {
		if st.action != nil {
			st.action()
		}
		heads, err := outboxHeads(ctx, s, st.now, st.limit)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		var got []string
		for _, h := range heads {
			got = append(got, h.MessageKey)
			if h.Message.Text != "text "+h.MessageKey || h.Message.Conversation != h.Conversation || h.Op != core.OpSend || h.Channel != "webchat" {
				t.Errorf("%s: job %s decoded as %+v", st.name, h.MessageKey, h)
			}
		}
		if !slices.Equal(got, st.want) {
			t.Errorf("%s: heads %v, want %v", st.name, got, st.want)
		}
	}

	heads, err := outboxHeads(ctx, s, base.Add(time.Hour), 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range heads {
		if h.MessageKey == "a2" && (h.Attempts != 0 || !h.NextAt.Equal(base)) {
			t.Errorf("a2: attempts %d next %v", h.Attempts, h.NextAt)
		}
	}
	if a1 := queryInt(t, ctx, s, `SELECT attempts FROM outbox WHERE message_key = 'a1'`); a1 != 2 {
		t.Errorf("a1: %d attempts, want 2 (retry, then superseded)", a1)
	}
	var ref string
	if err := s.pool.QueryRow(ctx, `SELECT ref FROM sent_messages WHERE channel = 'webchat' AND message_key = 'b1'`).Scan(&ref); err != nil || ref != "ref-b1" {
		t.Errorf("sent ref of b1 = %q, %v", ref, err)
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM sent_messages WHERE message_key = 'a1'`); n != 0 {
		t.Errorf("a superseded job recorded a sent ref")
	}
}

// outboxHeads is what the engine's delivery lanes see together: each
// conversation's next pending job (NextOutboxJob), if due, oldest first.
func outboxHeads(ctx context.Context, s *Store, now time.Time, limit int) ([]core.OutboxJob, error) {
	convs, err := s.PendingOutboxConversations(ctx, 1000)
	if err != nil {
		return nil, err
	}
	var out []core.OutboxJob
	for _, c := range convs {
		j, _, _, err := s.NextOutboxJob(ctx, c)
		if err != nil {
			return nil, err
		}
		if !j.NextAt.After(now) {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b core.OutboxJob) int { return int(a.ID - b.ID) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
