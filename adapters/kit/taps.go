package kit

import (
	"context"
	"sync"
	"time"
)

// PendingTaps holds the platform handles of taps delivered to the core and
// not answered yet (Telegram's callback query id, Slack's response_url,
// Discord's interaction token), keyed by the turn's EventID. The core
// answers through core.TapAnswerer; taps it does not answer in time are
// answered quietly by the janitor, so the platform's spinner stops.
type PendingTaps[H any] struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]pendingTap[H]
}

type pendingTap[H any] struct {
	h  H
	at time.Time
}

// NewPendingTaps returns an empty registry using now (time.Now when nil).
func NewPendingTaps[H any](now func() time.Time) *PendingTaps[H] {
	if now == nil {
		now = time.Now
	}
	return &PendingTaps[H]{now: now, m: map[string]pendingTap[H]{}}
}

// Add registers a tap. Register it before delivering the turn: the core may
// answer before Deliver returns.
func (p *PendingTaps[H]) Add(eventID string, h H) {
	p.mu.Lock()
	p.m[eventID] = pendingTap[H]{h: h, at: p.now()}
	p.mu.Unlock()
}

// Take removes the tap and returns its handle; false when it is unknown
// (answered already, or the process restarted).
func (p *PendingTaps[H]) Take(eventID string) (H, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.m[eventID]
	delete(p.m, eventID)
	return t.h, ok
}

// Due removes and returns the taps registered at least after ago.
func (p *PendingTaps[H]) Due(after time.Duration) []H {
	now := p.now()
	var due []H
	p.mu.Lock()
	defer p.mu.Unlock()
	for ev, t := range p.m {
		if now.Sub(t.at) >= after {
			due = append(due, t.h)
			delete(p.m, ev)
		}
	}
	return due
}

// Len is the number of pending taps.
func (p *PendingTaps[H]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}

// Janitor calls sweep every interval until ctx ends.
func Janitor(ctx context.Context, every time.Duration, sweep func(context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sweep(ctx)
		}
	}
}
