package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/silas-gateway/silas/core/tracing"
	"github.com/silas-gateway/silas/internal/pgtest"
)

type pingArgs struct{ N int }

func (pingArgs) Kind() string { return "telemetry_ping" }

// TestRiverSpans: a job queued under a span is a river.insert_many span in
// that trace and its work a river.work/<kind> span linked to it; a job
// queued outside any span (River's own periodic inserts) is worked
// without a span, so an idle gateway exports nothing.
func TestRiverSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := start(t, exp, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	worked := make(chan int, 2)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(_ context.Context, j *river.Job[pingArgs]) error { worked <- j.Args.N; return nil }))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Workers: workers, TestOnly: true,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}, FetchPollInterval: 100 * time.Millisecond,
		Middleware: tr.RiverMiddleware()})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Stop(context.Background()) }()

	if _, err := client.Insert(ctx, pingArgs{N: 1}, nil); err != nil {
		t.Fatal(err)
	}
	sctx, parent := tracing.Start(ctx, "parent")
	if _, err := client.Insert(sctx, pingArgs{N: 2}, nil); err != nil {
		t.Fatal(err)
	}
	parent.End()
	for range 2 {
		select {
		case <-worked:
		case <-ctx.Done():
			t.Fatal("the jobs were not worked")
		}
	}
	// The work span ends after the worker returned.
	var ins, work []tracetest.SpanStub
	for ctx.Err() == nil {
		ins, work = nil, nil
		for _, s := range exp.GetSpans() {
			switch s.Name {
			case "river.insert_many":
				ins = append(ins, s)
			case "river.work/telemetry_ping":
				work = append(work, s)
			}
		}
		if len(work) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(ins) != 1 || ins[0].SpanContext.TraceID() != parent.SpanContext().TraceID() {
		t.Fatalf("insert spans = %v, want one in the parent's trace %s", ins, parent.SpanContext().TraceID())
	}
	if len(work) != 1 {
		t.Fatalf("work spans = %d, want 1 (the traced job's only)", len(work))
	}
	linked := false
	for _, l := range work[0].Links {
		linked = linked || l.SpanContext.TraceID() == parent.SpanContext().TraceID()
	}
	if !linked && work[0].Parent.TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("the work span neither links to nor continues the trace that queued it: %+v", work[0].Links)
	}
}
