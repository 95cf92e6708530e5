package kit

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/silas-gateway/silas/core"
)

// Limits are a platform's outbound rate limits.
type Limits struct {
	// PerChatInterval is the minimum time between two messages (sends and
	// edits) in one chat; 0 means no per-chat pause beyond one message in
	// flight at a time.
	PerChatInterval time.Duration `yaml:"per_chat_interval"`
	// GroupPerMinute caps messages to one group chat per minute; 0 means no
	// cap.
	GroupPerMinute int `yaml:"group_per_minute"`
	// GlobalPerSecond caps messages across all chats per second; 0 means no
	// cap.
	GlobalPerSecond int `yaml:"global_per_second"`
}

// Limiter keeps outbound messages within a platform's limits: at most one
// per PerChatInterval in a chat, GroupPerMinute per group and
// GlobalPerSecond overall.
//
// Limits are measured from the END of earlier requests, so they hold for
// the times requests arrive at the platform however long they spend in
// transit:
//   - messages to one chat go out one at a time, in the order they asked;
//     the next starts PerChatInterval after the previous one completed, and
//     a group's message starts a minute after the completion of the one
//     GroupPerMinute messages earlier;
//   - overall, a message holds one of GlobalPerSecond tokens from its start
//     until one second after it completed, so no one-second window sees
//     more than GlobalPerSecond arrivals.
//
// Waiters for the global budget are served first come, first served: when
// more chats want to send than the global limit allows, each waits its turn
// rather than racing for every freed token (where an unlucky chat could
// lose again and again).
//
// A Limiter starts as if every chat had just sent a message: the previous
// process may have, just before it stopped, so a restart cannot double the
// per-chat rate. A group's per-minute count is not known across a restart
// unless the caller keeps it and hands it back with SeedGroup; otherwise, if
// it was exhausted, the platform answers 429 and Pause holds the chat.
type Limiter[K comparable] struct {
	lim     Limits
	clock   Clock
	isGroup func(K) bool
	start   time.Time

	mu     sync.Mutex
	chats  map[K]*chatLimit
	active int         // messages in flight
	ends   []time.Time // completions within the last second, oldest first
	freed  chan struct{}
	queue  []*globalWaiter // waiting for the global budget, in arrival order
}

type chatLimit struct {
	sem    chan struct{} // held while a message to the chat is in flight
	last   time.Time     // completion of the last message
	recent []time.Time   // completions within the last minute (groups)
	until  time.Time     // paused by a 429 until then
	refs   int
}

type globalWaiter struct {
	turn chan struct{} // closed when the waiter reaches the head
	head bool
}

// NewLimiter returns a limiter on clock c (RealClock{} outside tests).
// isGroup tells which chats the per-group limit applies to; nil means none.
func NewLimiter[K comparable](l Limits, c Clock, isGroup func(K) bool) *Limiter[K] {
	if isGroup == nil {
		isGroup = func(K) bool { return false }
	}
	return &Limiter[K]{lim: l, clock: c, isGroup: isGroup, start: c.Now(), chats: map[K]*chatLimit{}, freed: make(chan struct{})}
}

// PerChatInterval is the limiter's minimum time between two messages to
// one chat (an adapter's core.Paced answer).
func (l *Limiter[K]) PerChatInterval() time.Duration { return l.lim.PerChatInterval }

