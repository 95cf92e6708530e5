package engine

import "github.com/prometheus/client_golang/prometheus"

// metrics are the turn pipeline's; the rooms' counters (policy decisions,
// approvals, executions, deliveries) are registered by core/gateway.
type metrics struct {
	turnsReceived, turnsDuplicate, turnsRejected, turnsProcessed prometheus.Counter
	turnLatency                                                  prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		turnsReceived:  prometheus.NewCounter(prometheus.CounterOpts{Name: "silas_turns_received_total", Help: "Turns stored by the inbox."}),
		turnsDuplicate: prometheus.NewCounter(prometheus.CounterOpts{Name: "silas_turns_duplicate_total", Help: "Redelivered turns ignored."}),
		turnsRejected:  prometheus.NewCounter(prometheus.CounterOpts{Name: "silas_turns_rejected_total", Help: "Turns refused at intake."}),
		turnsProcessed: prometheus.NewCounter(prometheus.CounterOpts{Name: "silas_turns_processed_total", Help: "Turns processed."}),
		turnLatency:    prometheus.NewHistogram(prometheus.HistogramOpts{Name: "silas_turn_processing_seconds", Help: "Time from dequeue to reply enqueued.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
	}
	if reg != nil {
		reg.MustRegister(m.turnsReceived, m.turnsDuplicate, m.turnsRejected, m.turnsProcessed, m.turnLatency)
	}
	return m
}
