package storetest

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// JobReads is a pgx query tracer (store.Options.QueryTracer) counting a
// store's reads of a conversation's next outbox job (NextOutboxJob's
// query): the reads back that lanes make of jobs not handed to them in
// memory.
type JobReads struct {
	mu sync.Mutex
	n  int
}

func (r *JobReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "o.message_key, o.payload, o.attempts") {
		r.mu.Lock()
		r.n++
		r.mu.Unlock()
	}
	return ctx
}

func (r *JobReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Count is how many reads were traced so far.
func (r *JobReads) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}
