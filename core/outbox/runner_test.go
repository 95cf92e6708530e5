package outbox

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// goid is the current goroutine's id, from its stack trace's header.
func goid() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return strings.Fields(string(b))[1]
}

// goidChannel is a cardChannel that records the goroutine of each send.
type goidChannel struct {
	*cardChannel
	mu sync.Mutex
	on []string
}

func (c *goidChannel) Send(ctx context.Context, m core.OutMessage) (core.MessageRef, error) {
	c.mu.Lock()
	c.on = append(c.on, goid())
	c.mu.Unlock()
	return c.cardChannel.Send(ctx, m)
}

// TestLanesReuseAnIdleGoroutine: a lane started while a goroutine that ran
// one waits for the next runs on it, not on a new one; the waiting
// goroutine ends with the lanes' context.
func TestLanesReuseAnIdleGoroutine(t *testing.T) {
	t.Parallel()
	w := newHandWorld(t, "")
	ch := &goidChannel{cardChannel: w.ch}
	w.ob.channels = map[core.ChannelName]core.Channel{"test": ch}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	for _, conv := range []core.ConversationID{"test:one", "test:two"} {
		w.ob.HandOff(conv, w.queue(w.st, conv, send("card-"+string(conv), cards.StatusPending)), 0)
		w.waitIdle()
		waitFor("an idle lane goroutine", func() bool { return w.ob.idleRunners.Load() == 1 })
	}
	ch.mu.Lock()
	on := append([]string(nil), ch.on...)
	ch.mu.Unlock()
	if len(on) != 2 || on[0] != on[1] {
		t.Fatalf("sends on goroutines %q; want two on the one that waited", on)
	}
}