// Wait blocks until a message to chat may be sent (or ctx ends) and returns
// the release func to call once the request is done; calling it again does
// nothing. After its waits it runs ctx's send check (core.CheckSend) and
// returns that error instead when the sender may no longer send.
func (l *Limiter[K]) Wait(ctx context.Context, chat K) (release func(), err error) {
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
	// Senders blocked on a channel are woken in FIFO order, which keeps a
	// chat's messages in the order they asked.
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
	if err := l.waitChat(ctx, chat, c); err != nil {
		return giveUp(err)
	}
	if err := l.waitGlobal(ctx); err != nil {
		return giveUp(err)
	}
	// The sender may have lost the right to send while it waited (a
	// process paused here by its host wakes with its waits long over):
	// the last check before the platform call (core.WithSendCheck). The
	// global token goes back unused: no message went out.
	if err := core.CheckSend(ctx); err != nil {
		l.mu.Lock()
		l.active--
		close(l.freed)
		l.freed = make(chan struct{})
		l.mu.Unlock()
		return giveUp(err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			now := l.clock.Now()
			l.active--
			l.ends = append(l.ends, now)
			c.last = now
			if l.isGroup(chat) {
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

// waitChat waits for the chat's (and group's) budget. The caller holds the
// chat, so only its earlier, completed messages count.
func (l *Limiter[K]) waitChat(ctx context.Context, chat K, c *chatLimit) error {
	for {
		l.mu.Lock()
		now := l.clock.Now()
		at := c.last.Add(l.lim.PerChatInterval)
		if c.until.After(at) {
			at = c.until
		}
		if g := l.lim.GroupPerMinute; g > 0 && l.isGroup(chat) {
			c.recent = pruneBefore(c.recent, now.Add(-time.Minute))
			if n := len(c.recent); n >= g {
				if t := c.recent[n-g].Add(time.Minute); t.After(at) {
					at = t
				}
			}
		}
		l.mu.Unlock()
		if !at.After(now) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.clock.After(at.Sub(now)):
		}
	}
}

// waitGlobal queues for the global budget and takes a token at the head of
// the queue.
func (l *Limiter[K]) waitGlobal(ctx context.Context) error {
	w := &globalWaiter{turn: make(chan struct{})}
	l.mu.Lock()
	l.queue = append(l.queue, w)
	if len(l.queue) == 1 {
		l.promote()
	}
	l.mu.Unlock()
	select {
	case <-w.turn:
	case <-ctx.Done():
		l.leave(w)
		return ctx.Err()
	}
	for {
		l.mu.Lock()
		now := l.clock.Now()
		l.ends = pruneBefore(l.ends, now.Add(-time.Second))
		if l.lim.GlobalPerSecond <= 0 || l.active+len(l.ends) < l.lim.GlobalPerSecond {
			l.active++
			l.queue = l.queue[1:]
			l.promote()
			l.prune(now)
			l.mu.Unlock()
			return nil
		}
		freed := l.freed
		var timer <-chan time.Time
		if len(l.ends) > 0 {
			timer = l.clock.After(l.ends[0].Add(time.Second).Sub(now))
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			l.leave(w)
			return ctx.Err()
		case <-freed:
		case <-timer:
		}
	}
}

// promote wakes the waiter at the head of the queue; called with l.mu held.
func (l *Limiter[K]) promote() {
	if len(l.queue) > 0 && !l.queue[0].head {
		l.queue[0].head = true
		close(l.queue[0].turn)
	}
}

// leave removes a waiter that gave up, passing the head on if it had it.
func (l *Limiter[K]) leave(w *globalWaiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, q := range l.queue {
		if q == w {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			break
		}
	}
	l.promote()
}

// SeedGroup adds completions of earlier messages to group chat, typically
// sent by the previous process (times on the limiter's clock), so its
// per-minute budget counts them. Call it before the chat's first Wait;
// times older than a minute are ignored.
func (l *Limiter[K]) SeedGroup(chat K, times []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.chats[chat]
	if c == nil {
		c = &chatLimit{sem: make(chan struct{}, 1), last: l.start}
		l.chats[chat] = c
	}
	c.recent = append(c.recent, times...)
	slices.SortFunc(c.recent, time.Time.Compare)
	c.recent = pruneBefore(c.recent, l.clock.Now().Add(-time.Minute))
}

// Pause holds chat for d (the platform's retry_after after a 429).
func (l *Limiter[K]) Pause(chat K, d time.Duration) {
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
func (l *Limiter[K]) prune(now time.Time) {
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
