package telegram

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Telegram allows 20 messages a minute in a group. The limiter counts them
// in memory; so that a restart cannot start the minute afresh, the send
// times of each group's last minute are kept in the channel state under
// "group:<chat id>" as comma-separated unix milliseconds on the limiter's
// clock, and the limiter is seeded from them on the group's first send
// after start. Private chats are not recorded: their per-chat interval is
// kept across restarts by the limiter starting as if every chat had just
// been sent to.

// groupStateKey names a group's stored send times.
func groupStateKey(chat int64) string { return "group:" + strconv.FormatInt(chat, 10) }

// limitWait waits for the limiter to allow a message to chat. For a group
// it first seeds the limiter from the stored send times (once per process)
// and records the send durably before it is made, so a crash mid-request
// still counts it; release records its completion time, which is when the
// limiter counts it.
func (a *Adapter) limitWait(ctx context.Context, chat int64) (release func(), err error) {
	if !isGroup(chat) || a.cfg.Limits.GroupPerMinute <= 0 {
		return a.lim.Wait(ctx, chat)
	}
	a.seedGroup(ctx, chat)
	rel, err := a.lim.Wait(ctx, chat)
	if err != nil {
		return nil, err
	}
	a.recordGroupSend(ctx, chat, false)
	var once sync.Once
	return func() {
		once.Do(func() {
			a.recordGroupSend(ctx, chat, true)
			rel()
		})
	}, nil
}

// seedGroup loads chat's stored send times into the limiter on its first
// use in this process.
func (a *Adapter) seedGroup(ctx context.Context, chat int64) {
	a.mu.Lock()
	_, ok := a.groupSends[chat]
	a.mu.Unlock()
	if ok {
		return
	}
	var times []time.Time
	v, ok, err := a.getState(ctx, groupStateKey(chat))
	if err != nil {
		// Not fatal: at worst Telegram answers 429 and the chat pauses.
		a.log.Warn("telegram: cannot read a group's recent send times", slog.Int64("chat", chat), slog.Any("err", err))
	}
	if ok {
		times = parseSendTimes(v)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.groupSends[chat]; ok {
		return // seeded by a concurrent first use
	}
	a.groupSends[chat] = times
	a.lim.SeedGroup(chat, times)
}

// recordGroupSend stores the time of the message to chat now being sent
// (replace: false) or, once it completed, its completion (replace: true),
// keeping the last minute and at most GroupPerMinute times. The caller
// holds the chat in the limiter, so records of one chat do not interleave.
func (a *Adapter) recordGroupSend(ctx context.Context, chat int64, replace bool) {
	now := a.cfg.LimitClock.Now()
	a.mu.Lock()
	ts := a.groupSends[chat]
	if replace && len(ts) > 0 {
		ts = ts[:len(ts)-1]
	}
	ts = append(ts, now)
	cut := 0
	for cut < len(ts) && (now.Sub(ts[cut]) >= time.Minute || len(ts)-cut > a.cfg.Limits.GroupPerMinute) {
		cut++
	}
	ts = append(ts[:0:0], ts[cut:]...)
	a.groupSends[chat] = ts
	a.mu.Unlock()
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = strconv.FormatInt(t.UnixMilli(), 10)
	}
	// The send is under way or done: store its time even if the request's
	// context ends now.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.HTTPTimeout)
	defer cancel()
	if err := a.setState(sctx, groupStateKey(chat), strings.Join(parts, ",")); err != nil {
		a.log.Warn("telegram: cannot store a group's recent send times", slog.Int64("chat", chat), slog.Any("err", err))
	}
}

// parseSendTimes reads stored send times, skipping what is not a number.
func parseSendTimes(v string) []time.Time {
	var out []time.Time
	for _, f := range strings.Split(v, ",") {
		if ms, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64); err == nil && ms > 0 {
			out = append(out, time.UnixMilli(ms))
		}
	}
	return out
}
