package flowrun

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/flowjob"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/gcdefault"
)

// BenchmarkTransition measures the engine's overhead per node transition
// on a 100-node flow, on PostgreSQL: a chain of 100 control.wait nodes,
// each timer delivered by hand as River would — one Advance is one
// transaction (read the run, the wait's success and the next node's start
// stored as transitions, the run compare-and-swapped, the progress card
// queued, the next timer job inserted). No action runs, so this is the
// runtime's own cost. Reports p50/p99 per Advance, and this process's CPU
// per Advance (user+system, the mean: on a shared machine the figure
// that moves least with other load; PostgreSQL's is not in it) and the
// bytes it allocates (the mean; what sets how often the collector runs).
func BenchmarkTransition(b *testing.B) {
	// The collector as `silas serve` sets it (internal/gcdefault: GOGC=200
	// unless the environment says otherwise): the slowest transitions are
	// the ones a collection lands on, and a test binary would otherwise
	// run with Go's default of 100, which serve does not.
	gcdefault.Apply()
	var f strings.Builder
	f.WriteString("name: chain\nversion: \"1\"\nnodes:\n")
	for i := range 100 {
		fmt.Fprintf(&f, "  - {id: n%d, type: control.wait, config: {duration: 1s}}\n", i)
	}
	f.WriteString("edges:\n")
	for i := range 99 {
		fmt.Fprintf(&f, "  - {from: n%d, to: n%d}\n", i, i+1)
	}
	bd := setup(b, map[string]string{"chain.yaml": f.String()})
	var times []time.Duration
	var cpu time.Duration
	var alloc uint64
	var ms goruntime.MemStats
	b.ResetTimer()
	for b.Loop() {
		row, err := Start(bd.ctx, bd.st, bd.rt.cfg.Catalog, "chain", nil, origin(), 4)
		if err != nil {
			b.Fatal(err)
		}
		if err := bd.rt.Advance(bd.ctx, row.ID, nil); err != nil {
			b.Fatal(err)
		}
		goruntime.ReadMemStats(&ms)
		alloc -= ms.TotalAlloc
		for i := range 100 {
			t0, c0 := time.Now(), cpuTime()
			if err := bd.rt.Advance(bd.ctx, row.ID, &flowjob.Timer{Node: fmt.Sprintf("n%d", i), Kind: "wait", Attempt: 1}); err != nil {
				b.Fatal(err)
			}
			times = append(times, time.Since(t0))
			cpu += cpuTime() - c0
		}
		goruntime.ReadMemStats(&ms)
		alloc += ms.TotalAlloc
		if r, _ := bd.st.GetFlowRun(bd.ctx, row.ID); r.Status != "succeeded" {
			b.Fatalf("run %s", r.Status)
		}
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms/transition")
	b.ReportMetric(float64(times[len(times)*99/100].Microseconds())/1000, "p99-ms/transition")
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(times)), "cpu-ms/transition")
	b.ReportMetric(float64(alloc)/1024/float64(len(times)), "alloc-kB/transition")
}

const gateOnly = `name: waiter
version: "1"
nodes:
  - id: ask
    type: control.gate
    config: {prompt: "Go on?", choices: [yes, no]}
  - id: after
    type: system.log
    config: {message: "answered ${{ nodes.ask.response.choice }}"}
edges:
  - {from: ask, to: after}
`

// BenchmarkWaitingRuns: 1,000 runs each waiting at a gate. Reports what
// they cost while they wait — rows and bytes in PostgreSQL, the heap this
// process keeps for them (after a GC), the CPU of one sweep over them (the
// only periodic work: one query) — and how long it takes to resume them:
// one gate answered in a turn's transaction, and all of them one by one.
func BenchmarkWaitingRuns(b *testing.B) {
	const n = 1000
	bd := setup(b, map[string]string{"waiter.yaml": gateOnly})
	for b.Loop() {
		var ms0, ms1 goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&ms0)
		ids := make([]string, 0, n)
		for range n {
			row, err := Start(bd.ctx, bd.st, bd.rt.cfg.Catalog, "waiter", nil, origin(), 4)
			if err != nil {
				b.Fatal(err)
			}
			if err := bd.rt.Advance(bd.ctx, row.ID, nil); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, row.ID)
		}
		// River would have worked the start jobs: gone, as after a run.
		if _, err := bd.st.Pool().Exec(bd.ctx, `DELETE FROM river_job WHERE kind = 'silas_flow_step'`); err != nil {
			b.Fatal(err)
		}
		goruntime.GC()
		goruntime.ReadMemStats(&ms1)
		b.ReportMetric(float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc))/n, "heap-B/waiting-run")
		var rows, bytes int64
		if err := bd.st.Pool().QueryRow(bd.ctx, `SELECT
			(SELECT count(*) FROM flow_runs) + (SELECT count(*) FROM flow_attempts) + (SELECT count(*) FROM flow_transitions)
			+ (SELECT count(*) FROM river_job WHERE kind = 'silas_flow_step'),
			pg_total_relation_size('flow_runs') + pg_total_relation_size('flow_attempts') + pg_total_relation_size('flow_transitions')`).Scan(&rows, &bytes); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rows)/n, "db-rows/waiting-run")
		b.ReportMetric(float64(bytes)/n, "db-bytes/waiting-run")
		// The sweep is all the periodic work there is; it finds nothing.
		cpu0 := cpuTime()
		t0 := time.Now()
		const sweeps = 20
		for range sweeps {
			if err := bd.rt.Resume(bd.ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000/sweeps, "ms/sweep")
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/sweeps, "cpu-ms/sweep")
		if list, err := bd.st.FlowRunsToSweep(bd.ctx); err != nil || len(list) != 0 {
			b.Fatalf("the sweep would advance %d waiting runs (%v)", len(list), err)
		}
		// Resume: answer every gate, each in a transaction of its own.
		var times []time.Duration
		for _, id := range ids {
			var card string
			if err := bd.st.Pool().QueryRow(bd.ctx, `SELECT card FROM flow_attempts WHERE run_id = $1 AND node = 'ask'`, id).Scan(&card); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			err := bd.st.Do(bd.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
				o := &shown{}
				_, err := bd.rt.Tap(ctx, tx, core.StoredTurn{Seq: 1, Turn: origin()}, core.TrustOwner, core.Tap{Card: cards.ID(card), Choice: "a1"}, o)
				return o.audit, err
			})
			if err != nil {
				b.Fatal(err)
			}
			times = append(times, time.Since(t0))
		}
		slices.Sort(times)
		b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms/resume")
		b.ReportMetric(float64(times[len(times)*99/100].Microseconds())/1000, "p99-ms/resume")
		var done int
		if err := bd.st.Pool().QueryRow(bd.ctx, `SELECT count(*) FROM flow_runs WHERE status = 'succeeded'`).Scan(&done); err != nil || done < n {
			b.Fatalf("%d of %d runs finished (%v)", done, n, err)
		}
	}
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
