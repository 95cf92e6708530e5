package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core/audit"
)

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

// TestAuditAppendChecksKnownHead: a commit whose chain head is known from
// the writer's last one (nothing read in the transaction) sends the lock,
// the rows and COMMIT, and the rows' own statement checks that the head
// is still that one — no statement of its own reads the head. When
// another process appended meanwhile, the check fails the transaction
// before anything commits and the writer runs it again reading the head:
// the op succeeds and the chain stays whole.
func TestAuditAppendChecksKnownHead(t *testing.T) {
	t.Parallel()
	rt := &roundTrips{}
	s, ctx, dsn := setupDSN(t, Options{QueryTracer: rt})
	other := openStore(t, dsn, Options{})
	entry := func(id string) Op {
		return func(context.Context, *Tx) ([]audit.Entry, error) {
			return []audit.Entry{{Kind: "test.entry", Actor: "silas", Conversation: "webchat:local", Data: map[string]any{"id": id}}}, nil
		}
	}
	mustDo(t, ctx, s, entry("a")) // reads the head; the writer knows it from here on
	n := rt.count()
	mustDo(t, ctx, s, entry("b"))
	trips, _ := rt.since(n)
	if len(trips) != 1 {
		t.Fatalf("a known-head commit took %d round trips, want 1: %q", len(trips), trips)
	}
	reads := 0
	for _, q := range trips[0] {
		if strings.Contains(q, "FROM audit_log") {
			reads++
			if !strings.HasPrefix(strings.TrimSpace(q), "INSERT INTO audit_log") {
				t.Errorf("a statement of its own reads the chain's head: %s", q)
			}
		}
	}
	if reads != 1 || !carries(trips[0], "pg_advisory_xact_lock") || trips[0][len(trips[0])-1] != "COMMIT" {
		t.Errorf("a known-head commit sent %q, want the lock, the checked rows and COMMIT", trips[0])
	}

	mustDo(t, ctx, other, entry("elsewhere")) // the head s knows is stale now
	n = rt.count()
	mustDo(t, ctx, s, entry("c"))
	trips, _ = rt.since(n)
	if len(with(trips, "ORDER BY seq DESC LIMIT 1")) < 2 {
		t.Errorf("after another process appended: %q, want the checked append, then a run reading the head", trips)
	}
	if _, err := s.VerifyAudit(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	rows, err := s.Pool().Query(ctx, `SELECT data->>'id' FROM audit_log WHERE kind = 'test.entry' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "a b elsewhere c"; strings.Join(got, " ") != want {
		t.Errorf("entries %q, want %q once each", got, want)
	}
}
