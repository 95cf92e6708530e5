package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/store"
)

// batches records the statements of every batch the store sends, whole
// (as sent: TraceBatchQuery sees only the results read).
type batches struct {
	mu  sync.Mutex
	on  bool
	all [][]string
}

func (r *batches) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (r *batches) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *batches) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	r.mu.Lock()
	if r.on {
		r.all = append(r.all, sqls)
	}
	r.mu.Unlock()
	return ctx
}
func (r *batches) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *batches) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *batches) record(on bool) {
	r.mu.Lock()
	r.on = on
	r.mu.Unlock()
}

// carrying returns the recorded batches with a statement that contains sql.
func (r *batches) carrying(sql string) [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]string
	for _, b := range r.all {
		for _, s := range b {
			if strings.Contains(s, sql) {
				out = append(out, b)
				break
			}
		}
	}
	return out
}

func has(batch []string, sql string) bool {
	for _, s := range batch {
		if strings.Contains(s, sql) {
			return true
		}
	}
	return false
}

// TestTapSpeculates: a low-risk tap in an idle conversation writes its
// decision (the approval's compare-and-swap with the token's nonce), the
// execution claimed with it, the card, the audit rows and COMMIT in one
// round trip; the verdict writes the execution's compare-and-swap, the
// card edit, the audit rows and COMMIT in one round trip. Before issue 26's
// speculation (core/store speculate.go) each compare-and-swap's result
// came back before what depended on it was sent: two round trips each.
func TestTapSpeculates(t *testing.T) {
	t.Parallel()
	ch := newFakeChannel()
	rec := &batches{}
	b := setupStore(t, ch, ch, "", store.Options{QueryTracer: rec})
	b.send(t, owner, "/run echo speculate")
	c := b.pendingCard(t, "echo speculate")
	deadline := time.Now().Add(10 * time.Second)
	for !b.eng.Idle("test:chat") {
		if time.Now().After(deadline) {
			t.Fatal("the conversation did not become idle")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rec.record(true)
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusDone)
	rec.record(false)
	for _, step := range []struct {
		name, cas string
		with      []string
	}{
		{"the decision", "UPDATE approvals SET status", []string{"INSERT INTO executions", "INSERT INTO outbox", "INSERT INTO audit_log", "COMMIT"}},
		{"the verdict", "UPDATE executions SET status", []string{"INSERT INTO outbox", "INSERT INTO audit_log", "COMMIT"}},
	} {
		got := rec.carrying(step.cas)
		if len(got) != 1 {
			t.Fatalf("%s: %d batches carry its compare-and-swap, want 1: %q", step.name, len(got), got)
		}
		for _, w := range step.with {
			if !has(got[0], w) {
				t.Errorf("%s: the compare-and-swap's round trip does not carry %q: %q", step.name, w, got[0])
			}
		}
	}
}
