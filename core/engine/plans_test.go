package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/store"
)

// tapSQL records the text of every statement sent while on.
type tapSQL struct {
	mu  sync.Mutex
	on  bool
	sql map[string]bool
}

func (r *tapSQL) add(s string) {
	r.mu.Lock()
	if r.on {
		r.sql[s] = true
	}
	r.mu.Unlock()
}

func (r *tapSQL) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL)
	return ctx
}
func (r *tapSQL) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *tapSQL) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (r *tapSQL) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.add(d.SQL)
}
func (r *tapSQL) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestTapPathKeepsGenericPlans: every statement an approved execution
// sends (tap → verified card) is planned only for PostgreSQL's first five
// runs of it on a connection and then runs its cached generic plan. pgx
// prepares each statement once per connection; PostgreSQL plans a
// prepared statement afresh (a custom plan) for its first five runs and
// then keeps doing so for good if the generic plan's estimate looks
// dearer than the custom plans' average — e.g. a subquery in an INSERT's
// RETURNING over an unnest of array parameters (a generic unnest is
// estimated at 10 rows, a custom one at the array's length), which cost
// PostgreSQL 0.5–0.8 ms per execution in silas-load (BENCHMARKS.md
// "Issue 26 — plans"). pg_prepared_statements counts, per connection,
// the runs of each statement on a custom and on the generic plan: a
// statement past its warm-up on more than five custom plans is planned
// on every run.
func TestTapPathKeepsGenericPlans(t *testing.T) {
	ch := newFakeChannel()
	tr := &tapSQL{sql: map[string]bool{}}
	b := setupStore(t, ch, ch, "", store.Options{QueryTracer: tr})
	const runs = 14
	for i := range runs {
		cmd := fmt.Sprintf("echo plans%d", i)
		b.send(t, owner, "/run "+cmd)
		c := b.pendingCard(t, cmd)
		tr.mu.Lock()
		tr.on = true
		tr.mu.Unlock()
		b.tap(t, owner, c.ID, "approve")
		b.waitStatus(t, c.ID, cards.StatusDone)
		tr.mu.Lock()
		tr.on = false
		tr.mu.Unlock()
	}

	conns := b.st.Pool().AcquireAllIdle(b.ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	checked := 0
	for _, c := range conns {
		rows, err := c.Query(b.ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
		if err != nil {
			t.Fatal(err)
		}
		type stmt struct {
			sql             string
			generic, custom int64
		}
		var ss []stmt
		for rows.Next() {
			var s stmt
			if err := rows.Scan(&s.sql, &s.generic, &s.custom); err != nil {
				t.Fatal(err)
			}
			ss = append(ss, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		tr.mu.Lock()
		for _, s := range ss {
			if !tr.sql[s.sql] || s.generic+s.custom <= 5 {
				continue // not on the tap path, or still in its warm-up
			}
			checked++
			if s.custom > 5 {
				t.Errorf("planned on every run (%d custom plans, %d generic runs on one connection):\n%s",
					s.custom, s.generic, strings.Join(strings.Fields(s.sql), " "))
			}
		}
		tr.mu.Unlock()
	}
	// The writer's transactions alone are a dozen statements per
	// execution: if few were run past their warm-up on one connection,
	// the check above said nothing.
	if checked < 6 {
		t.Fatalf("only %d tap-path statements ran more than five times on one connection", checked)
	}
	t.Logf("%d tap-path statements past their warm-up checked", checked)
}
