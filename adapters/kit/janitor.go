package kit

import (
	"context"
	"time"
)

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
