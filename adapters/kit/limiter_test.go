package kit

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
)

// telegramLimits are Telegram's documented limits, the demanding case.
var telegramLimits = Limits{PerChatInterval: time.Second, GroupPerMinute: 20, GlobalPerSecond: 30}

// isGroup is Telegram's rule: groups have negative chat ids.
func isGroup(chat int64) bool { return chat < 0 }

// vclock is a virtual clock: After advances it at once.
type vclock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *vclock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *vclock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.t = c.t.Add(d)
	}
	ch := make(chan time.Time, 1)
	ch <- c.t
	return ch
}

func (c *vclock) advance(d time.Duration) { c.After(d) }

// maxInWindow is the largest number of times within any window of length w.
func maxInWindow(ts []time.Time, w time.Duration) int {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func TestLimiterScheduleKeepsTelegramLimits(t *testing.T) {
	vc := &vclock{t: time.Unix(1_800_000_000, 0)}
	l := NewLimiter(telegramLimits, vc, isGroup)
	ctx := context.Background()
	starts := map[int64][]time.Time{}
	var all []time.Time
	send := func(chat int64) {
		rel, err := l.Wait(ctx, chat)
		if err != nil {
			t.Fatal(err)
		}
		at := vc.Now()
		starts[chat] = append(starts[chat], at)
		all = append(all, at)
		vc.advance(time.Millisecond) // the request itself
		rel()
	}
	begin := vc.Now()
	// A mix: two busy private chats, two busy groups, and many chats with one
	// message each.
	for i := range 400 {
		switch i % 5 {
		case 0:
			send(1001)
		case 1:
			send(-100)
		case 2:
			send(-200)
		case 3:
			send(2002)
		default:
			send(int64(10_000 + i))
		}
	}
	for chat, ts := range starts {
		for i := 1; i < len(ts); i++ {
			if gap := ts[i].Sub(ts[i-1]); gap < time.Second {
				t.Fatalf("chat %d: messages %s apart", chat, gap)
			}
		}
		if chat < 0 {
			if n := maxInWindow(ts, time.Minute); n > 20 {
				t.Fatalf("group %d: %d messages in a minute", chat, n)
			}
		}
	}
	if n := maxInWindow(all, time.Second); n > 30 {
		t.Fatalf("%d messages in one second overall", n)
	}
	// Not needlessly slow either: 80 messages to each group need 4 minutes
	// (20 a minute), and the groups pace the whole sequential run.
	if d := vc.Now().Sub(begin); d > 5*time.Minute {
		t.Fatalf("400 messages took %s of virtual time", d)
	}
}

func TestLimiterFanOutIsNotSlowerThanNeeded(t *testing.T) {
	vc := &vclock{t: time.Unix(1_800_000_000, 0)}
	l := NewLimiter(telegramLimits, vc, isGroup)
	begin := vc.Now()
	var all []time.Time
	for i := range 100 {
		rel, err := l.Wait(context.Background(), int64(1+i))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, vc.Now())
		rel()
	}
	if n := maxInWindow(all, time.Second); n > 30 {
		t.Fatalf("%d in a second", n)
	}
	if d := vc.Now().Sub(begin); d < 3*time.Second || d > 4*time.Second {
		t.Fatalf("100 messages to 100 chats took %s; want about 3s at 30/s", d)
	}
}

func TestLimiterPauseAndCancel(t *testing.T) {
	vc := &vclock{t: time.Unix(1_800_000_000, 0)}
	l := NewLimiter(telegramLimits, vc, isGroup)
	ctx := context.Background()
	l.Pause(5, 7*time.Second)
	before := vc.Now()
	rel, err := l.Wait(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if d := vc.Now().Sub(before); d < 7*time.Second {
		t.Fatalf("paused chat sent after %s; want retry_after (7s)", d)
	}
	// While the chat is busy, a cancelled wait returns at once.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Wait(cctx, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait on a busy chat with a cancelled context: %v", err)
	}
	rel()
	rel() // idempotent
	if _, err := l.Wait(ctx, 5); err != nil {
		t.Fatal(err)
	}
}

// TestLimiterSeededGroupWaits: a group whose previous process sent its 20
// messages of the minute (SeedGroup) waits until the first of them is a
// minute old; a group seeded with sends over a minute ago does not.
func TestLimiterSeededGroupWaits(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name   string
		offset time.Duration // of the 20 seeded sends, one a second, from start
		wait   time.Duration // the next send's earliest start after start
	}{
		{"full minute", -20 * time.Second, 40 * time.Second},
		{"stale", -90 * time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vc := &vclock{t: start}
			l := NewLimiter(telegramLimits, vc, isGroup)
			var seed []time.Time
			for i := range 20 {
				seed = append(seed, start.Add(tc.offset+time.Duration(i)*time.Second))
			}
			l.SeedGroup(-7, seed)
			rel, err := l.Wait(context.Background(), -7)
			if err != nil {
				t.Fatal(err)
			}
			rel()
			if got := vc.Now().Sub(start); got != tc.wait {
				t.Errorf("first send after %s; want %s", got, tc.wait)
			}
		})
	}
}

// TestLimiterSendCheck: a sender that lost the right to send while it
// waited (its send check fails, core.WithSendCheck) gets the check's
// error, not a turn: nothing counts as sent, so the next message to the
// chat and the next global token are not held back by it.
func TestLimiterSendCheck(t *testing.T) {
	vc := &vclock{t: time.Unix(1_800_000_000, 0)}
	l := NewLimiter(Limits{PerChatInterval: time.Second, GlobalPerSecond: 1}, vc, isGroup)
	vc.advance(time.Second) // past the start's per-chat pause
	stale := errors.New("stale")
	refused := core.WithSendCheck(context.Background(), func() error { return stale })
	if rel, err := l.Wait(refused, 7); !errors.Is(err, stale) || rel != nil {
		t.Fatalf("Wait with a failing check = %v, %v; want the check's error", rel != nil, err)
	}
	before := vc.Now()
	rel, err := l.Wait(context.Background(), 7)
	if err != nil {
		t.Fatal(err)
	}
	rel()
	if waited := vc.Now().Sub(before); waited != 0 {
		t.Errorf("the next message waited %s after a refused one; want none", waited)
	}
	passes := core.WithSendCheck(context.Background(), func() error { return nil })
	vc.advance(time.Second)
	if rel, err := l.Wait(passes, 8); err != nil {
		t.Fatal(err)
	} else {
		rel()
	}
}
