package telemetry

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Handler wraps h in otelhttp's server instrumentation, one span per
// request named after its method and route pattern (never its path, which
// may carry a link token); off, h itself. Incoming traceparent headers are
// ignored (an empty propagator): a caller outside cannot join or force a
// trace.
func (t *Tracing) Handler(h http.Handler, operation string) http.Handler {
	if t == nil {
		return h
	}
	return otelhttp.NewHandler(h, operation,
		otelhttp.WithTracerProvider(t.tp),
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator()),
		// Scrapes and probes every few seconds would each be a trace.
		otelhttp.WithFilter(func(r *http.Request) bool {
			switch r.URL.Path {
			case "/metrics", "/healthz", "/readyz":
				return false
			}
			return true
		}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern != "" {
				return "HTTP " + r.Pattern
			}
			return "HTTP " + r.Method
		}))
}

// scrubPaths keeps a request span's url.path to its first segment
// ("/login", "/telegram/…"): a path may carry an id or a webhook secret,
// and the first segment is what an operator filters on.
type scrubPaths struct{}

func (scrubPaths) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	// Only otelhttp's server spans carry url.path; Attributes copies the
	// span's attributes, an allocation every other span need not pay
	// (BenchmarkTurnSpans).
	if s.SpanKind() != trace.SpanKindServer {
		return
	}
	for _, kv := range s.Attributes() {
		if kv.Key == "url.path" {
			s.SetAttributes(attribute.String("url.path", firstSegment(kv.Value.AsString())))
			return
		}
	}
}

func (scrubPaths) OnEnd(sdktrace.ReadOnlySpan)      {}
func (scrubPaths) Shutdown(context.Context) error   { return nil }
func (scrubPaths) ForceFlush(context.Context) error { return nil }

func firstSegment(p string) string {
	rest := strings.TrimPrefix(p, "/")
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return "/" + rest[:i] + "/…"
	}
	return "/" + rest
}
