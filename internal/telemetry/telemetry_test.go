package telemetry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/silas-gateway/silas/core/tracing"
	"github.com/silas-gateway/silas/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "off by default", cfg: Config{}, want: ""},
		{name: "exporter_url gets the traces path", cfg: Config{ExporterURL: "http://localhost:4318"}, want: "http://localhost:4318/v1/traces"},
		{name: "exporter_url with a path is kept", cfg: Config{ExporterURL: "https://otel.example/custom"}, want: "https://otel.example/custom"},
		{name: "OTEL_EXPORTER_OTLP_ENDPOINT", cfg: Config{Env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318/"}}, want: "http://c:4318/v1/traces"},
		{name: "the traces variable is used as is", cfg: Config{Env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://t:1/x"}}, want: "http://t:1/x"},
		{name: "OTEL_SDK_DISABLED wins", cfg: Config{ExporterURL: "http://localhost:4318", Env: []string{"OTEL_SDK_DISABLED=true"}}, want: ""},
		{name: "OTEL_TRACES_EXPORTER=none wins", cfg: Config{ExporterURL: "http://localhost:4318", Env: []string{"OTEL_TRACES_EXPORTER=none"}}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Endpoint(tc.cfg); got != tc.want {
				t.Errorf("Endpoint = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestOff: without an exporter nothing starts and every helper passes
// through.
func TestOff(t *testing.T) {
	tr, err := Start(context.Background(), Config{}, nil)
	if err != nil || tr != nil {
		t.Fatalf("Start = %v, %v; want nil, nil", tr, err)
	}
	if tracing.On() {
		t.Fatal("core tracing is on")
	}
	h := http.NotFoundHandler()
	lh := slog.NewTextHandler(&bytes.Buffer{}, nil)
	if tr.Enabled() || tr.QueryTracer() != nil || tr.RiverMiddleware() != nil || tr.LogHandler(lh) != lh || fmt.Sprint(tr.Handler(h, "x")) != fmt.Sprint(h) {
		t.Fatal("an off Tracing does not pass through")
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// start starts tracing into an in-memory exporter for one test (not
// parallel: the core's tracer is process-wide).
func start(t *testing.T, exp sdktrace.SpanExporter, notify func(time.Time, string)) *Tracing {
	t.Helper()
	tr, err := Start(context.Background(), Config{Exporter: exp, Syncer: true, OnExportError: notify}, nil)
	if err != nil || tr == nil {
		t.Fatalf("Start = %v, %v", tr, err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr
}

func TestLogLinesCarryTraceID(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := start(t, exp, nil)
	var buf bytes.Buffer
	log := slog.New(tr.LogHandler(slog.NewTextHandler(&buf, nil))).With(slog.String("room", "test"))
	ctx, span := tracing.Start(context.Background(), "t")
	log.InfoContext(ctx, "inside")
	span.End()
	log.Info("outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := "trace_id=" + span.SpanContext().TraceID().String()
	if len(lines) != 2 || !strings.Contains(lines[0], want) || strings.Contains(lines[1], "trace_id") {
		t.Fatalf("log lines:\n%s\nwant %s on the first only", buf.String(), want)
	}
}

// TestRequestPathsAreCut: a request span keeps the first segment of the
// path only (a webhook path may carry a secret).
func TestRequestPathsAreCut(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := start(t, exp, nil)
	const secret = "s3cr3t-PATH-9c1"
	h := tr.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), "silas")
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/telegram/"+secret+"?t="+secret, nil))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/metrics", nil))
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 (scrapes are not traced): %v", len(spans), spans)
	}
	got := fmt.Sprint(spans[0].Attributes)
	if strings.Contains(got, secret) || !strings.Contains(got, "/telegram/…") {
		t.Fatalf("request span attributes = %s", got)
	}
}

// failing is an exporter whose exports fail while down is set.
type failing struct {
	sdktrace.SpanExporter
	mu   sync.Mutex
	down bool
}

func (f *failing) ExportSpans(ctx context.Context, s []sdktrace.ReadOnlySpan) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errors.New("connection refused")
	}
	return f.SpanExporter.ExportSpans(ctx, s)
}

func TestLastExportError(t *testing.T) {
	f := &failing{SpanExporter: tracetest.NewInMemoryExporter(), down: true}
	var mu sync.Mutex
	var told []string
	tr := start(t, f, func(_ time.Time, msg string) { mu.Lock(); told = append(told, msg); mu.Unlock() })
	for range 3 {
		_, s := tracing.Start(context.Background(), "t")
		s.End()
	}
	if _, msg := tr.LastError(); msg != "connection refused" {
		t.Fatalf("LastError = %q", msg)
	}
	f.mu.Lock()
	f.down = false
	f.mu.Unlock()
	_, s := tracing.Start(context.Background(), "t")
	s.End()
	if _, msg := tr.LastError(); msg != "" {
		t.Fatalf("LastError after a success = %q", msg)
	}
	mu.Lock()
	defer mu.Unlock()
	// Told once while failing (ErrorEvery), then of the recovery.
	if len(told) != 2 || told[0] != "connection refused" || told[1] != "" {
		t.Fatalf("told %q", told)
	}
}

func TestProbe(t *testing.T) {
	var got http.Header
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer ok.Close()
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/v1/traces"
	ln.Close()
	env := []string{"OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20hidden-123"}
	if err := Probe(context.Background(), ok.URL+"/v1/traces", env, 5*time.Second); err != nil {
		t.Fatalf("Probe(a collector) = %v", err)
	}
	if got.Get("Authorization") != "Bearer hidden-123" || got.Get("Content-Type") != "application/x-protobuf" {
		t.Errorf("probe headers = %v", got)
	}
	for _, u := range []string{notFound.URL + "/v1/traces", closed} {
		err := Probe(context.Background(), u, env, 5*time.Second)
		if err == nil || !strings.Contains(err.Error(), u) || strings.Contains(err.Error(), "hidden-123") {
			t.Errorf("Probe(%s) = %v", u, err)
		}
	}
}

// TestQueryTracer: a query under a span gets a span naming its operation,
// never its arguments; a query outside any span (River's polling) none.
func TestQueryTracer(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := start(t, exp, nil)
	dsn := pgtest.NewDatabase(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer = tr.QueryTracer()
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const arg = "cAnArY-query-arg"
	var s string
	if err := conn.QueryRow(ctx, "SELECT $1::text", arg).Scan(&s); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans for a query outside any span", n)
	}
	sctx, span := tracing.Start(ctx, "parent")
	if err := conn.QueryRow(sctx, "  select $1::text", arg).Scan(&s); err != nil {
		t.Fatal(err)
	}
	br := conn.SendBatch(sctx, &pgx.Batch{QueuedQueries: []*pgx.QueuedQuery{{SQL: "SELECT 1"}}})
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	span.End()
	var names []string
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name)
		if strings.Contains(fmt.Sprint(s.Attributes, s.Status), arg) {
			t.Errorf("span %s carries the query's argument", s.Name)
		}
	}
	if got := strings.Join(names, ","); got != "db SELECT,db batch,parent" {
		t.Errorf("spans = %s", got)
	}
}
