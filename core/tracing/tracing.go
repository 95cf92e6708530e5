// Package tracing is the core's window on OpenTelemetry traces: the span
// names and attribute keys every room uses, and Start, which costs nothing
// but a branch while tracing is off (the default): no context, no span, no
// allocation. internal/telemetry starts the SDK and hands its provider to
// Enable; this package only uses the API.
//
// It must never put message text, a command's argv, output, a model's
// prompt or answer, or a secret value in a span: attributes are ids,
// names, enums and counts (the keys below), so an exported trace holds
// nothing the audit log would not show by name.
package tracing

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope is the instrumentation scope of the core's spans.
const Scope = "github.com/silas-gateway/silas/core"

// Span names, one per step a card goes through from proposal to result.
const (
	SpanIntake       = "silas.intake"         // engine.Deliver: validate, redact, store (or answer inline)
	SpanTurn         = "silas.turn"           // a conversation worker answers one stored turn
	SpanAgent        = "silas.agent"          // the agent's answer to a turn
	SpanModel        = "silas.model"          // one call to the model endpoint
	SpanPolicy       = "silas.policy"         // trust + risk policy on one proposed action
	SpanApprovalWait = "silas.approval.wait"  // from the card to the tap, in the proposal's trace
	SpanDecide       = "silas.decide"         // a tap decided (row locked, token minted, nonce consumed)
	SpanExecute      = "silas.execute"        // claim → sandbox → verification, in the proposal's trace
	SpanSandbox      = "silas.sandbox"        // the program in the sandbox
	SpanVerify       = "silas.verify"         // the checks on the result
	SpanDeliver      = "silas.outbox.deliver" // one outbox job handed to its channel
)

// Attribute keys. Values are ids, enums and counts only. On the spans of
// every turn, tap and duplicate are set only when true and delivered only
// when false: every attribute is paid for again in the export
// (internal/telemetry BenchmarkTurnSpans), and a text turn's spans carry
// none of them.
const (
	AttrApprovalID   = attribute.Key("silas.approval_id")
	AttrChannel      = attribute.Key("silas.channel")
	AttrTap          = attribute.Key("silas.tap")
	AttrInline       = attribute.Key("silas.inline")
	AttrDuplicate    = attribute.Key("silas.duplicate")
	AttrDecision     = attribute.Key("silas.policy.decision")
	AttrRisk         = attribute.Key("silas.risk")
	AttrOutcome      = attribute.Key("silas.outcome")
	AttrStatus       = attribute.Key("silas.status")
	AttrOp           = attribute.Key("silas.outbox.op")
	AttrExitCode     = attribute.Key("silas.exit_code")
	AttrTimedOut     = attribute.Key("silas.timed_out")
	AttrIsolation    = attribute.Key("silas.isolation")
	AttrActions      = attribute.Key("silas.actions")
	AttrVerified     = attribute.Key("silas.verified")
	AttrCardID       = attribute.Key("silas.card_id")
	AttrDelivered    = attribute.Key("silas.delivered")
	AttrModel        = attribute.Key("gen_ai.request.model")
	AttrRole         = attribute.Key("silas.model.role")
	AttrInputTokens  = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
)

type box struct{ t trace.Tracer }

var (
	on     atomic.Bool
	tracer atomic.Pointer[box]
	// off is the span handed out while tracing is off: boxed once, so
	// returning it allocates nothing.
	off trace.Span = noop.Span{}
)

// Enable sends the core's spans to tp (internal/telemetry's provider);
// Enable(nil) turns tracing off again (tests, shutdown).
func Enable(tp trace.TracerProvider) {
	if tp == nil {
		on.Store(false)
		tracer.Store(nil)
		return
	}
	tracer.Store(&box{t: tp.Tracer(Scope)})
	on.Store(true)
}

// On reports whether spans are recorded at all.
func On() bool { return on.Load() }

// Start starts a span named name under the span in ctx. Off, it returns
// ctx unchanged and a no-op span; callers set attributes inside
// `if span.IsRecording()` so that they cost nothing then either.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, off
	}
	b := tracer.Load()
	if b == nil {
		return ctx, off
	}
	return b.t.Start(ctx, name, opts...)
}

