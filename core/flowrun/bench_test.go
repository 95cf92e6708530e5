package flowrun

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core/flowjob"
)

// BenchmarkTransition measures the engine's overhead per node transition
// on a 100-node flow, on PostgreSQL: a chain of 100 control.wait nodes,
// each timer delivered by hand as River would — one Advance is one
// transaction (read the run, the wait's success and the next node's start
// stored as transitions, the run compare-and-swapped, the progress card
// queued, the next timer job inserted). No action runs, so this is the
// runtime's own cost. Reports p50/p99 per Advance.
func BenchmarkTransition(b *testing.B) {
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
	b.ResetTimer()
	for b.Loop() {
		row, err := Start(bd.ctx, bd.st, bd.rt.cfg.Catalog, "chain", nil, origin(), 4)
		if err != nil {
			b.Fatal(err)
		}
		if err := bd.rt.Advance(bd.ctx, row.ID, nil); err != nil {
			b.Fatal(err)
		}
		for i := range 100 {
			t0 := time.Now()
			if err := bd.rt.Advance(bd.ctx, row.ID, &flowjob.Timer{Node: fmt.Sprintf("n%d", i), Kind: "wait", Attempt: 1}); err != nil {
				b.Fatal(err)
			}
			times = append(times, time.Since(t0))
		}
		if r, _ := bd.st.GetFlowRun(bd.ctx, row.ID); r.Status != "succeeded" {
			b.Fatalf("run %s", r.Status)
		}
	}
	b.StopTimer()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms/transition")
	b.ReportMetric(float64(times[len(times)*99/100].Microseconds())/1000, "p99-ms/transition")
}
