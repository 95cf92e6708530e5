package kit

import (
	"sync"
	"time"

	"github.com/silas-gateway/silas/core"
)

// Liveness is what an adapter knows of its inbound connection, reported
// as core.ChannelHealth (core.HealthReporter): the last sign of life from
// the platform and the connection state. Safe for concurrent use; the
// zero value is "not started".
type Liveness struct {
	mu sync.Mutex
	h  core.ChannelHealth
}

// Heard records a sign of life at now (an event, a poll round trip, a
// keepalive), with the connection in state.
func (l *Liveness) Heard(now time.Time, state string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.h.Connected, l.h.State = true, state
	// Signs of life can be recorded out of order (an ACK read on a tick
	// after an event): the last one never moves back.
	if now.After(l.h.LastEvent) {
		l.h.LastEvent = now
	}
}

// Lost records that the connection is down (or failing) in state; the
// last sign of life stays what it was.
func (l *Liveness) Lost(state string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.h.Connected, l.h.State = false, state
}

// Probe records what a platform probe said.
func (l *Liveness) Probe(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.h.Probe = s
}

// Health is the current report.
func (l *Liveness) Health() core.ChannelHealth {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h
}
