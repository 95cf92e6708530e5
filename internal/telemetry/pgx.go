package telemetry

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// QueryTracer is a pgx tracer that records a span per query and per batch
// — only under a span that already exists (River's and the pool's own
// polling would otherwise each start a trace). A span names the operation
// (SELECT, INSERT, …) and never carries the statement's arguments, which
// may be message text or sealed secrets. nil when tracing is off, so pgx
// does nothing at all.
func (t *Tracing) QueryTracer() pgx.QueryTracer {
	if t == nil {
		return nil
	}
	return &pgxTracer{t: t.tp.Tracer("github.com/silas-gateway/silas/core/store")}
}

type pgxTracer struct{ t trace.Tracer }

var (
	_ pgx.QueryTracer = (*pgxTracer)(nil)
	_ pgx.BatchTracer = (*pgxTracer)(nil)
)

var dbSystem = attribute.String("db.system.name", "postgresql")

func (p *pgxTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	op := operation(data.SQL)
	ctx, _ = p.t.Start(ctx, "db "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(dbSystem, attribute.String("db.operation.name", op)))
	return ctx
}

func (p *pgxTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	end(ctx, data.Err)
}

func (p *pgxTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	n := 0
	if data.Batch != nil {
		n = data.Batch.Len()
	}
	ctx, _ = p.t.Start(ctx, "db batch", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(dbSystem, attribute.Int("db.operation.batch.size", n)))
	return ctx
}

func (p *pgxTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (p *pgxTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	end(ctx, data.Err)
}

// end ends the span TraceQueryStart/TraceBatchStart started (when it
// started one: ctx then holds a recording span of this tracer).
func end(ctx context.Context, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if err != nil {
		// The error's class, not its text: a constraint violation's
		// message quotes the row's values.
		span.SetStatus(codes.Error, "query failed")
	}
	span.End()
}

// operation is the statement's first keyword, upper-cased (bounded: a
// handful of values).
func operation(sql string) string {
	sql = strings.TrimSpace(sql)
	for strings.HasPrefix(sql, "--") || strings.HasPrefix(sql, "/*") {
		i := strings.IndexAny(sql, "\n")
		if strings.HasPrefix(sql, "/*") {
			i = strings.Index(sql, "*/") + 1
		}
		if i <= 0 {
			return "QUERY"
		}
		sql = strings.TrimSpace(sql[i+1:])
	}
	end := strings.IndexFunc(sql, func(r rune) bool { return r == ' ' || r == '\n' || r == '\t' || r == '(' || r == ';' })
	if end < 0 {
		end = len(sql)
	}
	switch w := strings.ToUpper(sql[:end]); w {
	case "SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "BEGIN", "COMMIT", "ROLLBACK", "LISTEN", "NOTIFY", "UNLISTEN", "COPY", "DO", "CREATE", "ALTER", "DROP", "GRANT", "SET", "SAVEPOINT", "RELEASE", "LOCK", "TRUNCATE":
		return w
	}
	return "QUERY"
}
