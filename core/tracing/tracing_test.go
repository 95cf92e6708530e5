package tracing

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
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

// TestExecutionLinksToTheTap: the execution an approval's tap queued is a
// child of the proposal's span and links to the tap's; proposed with
// tracing off (no traceparent stored), it joins the tap's trace. The tap
// is read once.
func TestExecutionLinksToTheTap(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	Enable(tp)
	t.Cleanup(func() { Enable(nil) })
	pctx, proposal := Start(context.Background(), SpanPolicy)
	stored := Traceparent(pctx)
	proposal.End()

	for _, tc := range []struct {
		name, traceparent string
		parent            func(tap trace.SpanContext) trace.SpanContext
	}{
		{"proposal traced", stored, func(trace.SpanContext) trace.SpanContext { return proposal.SpanContext() }},
		{"proposal untraced", "", func(tap trace.SpanContext) trace.SpanContext { return tap }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "ap-" + tc.name
			tctx, tap := Start(context.Background(), SpanDecide)
			Tapped(tctx, id, tc.traceparent, time.Now())
			tap.End()
			_, x := StartFrom(context.Background(), SpanExecute, tc.traceparent, TapOf(id))
			x.End()
			spans := exp.GetSpans()
			got := spans[len(spans)-1]
			want := tc.parent(tap.SpanContext())
			if got.Parent.SpanID() != want.SpanID() || got.SpanContext.TraceID() != want.TraceID() {
				t.Errorf("execution's parent = %v, want %v", got.Parent, want)
			}
			if tc.traceparent != "" {
				linked := false
				for _, l := range got.Links {
					linked = linked || l.SpanContext.SpanID() == tap.SpanContext().SpanID()
				}
				if !linked {
					t.Errorf("execution links %+v, want the tap %v", got.Links, tap.SpanContext())
				}
			}
			if TapOf(id).IsValid() {
				t.Error("the tap is still remembered after its execution read it")
			}
		})
	}
}

// BenchmarkSpan is the cost of one span as the core starts them (Start,
// attributes set only while recording, End): off (the default), and at
// 100 % sampling into the SDK's batch processor with a no-op exporter.
// silas-load's per-turn figures (BENCHMARKS.md) multiply it by the spans
// of a turn.
func BenchmarkSpan(b *testing.B) {
	span := func(ctx context.Context) {
		_, s := Start(ctx, SpanTurn)
		if s.IsRecording() {
			s.SetAttributes(AttrChannel.String("load"), AttrApprovalID.String("01JABCDEF"))
		}
		s.End()
	}
	b.Run("off", func(b *testing.B) {
		Enable(nil)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			span(ctx)
		}
	})
	b.Run("sampled", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		Enable(tp)
		defer func() { Enable(nil); _ = tp.Shutdown(context.Background()) }()
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			span(ctx)
		}
	})
}
