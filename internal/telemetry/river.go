package telemetry

import (
	"bytes"
	"context"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel/trace"
)

// RiverMiddleware is River's OpenTelemetry middleware (otelriver): a span
// per job inserted and worked, the worked job linked to the span that
// queued it (its traceparent rides in the job's metadata). Only traced
// work is traced: an insert outside any span (River's periodic
// maintenance, every few seconds) and a job that carries no traceparent
// pass straight through, so an idle gateway exports nothing. nil when off.
func (t *Tracing) RiverMiddleware() []rivertype.Middleware {
	if t == nil {
		return nil
	}
	return []rivertype.Middleware{&tracedOnly{inner: otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		TracerProvider:              t.tp,
		EnableTracePropagation:      true,
		EnableWorkSpanJobKindSuffix: true,
	})}}
}

type tracedOnly struct {
	river.MiddlewareDefaults
	inner *otelriver.Middleware
}

var (
	_ rivertype.JobInsertMiddleware = (*tracedOnly)(nil)
	_ rivertype.WorkerMiddleware    = (*tracedOnly)(nil)
)

func (m *tracedOnly) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return doInner(ctx)
	}
	return m.inner.InsertMany(ctx, params, doInner)
}

func (m *tracedOnly) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if !bytes.Contains(job.Metadata, []byte(`"traceparent"`)) {
		return doInner(ctx)
	}
	return m.inner.Work(ctx, job, doInner)
}
