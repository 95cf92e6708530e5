package engine

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	turnsReceived, turnsDuplicate, turnsRejected, turnsProcessed prometheus.Counter
	turnLatency                                                  prometheus.Histogram
	policyDecisions, approvals, executions, outbox               *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		turnsReceived:   prometheus.NewCounter(prometheus.CounterOpts{Name: "silas_turns_received_total", Help: "Turns stored by the inbox."}),
		turnsDuplicate:  prometheus.NewCounter(prometheus.CounterOpts{Name: "silas_turns_duplicate_total", Help: "Redelivered turns ignored."}),
		turnsRejected:   prometheus.NewCounter(prometheus.CounterOpts{Name: "silas_turns_rejected_total", Help: "Turns refused at intake."}),
		turnsProcessed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "silas_turns_processed_total", Help: "Turns processed."}),
		turnLatency:     prometheus.NewHistogram(prometheus.HistogramOpts{Name: "silas_turn_processing_seconds", Help: "Time from dequeue to reply enqueued.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		policyDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_policy_decisions_total", Help: "Risk policy decisions."}, []string{"decision"}),
		approvals:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_approval_decisions_total", Help: "Approval taps by result."}, []string{"result"}),
		executions:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_executions_total", Help: "Execution state transitions."}, []string{"status"}),
		outbox:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_outbox_deliveries_total", Help: "Outbox delivery attempts by result."}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.turnsReceived, m.turnsDuplicate, m.turnsRejected, m.turnsProcessed, m.turnLatency,
			m.policyDecisions, m.approvals, m.executions, m.outbox)
	}
	return m
}
