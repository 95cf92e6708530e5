package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/doctor"
	"github.com/silas-gateway/silas/internal/telemetry"
)

// tracer is serve's tracing (internal/telemetry): a nil Tracing is off,
// and its methods pass through. Export errors are recorded in the
// database, where `silas doctor` reads the last one.
type tracer struct {
	*telemetry.Tracing
	st atomic.Pointer[store.Store]
}

// The channel_state row the last export error is kept in.
const (
	tracingState    = "telemetry"
	tracingStateKey = "last_export_error"
)

type exportError struct {
	At    time.Time `json:"at"`
	Error string    `json:"error"` // "" once an export succeeded again
}

// startTracing starts tracing when telemetry.tracing.exporter_url or the
// OTEL_* variables name a collector; otherwise nothing is started.
func startTracing(ctx context.Context, cfg *config.Config, log *slog.Logger) (*tracer, error) {
	tr := &tracer{}
	t, err := telemetry.Start(ctx, telemetryConfig(cfg, tr), log)
	if err != nil {
		return nil, err
	}
	tr.Tracing = t
	if t != nil {
		log.Info("tracing: exporting spans over OTLP/HTTP", slog.String("endpoint", t.Endpoint),
			slog.Int("sampling_rate_per_million", cfg.Telemetry.Tracing.SamplingRatePerMillion))
	}
	return tr, nil
}

func telemetryConfig(cfg *config.Config, tr *tracer) telemetry.Config {
	tc := telemetry.Config{ExporterURL: cfg.Telemetry.Tracing.ExporterURL, SamplingRatePerMillion: cfg.Telemetry.Tracing.SamplingRatePerMillion,
		Version: version, Env: os.Environ()}
	if tr != nil {
		tc.OnExportError = tr.exportError
	}
	return tc
}

// Record keeps export errors in st from now on.
func (tr *tracer) Record(st *store.Store) { tr.st.Store(st) }

// exportError runs on the batch processor's goroutine, never a turn's.
func (tr *tracer) exportError(at time.Time, msg string) {
	st := tr.st.Load()
	if st == nil {
		return
	}
	b, _ := json.Marshal(exportError{At: at.UTC(), Error: msg})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = st.SetState(ctx, tracingState, tracingStateKey, string(b))
}

// stopTracing exports what is queued (a few seconds at most: a collector
// that is down does not hold up the stop).
func stopTracing(tr *tracer, log *slog.Logger) {
	if tr == nil || !tr.Enabled() {
		return
	}
	tr.st.Store(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		log.Warn("tracing: could not export every span at shutdown", slog.String("err", err.Error()))
	}
}

// doctorTracing reports whether tracing is on, whether the collector takes
// OTLP/HTTP now, and the last export error serve recorded.
func doctorTracing(ctx context.Context, env *cliEnv, cfg *config.Config) []doctor.Finding {
	endpoint := telemetry.Endpoint(telemetryConfig(cfg, nil))
	if endpoint == "" {
		return doctor.Skipped("off (telemetry.tracing.exporter_url and OTEL_EXPORTER_OTLP_ENDPOINT unset): no spans are recorded")
	}
	var l doctor.List
	if err := telemetry.Probe(ctx, endpoint, os.Environ(), 5*time.Second); err != nil {
		l.Add(doctor.Error, "exporter", "%v; spans are dropped until it answers (turns are not slowed)", err)
	} else {
		l.Add(doctor.OK, "exporter", "%s takes OTLP/HTTP", endpoint)
	}
	if cfg.Database.URL == "" {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "pg")); err != nil {
			return l
		}
	}
	err := withStore(ctx, env, func(st *store.Store) error {
		v, ok, err := st.GetState(ctx, tracingState, tracingStateKey)
		if err != nil || !ok {
			if ok || err == nil {
				l.Add(doctor.OK, "last export", "no export error recorded")
			}
			return err
		}
		var e exportError
		if err := json.Unmarshal([]byte(v), &e); err != nil {
			return fmt.Errorf("tracing state: %w", err)
		}
		if e.Error == "" {
			l.Add(doctor.OK, "last export", "succeeded (after an error at %s)", e.At.Local().Format("2006-01-02 15:04:05"))
		} else {
			l.Add(doctor.Warn, "last export", "failed at %s: %s", e.At.Local().Format("2006-01-02 15:04:05"), e.Error)
		}
		return nil
	})
	if err != nil {
		l.Add(doctor.Warn, "last export", "not read: %v", err)
	}
	return l
}
