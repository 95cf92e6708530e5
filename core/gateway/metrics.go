package gateway

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/silas-gateway/silas/core"
)

// metrics are the rooms' counters, each registered once here; the turn
// pipeline registers its own (core/engine). Policy decisions and approval
// taps are counted for a turn and a task's step alike (propose.Counter).
type metrics struct {
	policyDecisions, approvals, executions, outbox *prometheus.CounterVec
	// tapToResult is the time from the approving tap to the execution's
	// settled state (verified, failed, refused, interrupted).
	tapToResult *prometheus.HistogramVec
}

// backlogCounter counts the outbox jobs waiting (core/store).
type backlogCounter interface {
	OutboxBacklog(ctx context.Context) (int64, error)
}

func newMetrics(reg prometheus.Registerer, backlog backlogCounter) *metrics {
	m := &metrics{
		policyDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_policy_decisions_total", Help: "Risk policy decisions."}, []string{"decision"}),
		approvals:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_approval_decisions_total", Help: "Approval taps by result."}, []string{"result"}),
		executions:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_executions_total", Help: "Execution state transitions."}, []string{"status"}),
		outbox:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_outbox_deliveries_total", Help: "Outbox delivery attempts by result."}, []string{"result"}),
		tapToResult: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "silas_tap_to_result_seconds",
			Help:    "Time from the approving tap to the execution's settled state, by that state.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)}, []string{"status"}),
	}
	if reg != nil {
		reg.MustRegister(m.policyDecisions, m.approvals, m.executions, m.outbox, m.tapToResult)
		if backlog != nil {
			// Read at scrape time, bounded: a slow database shows as a gap.
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "silas_outbox_backlog",
				Help: "Outbox jobs not delivered yet (all conversations, every instance)."}, func() float64 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				n, err := backlog.OutboxBacklog(ctx)
				if err != nil {
					return -1
				}
				return float64(n)
			}))
		}
	}
	return m
}

// settled observes the tap → result time of an execution that reached a
// final state.
func (m *metrics) settled(a core.ApprovalRequest, to core.ExecStatus, now time.Time) {
	switch to {
	case core.ExecVerified, core.ExecFailed, core.ExecRefused, core.ExecInterrupted:
		if !a.DecidedAt.IsZero() {
			m.tapToResult.WithLabelValues(string(to)).Observe(now.Sub(a.DecidedAt).Seconds())
		}
	}
}

func (m *metrics) Policy(decision string)  { m.policyDecisions.WithLabelValues(decision).Inc() }
func (m *metrics) Decision(outcome string) { m.approvals.WithLabelValues(outcome).Inc() }
