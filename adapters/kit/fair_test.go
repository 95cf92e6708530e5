package kit

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestLimiterIsFairUnderSaturation: 50 chats each send as fast as the
// limiter lets them, which wants 50 messages a second against Telegram's
// global 30. Every chat must get its turn: no message waits more than about
// twice the mean. (Before the waiters were queued, every freed token woke
// all of them at once and the fastest goroutine won, so some chats starved:
// p50 1.0s, p99 6.0s, max 10.0s where the mean was 1.7s.)
//
// synctest runs the limiter on virtual time: time.After and time.Sleep
// advance only when every goroutine of the bubble is blocked, so the
// figures are exact, not timing-dependent.
func TestLimiterIsFairUnderSaturation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const chats, perChat = 50, 30
		l := NewLimiter(telegramLimits, RealClock{}, isGroup)
		var mu sync.Mutex
		var waits []time.Duration
		var starts []time.Time
		perChatStarts := map[int64][]time.Time{}
		var wg sync.WaitGroup
		for c := range chats {
			chat := int64(1000 + c)
			wg.Go(func() {
				for range perChat {
					asked := time.Now()
					rel, err := l.Wait(context.Background(), chat)
					if err != nil {
						t.Error(err)
						return
					}
					now := time.Now()
					mu.Lock()
					waits = append(waits, now.Sub(asked))
					starts = append(starts, now)
					perChatStarts[chat] = append(perChatStarts[chat], now)
					mu.Unlock()
					time.Sleep(20 * time.Millisecond) // the request itself
					rel()
				}
			})
		}
		wg.Wait()
		slices.Sort(waits)
		var sum time.Duration
		for _, w := range waits {
			sum += w
		}
		mean := sum / time.Duration(len(waits))
		p50, p99, worst := waits[len(waits)/2], waits[len(waits)*99/100], waits[len(waits)-1]
		t.Logf("%d messages: mean %s, p50 %s, p99 %s, max %s", len(waits), mean, p50, p99, worst)
		if worst > 2*mean {
			t.Errorf("max wait %s is more than twice the mean %s: some chats starve", worst, mean)
		}
		// Fair, and still within the limits and not needlessly slow.
		if n := maxInWindow(starts, time.Second); n > 30 {
			t.Errorf("%d messages in one second overall", n)
		}
		for chat, ts := range perChatStarts {
			for i := 1; i < len(ts); i++ {
				if gap := ts[i].Sub(ts[i-1]); gap < time.Second {
					t.Fatalf("chat %d: messages %s apart", chat, gap)
				}
			}
		}
		if mean > 2*time.Second {
			t.Errorf("mean wait %s; 50 chats at 30/s need about 1.7s", mean)
		}
	})
}

// A waiter that gives up in the global queue passes its turn on; the ones
// behind it are not stuck.
func TestLimiterQueueSurvivesCancelledWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter[int64](Limits{GlobalPerSecond: 1}, RealClock{}, nil)
		rel, err := l.Wait(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		ctx2, cancel2 := context.WithCancel(context.Background())
		ctx3, cancel3 := context.WithCancel(context.Background())
		errs := make(chan error, 2)
		order := make(chan int64, 2)
		for _, w := range []struct {
			chat int64
			ctx  context.Context
		}{{2, ctx2}, {3, ctx3}} {
			go func() {
				r, err := l.Wait(w.ctx, w.chat)
				if err == nil {
					order <- w.chat
					r()
				}
				errs <- err
			}()
			synctest.Wait() // 2 queues before 3
		}
		cancel2() // the head gives up
		synctest.Wait()
		if err := <-errs; err != context.Canceled {
			t.Fatalf("cancelled head: %v", err)
		}
		rel()
		if err := <-errs; err != nil {
			t.Fatalf("the waiter behind a cancelled head: %v", err)
		}
		if got := <-order; got != 3 {
			t.Fatalf("chat %d sent; want 3", got)
		}
		cancel3()
	})
}
