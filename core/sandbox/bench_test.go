//go:build linux

package sandbox

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
)

// BenchmarkRunTrue measures the sandbox's start-up cost: one isolated run of
// `true` from Run's call to its return (the engine's tap → execution start
// adds its own commits on top). It reports p50/p99 alongside ns/op.
func BenchmarkRunTrue(b *testing.B) {
	s, err := New(Config{BaseDir: filepath.Join(b.TempDir(), "base")})
	if err != nil {
		b.Fatal(err)
	}
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		res, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("run: %v exit %d %s", err, res.ExitCode, res.Stderr)
		}
		ds = append(ds, time.Since(t0))
		_ = s.Cleanup(res.Dir)
	}
	b.StopTimer()
	slices.Sort(ds)
	if len(ds) > 0 {
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, "p99-ms")
	}
}
