package telegram

import (
	"context"
	"sync"
	"time"
)

// limiter keeps outbound messages within Telegram's limits: at most one per
// PerChatInterval in a chat, GroupPerMinute per group and GlobalPerSecond
// overall.
//
// Limits are measured from the END of earlier requests, so they hold for
// the times requests arrive at Telegram however long they spend in transit:
//   - messages to one chat go out one at a time (a per-chat semaphore); the
//     next starts PerChatInterval after the previous one completed, and a
//     group's message starts a minute after the completion of the one
//     GroupPerMinute messages earlier;
//   - overall, a message holds one of GlobalPerSecond tokens from its start
//     until one second after it completed, so no one-second window can see
//     more than GlobalPerSecond arrivals.
//
// wait blocks until a message may be sent (honouring ctx) and returns the
// release func to call when the request is done. A 429 pauses the chat for
// retry_after (pause).
type limiter struct {
	lim   Limits
	clock clock
	// start is when this limiter began. The previous process may have sent
	// to any chat just before it stopped, so a chat's first message waits
	// until PerChatInterval after start (a restart cannot double the
	// per-chat rate). A group's per-minute count is not known across a
	// restart: if it was exhausted, Telegram answers 429 and the outbox
	// waits retry_after.
	start time.Time

	mu     sync.Mutex
	chats  map[int64]*chatLimit
	active int         // messages in flight
	ends   []time.Time // completions within the last second, oldest first
	freed  chan struct{}
}

type chatLimit struct {
	sem    chan struct{} // held while a message to the chat is in flight
	last   time.Time     // completion of the last message
	recent []time.Time   // completions within the last minute (groups)
	until  time.Time     // paused by a 429 until then
	refs   int
}

// clock is the limiter's time source; tests use a virtual one.
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func newLimiter(l Limits, c clock) *limiter {
	return &limiter{lim: l, clock: c, start: c.Now(), chats: map[int64]*chatLimit{}, freed: make(chan struct{})}
}

// isGroup reports whether a chat id names a group, supergroup or channel
// (negative ids); private chats have the user's positive id.
func isGroup(chat int64) bool { return chat < 0 }

// wait reserves a send slot for chat.
func (l *limiter) wait(ctx context.Context, chat int64) (release func(), err error) {
	l.mu.Lock()
	c := l.chats[chat]
	if c == nil {
		c = &chatLimit{sem: make(chan struct{}, 1), last: l.start}
		l.chats[chat] = c
	}
	c.refs++
	l.mu.Unlock()
	unref := func() {
		l.mu.Lock()
		c.refs--
		l.mu.Unlock()
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		unref()
		return nil, ctx.Err()
	}
	giveUp := func(err error) (func(), error) {
		<-c.sem
		unref()
		return nil, err
	}
	// The chat (and group) budget: we hold the chat, so only its earlier,
	// completed messages count.
	for {
		l.mu.Lock()
		now := l.clock.Now()
		at := c.last.Add(l.lim.PerChatInterval)
		if c.until.After(at) {
			at = c.until
		}
		if isGroup(chat) {
			c.recent = pruneBefore(c.recent, now.Add(-time.Minute))
			if n := len(c.recent); n >= l.lim.GroupPerMinute {
				if t := c.recent[n-l.lim.GroupPerMinute].Add(time.Minute); t.After(at) {
					at = t
				}
			}
		}
		l.mu.Unlock()
		if !at.After(now) {
			break
		}
		select {
		case <-ctx.Done():
			return giveUp(ctx.Err())
		case <-l.clock.After(at.Sub(now)):
		}
	}
	// The global budget.
	for {
		l.mu.Lock()
		now := l.clock.Now()
		l.ends = pruneBefore(l.ends, now.Add(-time.Second))
		if l.active+len(l.ends) < l.lim.GlobalPerSecond {
			l.active++
			l.prune(now)
			l.mu.Unlock()
			break
		}
		freed := l.freed
		var timer <-chan time.Time
		if len(l.ends) > 0 {
			timer = l.clock.After(l.ends[0].Add(time.Second).Sub(now))
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return giveUp(ctx.Err())
		case <-freed:
		case <-timer:
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			now := l.clock.Now()
			l.active--
			l.ends = append(l.ends, now)
			c.last = now
			if isGroup(chat) {
				c.recent = append(c.recent, now)
			}
			close(l.freed)
			l.freed = make(chan struct{})
			l.mu.Unlock()
			<-c.sem
			unref()
		})
	}, nil
}

// pause holds chat for d (Telegram's retry_after).
func (l *limiter) pause(chat int64, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.chats[chat]
	if c == nil {
		c = &chatLimit{sem: make(chan struct{}, 1)}
		l.chats[chat] = c
	}
	if t := l.clock.Now().Add(d); t.After(c.until) {
		c.until = t
	}
}

// prune forgets idle chats; called with l.mu held.
func (l *limiter) prune(now time.Time) {
	if len(l.chats) < 1024 {
		return
	}
	for id, c := range l.chats {
		if c.refs == 0 && now.Sub(c.last) > 2*time.Minute && now.After(c.until) {
			delete(l.chats, id)
		}
	}
}

// pruneBefore drops the leading times not after cutoff.
func pruneBefore(ts []time.Time, cutoff time.Time) []time.Time {
	i := 0
	for i < len(ts) && !ts[i].After(cutoff) {
		i++
	}
	if i == 0 {
		return ts
	}
	return append(ts[:0], ts[i:]...)
}
