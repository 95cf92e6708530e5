package telemetry

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
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
