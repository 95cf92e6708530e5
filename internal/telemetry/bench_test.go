package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core/tracing"
)

// BenchmarkTurnSpans is the CPU a text turn's spans cost at 100 %
// sampling, exported over OTLP/HTTP to a collector in this process that
// discards what it gets — silas-load's `--trace-sampling 1000000
// --trace-otlp`, without the rest of the turn: silas.intake, silas.agent
// under it and the reply's silas.outbox.deliver (its own trace), each with
// the attributes the core sets. cpu-µs/turn is the process's CPU (the
// batch processor's goroutine and the export included) per turn, which is
// what the per-turn tables of BENCHMARKS.md compare.
func BenchmarkTurnSpans(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer sink.Close()
	// A queue the loop cannot fill: dropped spans would cost nothing.
	b.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "200000")
	ctx := context.Background()
	tr, err := Start(ctx, Config{ExporterURL: sink.URL, SamplingRatePerMillion: 1_000_000, Env: os.Environ()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(ctx) }()
	turn := func() {
		ictx, intake := tracing.Start(ctx, tracing.SpanIntake)
		_, agent := tracing.Start(ictx, tracing.SpanAgent)
		if agent.IsRecording() {
			agent.SetAttributes(tracing.AttrActions.Int(0))
		}
		agent.End()
		if intake.IsRecording() {
			intake.SetAttributes(tracing.AttrChannel.String("load"))
		}
		intake.End()
		_, d := tracing.Start(ctx, tracing.SpanDeliver)
		if d.IsRecording() {
			d.SetAttributes(tracing.AttrChannel.String("load"), tracing.AttrOp.String("send"))
		}
		d.End()
	}
	if b.N > 60000 {
		b.Fatalf("-benchtime %dx: at most 60000x (the queue holds 200000 spans)", b.N)
	}
	b.ReportAllocs()
	start := cpu()
	for b.Loop() {
		turn()
	}
	_ = tr.ForceFlush(ctx)
	b.ReportMetric(float64(cpu()-start)/float64(time.Microsecond)/float64(b.N), "cpu-µs/turn")
}

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestBatchOptions: the batch sizes are ours only where the standard
// variables leave them open (an option would override the variable).
func TestBatchOptions(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want int
	}{
		{nil, 2},
		{[]string{"OTEL_BSP_MAX_QUEUE_SIZE=100"}, 1},
		{[]string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE=10", "OTEL_BSP_MAX_QUEUE_SIZE=100"}, 0},
	} {
		if got := len(batchOptions(tc.env)); got != tc.want {
			t.Errorf("batchOptions(%q): %d options, want %d", tc.env, got, tc.want)
		}
	}
}