// StartFrom starts a span whose parent is the span traceparent names (a
// proposal's, stored on its approval row), linked to the span in ctx
// (whatever woke the work) and to each valid span in also (the tap that
// decided it: TapOf): a tap minutes later continues the proposal's trace.
// Without a valid traceparent the first valid span of also is the parent
// (the work joins the tap's trace), else it is Start.
func StartFrom(ctx context.Context, name, traceparent string, also ...trace.SpanContext) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, off
	}
	parent := Parse(traceparent)
	var links []trace.Link
	if here := trace.SpanContextFromContext(ctx); here.IsValid() {
		links = append(links, trace.Link{SpanContext: here})
	}
	for _, sc := range also {
		switch {
		case !sc.IsValid():
		case !parent.IsValid():
			parent = sc
		case !sc.Equal(parent):
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if !parent.IsValid() {
		return Start(ctx, name)
	}
	return Start(trace.ContextWithRemoteSpanContext(ctx, parent), name, trace.WithLinks(links...))
}

// Traceparent is the W3C traceparent of the span in ctx, "" when tracing
// is off or there is none. It is what an approval row keeps.
func Traceparent(ctx context.Context) string {
	if !on.Load() || !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// Parse reads a W3C traceparent; the zero SpanContext when it is not one.
func Parse(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}

// Tapped records a decision on approval id, proposed at since in the trace
// traceparent names: the span in ctx (the tap's decision) links to the
// proposal, and the wait from the card to now is a span of its own in the
// proposal's trace, so the trace shows where the minutes went. The tap's
// span is kept for the execution it queues (TapOf).
func Tapped(ctx context.Context, id, traceparent string, since time.Time) {
	if !on.Load() {
		return
	}
	here := trace.SpanFromContext(ctx)
	remember(&taps, id, here.SpanContext())
	parent := Parse(traceparent)
	if !parent.IsValid() {
		return
	}
	here.AddLink(trace.Link{SpanContext: parent})
	var opts []trace.SpanStartOption
	if sc := here.SpanContext(); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	opts = append(opts, trace.WithTimestamp(since), trace.WithAttributes(AttrApprovalID.String(id)))
	_, wait := Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), SpanApprovalWait, opts...)
	wait.End()
}

// LinkTo links span to the span traceparent names (a proposal's): for a
// decision made inside a store transaction, whose context carries the
// span's context but not the span itself (core/store runs ops under their
// caller's span context), so Tapped could not add the link there.
func LinkTo(span trace.Span, traceparent string) {
	if !span.IsRecording() {
		return
	}
	if sc := Parse(traceparent); sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc})
	}
}

// TapOf is the span of the tap that decided approval id in this process
// (Tapped), for its execution to link to; forgotten once read. The zero
// SpanContext when there is none: tracing was off, or the execution runs
// in another process than the tap (a takeover, a restart), which links to
// the traceparent the decision stored on the approval row instead
// (core/store TransitionApproval, approvals.tap_traceparent).
func TapOf(id string) trace.SpanContext {
	if !on.Load() {
		return trace.SpanContext{}
	}
	taps.Lock()
	sc := taps.m[id]
	delete(taps.m, id)
	taps.Unlock()
	return sc
}

// cards remembers, per card (message key), the span its newest state was
// written in, so that the outbox's delivery of it — on another goroutine,
// without the context — joins that trace. Bounded: a full map is emptied
// (a delivery whose card was forgotten starts a trace of its own, still
// carrying the card's id).
var cards = spans{m: map[string]trace.SpanContext{}}

// taps remembers, per approval, the span of the tap that decided it
// (Tapped → TapOf), bounded like cards: a tap whose execution never
// starts here is forgotten with the rest once the map is full.
var taps = spans{m: map[string]trace.SpanContext{}}

type spans struct {
	sync.Mutex
	m map[string]trace.SpanContext
}

const maxCards = 4096

func remember(s *spans, key string, sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	s.Lock()
	if len(s.m) >= maxCards {
		clear(s.m)
	}
	s.m[key] = sc
	s.Unlock()
}

// Remember notes that card key's newest state was written under the span
// in ctx.
func Remember(ctx context.Context, key string) {
	if !on.Load() {
		return
	}
	remember(&cards, key, trace.SpanContextFromContext(ctx))
}

// Recall is ctx under the span Remember noted for key, if any.
func Recall(ctx context.Context, key string) context.Context {
	if !on.Load() {
		return ctx
	}
	cards.Lock()
	sc, ok := cards.m[key]
	cards.Unlock()
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
