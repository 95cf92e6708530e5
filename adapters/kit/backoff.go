package kit

import (
	"context"
	"time"
)

// Backoff doubles from Min to Max. The zero value of Cur starts at Min.
type Backoff struct {
	Min, Max, Cur time.Duration
}

// Next returns the next delay.
func (b *Backoff) Next() time.Duration {
	if b.Cur == 0 {
		b.Cur = b.Min
	} else {
		b.Cur = min(b.Cur*2, b.Max)
	}
	return b.Cur
}

// Reset starts again from Min.
func (b *Backoff) Reset() { b.Cur = 0 }

// SleepCtx sleeps for d or until ctx ends; it returns ctx.Err() when ctx
// ended first (or already had for d <= 0).
func SleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
