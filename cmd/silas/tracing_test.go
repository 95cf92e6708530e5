package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/storetest"
)

// otlpSink is a fake OTLP/HTTP collector: it keeps the body of every
// export (protobuf: the spans' names and attribute strings are in it as
// they are) for the canary search.
type otlpSink struct {
	srv *httptest.Server
	mu  sync.Mutex
	b   bytes.Buffer
	n   int
}

func newOTLPSink(t *testing.T) *otlpSink {
	t.Helper()
	s := &otlpSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		s.mu.Lock()
		s.b.Write(b)
		s.b.WriteByte('\n')
		s.n++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// env points serve at the sink and exports every 100 ms.
func (s *otlpSink) env() []string {
	return []string{"SILAS_TELEMETRY_TRACING_EXPORTER_URL=" + s.srv.URL, "OTEL_BSP_SCHEDULE_DELAY=100"}
}

func (s *otlpSink) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// blackhole accepts connections and never answers: a collector that hangs.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never read
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + ln.Addr().String()
}

// TestTracingExporterDown: a collector that accepts connections and never
// answers does not hold up a turn — several /run → tap → done round trips
// and plain replies go through while every export times out (the batch
// processor's bounded queue drops what does not fit) — and `silas doctor`
// names the unreachable exporter and the last export error serve
// recorded.
func TestTracingExporterDown(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	dataDir := t.TempDir()
	hole := blackhole(t)
	env := []string{"SILAS_TELEMETRY_TRACING_EXPORTER_URL=" + hole, "OTEL_BSP_SCHEDULE_DELAY=20", "OTEL_BSP_MAX_QUEUE_SIZE=16",
		"OTEL_BSP_MAX_EXPORT_BATCH_SIZE=4", "OTEL_EXPORTER_OTLP_TIMEOUT=300",
		// Each export gives up after a second instead of retrying for the
		// exporter's default minute, so the error is on record quickly.
		"OTEL_BSP_EXPORT_TIMEOUT=1000"}
	s := startServer(t, dsn, dataDir, env...)
	if !strings.Contains(s.logs.String(), "tracing: exporting spans over OTLP/HTTP") {
		t.Fatalf("serve did not start tracing:\n%s", s.logs.String())
	}
	c := s.connect(t)
	for i := range 5 {
		cmd := fmt.Sprintf("echo traced-%d", i)
		c.say("/run " + cmd)
		cd := card(c.expectNew("card for "+cmd, func(f map[string]any) bool {
			cd := card(f)
			return cd != nil && cd.Command == cmd && cd.Status == cards.StatusPending
		}))
		c.tap(string(cd.ID), "approve")
		c.cardStatus(cd.ID, cards.StatusDone)
		c.say("/help")
	}
	// The exports have been failing all along; serve records the last error.
	waitFor(t, "the export error recorded", func() bool {
		return dbCount(t, dsn, `SELECT count(*) FROM channel_state WHERE channel = 'telemetry' AND key = 'last_export_error' AND value LIKE '%"error":"_%'`) == 1
	})
	_, out, errOut := silasInEnv(t, dsn, dataDir, env, "doctor")
	for _, want := range []string{"Tracing", hole + "/v1/traces unreachable", "last export", "failed at"} {
		if !strings.Contains(out+errOut, want) {
			t.Errorf("doctor does not say %q:\n%s%s", want, out, errOut)
		}
	}
}

// TestTracingOffByDefault: without an exporter serve starts no SDK and
// doctor says tracing is off; /metrics carries the series the Grafana
// dashboard reads.
func TestTracingOffByDefault(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	dataDir := t.TempDir()
	s := startServer(t, dsn, dataDir)
	c := s.connect(t)
	c.say("/run echo untraced")
	cd := card(c.expectNew("card for echo untraced", func(f map[string]any) bool {
		cd := card(f)
		return cd != nil && cd.Command == "echo untraced" && cd.Status == cards.StatusPending
	}))
	c.tap(string(cd.ID), "approve")
	c.cardStatus(cd.ID, cards.StatusDone)
	// The dashboard's series (deploy/grafana): tap → result and the backlog.
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`silas_tap_to_result_seconds_count{status="verified"} 1`, "silas_outbox_backlog "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	// Every series the dashboard reads is one serve exports (lease series
	// exist once a lease does: another test's business).
	dash, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "silas-dashboard.json"))
	if err != nil || !json.Valid(dash) {
		t.Fatalf("deploy/grafana/silas-dashboard.json: %v (valid JSON: %v)", err, json.Valid(dash))
	}
	for _, m := range regexp.MustCompile(`silas_[a-z_]+`).FindAllString(string(dash), -1) {
		name := strings.TrimSuffix(m, "_bucket")
		if !strings.HasPrefix(name, "silas_lease_") && !strings.Contains(string(body), "\n"+name) {
			t.Errorf("the dashboard reads %s, which /metrics does not export", m)
		}
	}
	if strings.Contains(s.logs.String(), "tracing:") {
		t.Errorf("serve mentions tracing with none configured:\n%s", s.logs.String())
	}
	_, out, _ := silasIn(t, dsn, dataDir, "doctor")
	if !strings.Contains(out, "off (telemetry.tracing.exporter_url and OTEL_EXPORTER_OTLP_ENDPOINT unset)") {
		t.Errorf("doctor on tracing off:\n%s", out)
	}
}
