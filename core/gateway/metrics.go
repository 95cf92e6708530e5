package gateway

import "github.com/prometheus/client_golang/prometheus"

// metrics are the rooms' counters, each registered once here; the turn
// pipeline registers its own (core/engine). Policy decisions and approval
// taps are counted for a turn and a task's step alike (propose.Counter).
type metrics struct {
	policyDecisions, approvals, executions, outbox *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		policyDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_policy_decisions_total", Help: "Risk policy decisions."}, []string{"decision"}),
		approvals:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_approval_decisions_total", Help: "Approval taps by result."}, []string{"result"}),
		executions:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_executions_total", Help: "Execution state transitions."}, []string{"status"}),
		outbox:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_outbox_deliveries_total", Help: "Outbox delivery attempts by result."}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.policyDecisions, m.approvals, m.executions, m.outbox)
	}
	return m
}

func (m *metrics) Policy(decision string)  { m.policyDecisions.WithLabelValues(decision).Inc() }
func (m *metrics) Decision(outcome string) { m.approvals.WithLabelValues(outcome).Inc() }
