package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
)

// tripLog records every round trip to the database — a batch, or a query
// on its own — with the statements it carried and its connection.
type tripLog struct {
	mu    sync.Mutex
	on    bool
	trips []trip
}

type trip struct {
	conn  *pgx.Conn
	stmts []string
}

// add records one round trip on c carrying stmts (a batch's, or a query
// on its own).
func (r *tripLog) add(c *pgx.Conn, stmts ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.trips = append(r.trips, trip{conn: c, stmts: stmts})
	}
}

func (r *tripLog) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(c, d.SQL)
	return ctx
}
func (r *tripLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart records a batch whole, as sent: TraceBatchQuery sees
// only the statements whose results were read, so a batch that failed
// would look short.
func (r *tripLog) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	stmts := make([]string, 0, len(d.Batch.QueuedQueries))
	for _, q := range d.Batch.QueuedQueries {
		stmts = append(stmts, q.SQL)
	}
	r.add(c, stmts...)
	return ctx
}
func (r *tripLog) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *tripLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *tripLog) record(on bool) {
	r.mu.Lock()
	r.on = on
	if on {
		r.trips = nil
	}
	r.mu.Unlock()
}

// String is tr's statements, each cut short, for a failure's message.
func (tr trip) String() string {
	var b strings.Builder
	b.WriteString("\n  round trip:")
	for _, q := range tr.stmts {
		q = strings.Join(strings.Fields(q), " ")
		if len(q) > 80 {
			q = q[:80] + "…"
		}
		b.WriteString("\n    " + q)
	}
	return b.String()
}

// has says a statement of tr contains s.
func (tr trip) has(s string) bool {
	for _, q := range tr.stmts {
		if strings.Contains(q, s) {
			return true
		}
	}
	return false
}

const (
	sqlTurnInsert   = "INSERT INTO turns"
	sqlApprovalLock = "FROM approvals WHERE id = $1 FOR UPDATE"
	sqlRouteRead    = "FROM approval_routes WHERE approval_id = $1 AND conversation = $2"
	sqlDecision     = "UPDATE approvals SET status"
)

// tapTransaction is the round trips of the first transaction recorded
// that stored a turn: from the one carrying its insert to its COMMIT.
func (r *tripLog) tapTransaction(t *testing.T) []trip {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, tr := range r.trips {
		if !tr.has(sqlTurnInsert) {
			continue
		}
		out := []trip{tr}
		for _, next := range r.trips[i+1:] {
			if tr.has("COMMIT") {
				break
			}
			if next.conn == tr.conn {
				out = append(out, next)
				tr = next
			}
		}
		if !tr.has("COMMIT") {
			t.Fatalf("the tap's transaction did not commit in the trips recorded: %v", out)
		}
		return out
	}
	t.Fatal("no turn was stored")
	return nil
}

// carrying is the recorded round trips with a statement that contains s.
func (r *tripLog) carrying(s string) []trip {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []trip
	for _, tr := range r.trips {
		if tr.has(s) {
			out = append(out, tr)
		}
	}
	return out
}

// statements is how many statements of trips contain s.
func statements(trips []trip, s string) int {
	n := 0
	for _, tr := range trips {
		for _, q := range tr.stmts {
			if strings.Contains(q, s) {
				n++
			}
		}
	}
	return n
}

// TestTapReadsWithInsert: a tap in an idle conversation sends the read its
// decision starts with — the card's request, locked, and its route into
// the conversation — with its turn's insert, in the transaction's first
// round trip, and the decision does not read the request again: the
// decision's compare-and-swap goes in the second round trip. (Issue 26:
// the read had a round trip of its own, the second, and the decision came
// third; each round trip costs ≈ 0.2 ms of Go and 0.1–0.2 ms of
// PostgreSQL.) A duplicate of the tap sends the read too — and decides
// nothing; a tap on the card from a conversation it was not routed to is
// refused as an unknown card, from the same read.
func TestTapReadsWithInsert(t *testing.T) {
	t.Parallel()
	ch := newFakeChannel()
	log := &tripLog{}
	b := setupStore(t, ch, ch, "", store.Options{QueryTracer: log})
	b.send(t, owner, "/run echo prefetch")
	c := b.pendingCard(t, "echo prefetch")
	idle := func(conv core.ConversationID) { b.waitIdle(t, conv) }
	idle("test:chat")

	// From another conversation, where the card was not routed: "unknown
	// card", nothing changed.
	log.record(true)
	res, err := b.eng.Deliver(b.ctx, core.Turn{Channel: "test", Conversation: "test:other", Sender: owner, EventID: "tap-elsewhere",
		Tap: &core.Tap{Card: c.ID, Choice: "approve"}, Evidence: core.Evidence{Authenticated: true, Method: "test"}})
	if err != nil || res.Duplicate {
		t.Fatalf("tap from another conversation: %+v, %v", res, err)
	}
	b.ch.waitFor(t, "unknown card", func(m []core.OutMessage) bool {
		for _, x := range m {
			if x.Conversation == "test:other" && strings.Contains(x.Text, "Unknown card") {
				return true
			}
		}
		return false
	})
	log.record(false)
	tx := log.tapTransaction(t)
	if !tx[0].has(sqlApprovalLock) || !tx[0].has(sqlRouteRead) || statements(tx, sqlApprovalLock) != 1 || statements(tx, sqlDecision) != 0 {
		t.Fatalf("tap from another conversation: the request read with the insert %v, its route %v; reads of it %d, decisions %d; want true, true, 1, 0\n%v",
			tx[0].has(sqlApprovalLock), tx[0].has(sqlRouteRead), statements(tx, sqlApprovalLock), statements(tx, sqlDecision), tx)
	}
	if got := b.waitStatus(t, c.ID, cards.StatusPending); got == nil {
		t.Fatal("the card is gone")
	}
	idle("test:chat")
	idle("test:other")

	// The approval.
	log.record(true)
	id := b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusDone)
	log.record(false)
	tx = log.tapTransaction(t)
	if !tx[0].has(sqlApprovalLock) || !tx[0].has(sqlRouteRead) {
		t.Fatalf("the tap's first round trip does not read its request and route: %v", tx[0])
	}
	if n := statements(tx, sqlApprovalLock); n != 1 {
		t.Fatalf("the tap's transaction read its request %d times, want once\n%v", n, tx)
	}
	if len(tx) < 2 || !tx[1].has(sqlDecision) {
		t.Fatalf("the decision is not in the tap's second round trip\n%v", tx)
	}
	idle("test:chat")

	// A duplicate: stored before, decides nothing.
	log.record(true)
	if res := b.tapWithID(t, owner, c.ID, "approve", id); !res.Duplicate {
		t.Fatal("a replayed tap was not a duplicate")
	}
	log.record(false)
	tx = log.tapTransaction(t)
	if statements(tx, sqlDecision) != 0 {
		t.Fatalf("a duplicate tap decided\n%v", tx)
	}
	if n := b.executions(t); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}
