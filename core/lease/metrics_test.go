package lease

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// gathered renders the samples of one metric as "name{k=v,…} value"
// lines (labels in Prometheus' order).
func gathered(t *testing.T, reg *prometheus.Registry, metric string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			fmt.Fprintf(&b, "%s{%s} %g\n", metric, strings.Join(ls, ","), v)
		}
	}
	return b.String()
}

// /metrics shows who holds each lease under which epoch, whether this
// instance does, and counts a takeover (the previous holder's lease
// expired unreleased) apart from a plain acquisition.
func TestCollectorShowsHolderEpochAndTakeovers(t *testing.T) {
	t.Parallel()
	st := setup(t)
	const name = "metrics-test"
	pa := &pausable{Store: st}
	a, err := New(pa, Config{Name: name, Holder: "A", TTL: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ga, err := a.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(st, "B"))
	want := func(metric, expect string) {
		t.Helper()
		if got := gathered(t, reg, metric); got != expect {
			t.Errorf("%s:\n%s\nwant:\n%s", metric, got, expect)
		}
	}
	takeoversOf := func() int {
		return strings.Count(gathered(t, reg, "silas_lease_takeovers_total"), "lease="+name+"} 1")
	}
	want("silas_lease_holder", `silas_lease_holder{holder=A,lease=metrics-test} 1
`)
	want("silas_lease_held", `silas_lease_held{lease=metrics-test} 0
`)
	if takeoversOf() != 0 {
		t.Fatal("a first acquisition counted as a takeover")
	}

	// A stops renewing (paused); B takes over when it expires.
	pa.pause()
	b, err := New(st, Config{Name: name, Holder: "B", TTL: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	gb, err := b.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer gb.Release(t.Context())
	pa.resume()
	<-ga.Context().Done()
	if takeoversOf() != 1 {
		t.Errorf("takeovers: %s", gathered(t, reg, "silas_lease_takeovers_total"))
	}
	want("silas_lease_epoch", `silas_lease_epoch{lease=metrics-test} 2
`)
	want("silas_lease_held", `silas_lease_held{lease=metrics-test} 1
`)
}
