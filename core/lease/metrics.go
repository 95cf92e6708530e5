package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/silas-gateway/silas/core"
)

// This process's acquisitions, by lease name, and the takeovers among
// them (the previous holder's lease expired without a release: it crashed,
// was paused or cut off). Prometheus sums them across instances.
var (
	acquisitions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_lease_acquisitions_total",
		Help: "Leases acquired by this instance."}, []string{"lease"})
	takeovers = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_lease_takeovers_total",
		Help: "Leases this instance acquired after their previous holder's lease expired unreleased."}, []string{"lease"})
)

// counted records one acquisition; true when it was a takeover.
func counted(l core.Lease, self string) bool {
	acquisitions.WithLabelValues(l.Name).Inc()
	if l.Previous == "" || l.Previous == self {
		return false
	}
	takeovers.WithLabelValues(l.Name).Inc()
	return true
}

var (
	instanceOnce sync.Once
	instanceID   string
)

// InstanceID names this process as a lease holder: host, pid and a random
// suffix (a restarted process with the same pid is another holder). One
// per process, so doctor and /metrics can tell which instance holds what.
func InstanceID() string {
	instanceOnce.Do(func() {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "unknown"
		}
		var b [3]byte
		_, _ = rand.Read(b[:])
		instanceID = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	})
	return instanceID
}

// Lister lists every lease (*store.Store).
type Lister interface {
	Leases(ctx context.Context) ([]core.Lease, error)
}

// Collector exposes the leases as the database holds them when scraped —
// each one's epoch, holder, age, and whether this instance holds it — and
// this process's acquisition and takeover counters.
type Collector struct {
	st   Lister
	self string
	now  func() time.Time

	epoch, held, holder, age, up *prometheus.Desc
}

// NewCollector returns the collector for the instance self.
func NewCollector(st Lister, self string) *Collector {
	return &Collector{st: st, self: self, now: time.Now,
		epoch: prometheus.NewDesc("silas_lease_epoch", "The lease's current fencing epoch.", []string{"lease"}, nil),
		held:  prometheus.NewDesc("silas_lease_held", "1 when this instance holds the lease.", []string{"lease"}, nil),
		holder: prometheus.NewDesc("silas_lease_holder", "1 for the instance holding the lease now (none while it is free).",
			[]string{"lease", "holder"}, nil),
		age: prometheus.NewDesc("silas_lease_age_seconds", "How long the current holder has held the lease.", []string{"lease"}, nil),
		up:  prometheus.NewDesc("silas_lease_scrape_ok", "1 when the leases could be read from the database.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.epoch, c.held, c.holder, c.age, c.up} {
		ch <- d
	}
	acquisitions.Describe(ch)
	takeovers.Describe(ch)
}

// Collect implements prometheus.Collector. A database that does not
// answer within two seconds gives silas_lease_scrape_ok 0, not a failed
// scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	acquisitions.Collect(ch)
	takeovers.Collect(ch)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ls, err := c.st.Leases(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	now := c.now()
	for _, l := range ls {
		ch <- prometheus.MustNewConstMetric(c.epoch, prometheus.GaugeValue, float64(l.Epoch), l.Name)
		live := Live(l, now)
		mine := 0.0
		if live && l.Holder == c.self {
			mine = 1
		}
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, mine, l.Name)
		if live {
			ch <- prometheus.MustNewConstMetric(c.holder, prometheus.GaugeValue, 1, l.Name, l.Holder)
			ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, now.Sub(l.AcquiredAt).Seconds(), l.Name)
		}
	}
}

// Live reports whether l is held at now: a holder, and not expired (by
// the database's clock as recorded; a caller's clock may differ a little).
func Live(l core.Lease, now time.Time) bool {
	return l.Holder != "" && l.ExpiresAt.After(now)
}
