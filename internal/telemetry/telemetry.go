// Package telemetry starts OpenTelemetry tracing for `silas serve`: the
// SDK's tracer provider with a batch span processor and the OTLP/HTTP
// exporter, and what the binary wires through it — otelhttp around the
// gateway's handlers, River's otelriver middleware, a pgx query tracer and
// a log handler that adds trace_id. Off (no exporter configured) it starts
// nothing: Start returns nil and every helper is then a pass-through.
//
// It must never slow a turn when the collector is down (spans are queued,
// bounded, and dropped when the queue is full; export runs on the batch
// processor's goroutine), never export a query's arguments, and never log
// or export a header value (OTEL_EXPORTER_OTLP_HEADERS may carry a token).
package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/silas-gateway/silas/core/tracing"
)

// Config is what serve reads from telemetry.tracing.* (internal/config).
type Config struct {
	// ExporterURL is the collector's OTLP/HTTP URL; "" leaves it to the
	// OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variables, and off without them.
	ExporterURL string
	// SamplingRatePerMillion: 1–1000000 traces in a million (parent-based);
	// 0 every trace, or what OTEL_TRACES_SAMPLER says.
	SamplingRatePerMillion int
	// Version is the binary's version (service.version).
	Version string
	// Env is the process environment (os.Environ in serve).
	Env []string
	// OnExportError, when set, is told about a failed export (at most once
	// every ErrorEvery) and about the first success after one (msg "");
	// serve records it where `silas doctor` reads it.
	OnExportError func(at time.Time, msg string)
	// Exporter replaces the OTLP exporter (tests: tracetest's in-memory
	// exporter); nil means OTLP/HTTP.
	Exporter sdktrace.SpanExporter
	// Syncer exports each span as it ends instead of batching (tests).
	Syncer bool
}

// ErrorEvery bounds how often OnExportError hears of a failing exporter.
const ErrorEvery = 30 * time.Second

// Tracing is a started tracer provider. A nil *Tracing is tracing off:
// every method is then a cheap pass-through.
type Tracing struct {
	tp  *sdktrace.TracerProvider
	rec *recorder
	// Endpoint is the resolved OTLP/HTTP traces URL ("" for a test exporter).
	Endpoint string
}

// Endpoint is the traces URL cfg exports to: exporter_url (with
// /v1/traces added when it has no path), else the OTEL_* variables; ""
// means tracing is off.
func Endpoint(cfg Config) string {
	env := envMap(cfg.Env)
	if strings.EqualFold(env["OTEL_SDK_DISABLED"], "true") || strings.EqualFold(env["OTEL_TRACES_EXPORTER"], "none") {
		return ""
	}
	if cfg.ExporterURL != "" {
		return tracesURL(cfg.ExporterURL)
	}
	if v := env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]; v != "" {
		return v // used as is, as the specification says
	}
	if v := env["OTEL_EXPORTER_OTLP_ENDPOINT"]; v != "" {
		return strings.TrimSuffix(v, "/") + "/v1/traces"
	}
	return ""
}

func tracesURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String()
}

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// Start starts tracing when an exporter is configured (or cfg.Exporter is
// set) and hands the provider to the core (core/tracing.Enable) and to the
// otel globals; nil, nil when tracing is off.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Tracing, error) {
	endpoint := Endpoint(cfg)
	exp := cfg.Exporter
	if exp == nil && endpoint == "" {
		return nil, nil
	}
	if exp == nil {
		var opts []otlptracehttp.Option
		if cfg.ExporterURL != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
		}
		var err error
		if exp, err = otlptracehttp.New(ctx, opts...); err != nil {
			return nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
		}
	}
	rec := &recorder{SpanExporter: exp, notify: cfg.OnExportError, log: log}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "silas"), attribute.String("service.version", cfg.Version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSpanProcessor(scrubPaths{})}
	if cfg.Syncer {
		opts = append(opts, sdktrace.WithSyncer(rec))
	} else {
		// The batch processor's queue is bounded (4096 spans, or
		// OTEL_BSP_MAX_QUEUE_SIZE) and never blocks the span's caller:
		// a collector that is down costs dropped spans, not slow turns.
		opts = append(opts, sdktrace.WithBatcher(rec, batchOptions(cfg.Env)...))
	}
	if r := cfg.SamplingRatePerMillion; r > 0 {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(float64(r)/1e6))))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(rec.handle))
	tracing.Enable(tp)
	return &Tracing{tp: tp, rec: rec, Endpoint: endpoint}, nil
}

// Batch sizes where OTEL_BSP_* leave them open. An export of 2048 spans
// instead of the SDK's 512 costs about a tenth less CPU per span at 100 %
// sampling (BenchmarkTurnSpans: fewer requests, resources and scopes to
// encode); the queue holds two exports, so that one being sent does not
// drop the next (≈ 4 MB at most).
const (
	exportBatch = 2048
	queueSize   = 2 * exportBatch
)

// batchOptions are the batch processor's sizes unless the standard
// variables set them (options given here would override the variables,
// which the SDK reads itself).
func batchOptions(environ []string) []sdktrace.BatchSpanProcessorOption {
	env := envMap(environ)
	var opts []sdktrace.BatchSpanProcessorOption
	if env["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] == "" {
		opts = append(opts, sdktrace.WithMaxExportBatchSize(exportBatch))
	}
	if env["OTEL_BSP_MAX_QUEUE_SIZE"] == "" {
		opts = append(opts, sdktrace.WithMaxQueueSize(queueSize))
	}
	return opts
}

// Enabled reports whether spans are recorded.
func (t *Tracing) Enabled() bool { return t != nil }

// Provider is the tracer provider (a no-op one when off).
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return otel.GetTracerProvider()
	}
	return t.tp
}

// Shutdown exports what is queued (bounded by ctx) and stops tracing.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	tracing.Enable(nil)
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: shutdown: %w", err)
	}
	return nil
}

// ForceFlush exports what is queued now (tests).
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// LastError is the newest export error and when it happened ("" if the
// last export succeeded or none failed).
func (t *Tracing) LastError() (time.Time, string) {
	if t == nil {
		return time.Time{}, ""
	}
	return t.rec.last()
}

// recorder wraps the exporter to remember the last export error.
type recorder struct {
	sdktrace.SpanExporter
	notify func(time.Time, string)
	log    *slog.Logger

	mu       sync.Mutex
	errAt    time.Time
	errMsg   string
	notified time.Time
}

func (r *recorder) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := r.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		r.failed(err)
	} else {
		r.ok()
	}
	return err
}

// handle is the otel error handler: the SDK's own errors (a full queue,
// an exporter that failed) are recorded like a failed export.
func (r *recorder) handle(err error) { r.failed(err) }

func (r *recorder) failed(err error) {
	now := time.Now()
	msg := err.Error()
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	r.mu.Lock()
	r.errAt, r.errMsg = now, msg
	tell := now.Sub(r.notified) >= ErrorEvery
	if tell {
		r.notified = now
	}
	r.mu.Unlock()
	if tell {
		if r.log != nil {
			r.log.Warn("tracing: export failed; spans are dropped while the collector is unreachable", slog.String("err", msg))
		}
		if r.notify != nil {
			r.notify(now, msg)
		}
	}
}

func (r *recorder) ok() {
	r.mu.Lock()
	had := r.errMsg != ""
	r.errMsg = ""
	r.notified = time.Time{}
	r.mu.Unlock()
	if had && r.notify != nil {
		r.notify(time.Now(), "")
	}
}

func (r *recorder) last() (time.Time, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errAt, r.errMsg
}
