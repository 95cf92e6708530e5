package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestOffCostsNothing: with tracing off a span allocates nothing (the hot
// path of every turn starts several).
func TestOffCostsNothing(t *testing.T) {
	Enable(nil)
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		c, span := Start(ctx, SpanTurn)
		if span.IsRecording() {
			span.SetAttributes(AttrChannel.String("x"))
		}
		Remember(c, "card")
		span.End()
		_ = Traceparent(c)
	}); n != 0 {
		t.Fatalf("%v allocations per span with tracing off, want 0", n)
	}
}

func TestTraceparentRoundTrip(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	Enable(tp)
	t.Cleanup(func() { Enable(nil) })
	ctx, span := Start(context.Background(), SpanTurn)
	tp1 := Traceparent(ctx)
	span.End()
	if got := Parse(tp1); got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("Parse(%q) = %v, want %v", tp1, got, span.SpanContext())
	}
	for _, bad := range []string{"", "00-zz-yy-01", "not a traceparent"} {
		if Parse(bad).IsValid() {
			t.Errorf("Parse(%q) is valid", bad)
		}
	}
	// A continued span is a child of the stored one.
	_, cont := StartFrom(context.Background(), SpanExecute, tp1)
	cont.End()
	spans := exp.GetSpans()
	last := spans[len(spans)-1]
	if last.Parent.SpanID() != span.SpanContext().SpanID() || last.SpanContext.TraceID() != span.SpanContext().TraceID() {
		t.Fatalf("StartFrom parent = %v, want %v", last.Parent, span.SpanContext())
	}
}
