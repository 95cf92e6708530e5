package slack

import (
	"context"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Threads the bot takes part in. In a channel the bot answers a message
// that does not mention it only in a thread it started:
//
//   - the thread under the bot's own card or message: Slack's event says
//     so itself (parent_user_id is the bot user), nothing to remember;
//   - the thread under a mention the bot answered (a top-level mention is
//     answered in a thread under it), or a thread the bot was mentioned in:
//     remembered here, and kept durably in the channel's state (key
//     "threads", core.StateStore) so that a restart does not make the bot
//     deaf in threads it started.
//
// The set is bounded: a thread is forgotten threadTTL after the bot joined
// it, and beyond maxThreads the oldest go first. A forgotten thread needs a
// mention again; nothing else is lost.

const (
	stateThreads = "threads"
	threadTTL    = 30 * 24 * time.Hour
	maxThreads   = 5000
)

type threadSet struct {
	mu sync.Mutex           // guards m
	m  map[string]time.Time // "<channel>:<thread ts>" → when the bot joined it
	// save serialises writes of the state, so that a write never replaces
	// a newer set with an older one.
	save sync.Mutex
}

// pruneLocked drops threads joined before cut, then the oldest beyond max.
func (s *threadSet) pruneLocked(cut time.Time) {
	for k, at := range s.m {
		if at.Before(cut) {
			delete(s.m, k)
		}
	}
	if len(s.m) <= maxThreads {
		return
	}
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return s.m[keys[i]].Before(s.m[keys[j]]) })
	for _, k := range keys[:len(keys)-maxThreads] {
		delete(s.m, k)
	}
}

// encodeLocked is the state's value: one "<channel>:<ts> <unix seconds>"
// per line, oldest first.
func (s *threadSet) encodeLocked() string {
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if a, b := s.m[keys[i]], s.m[keys[j]]; !a.Equal(b) {
			return a.Before(b)
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(s.m[k].Unix(), 10))
		b.WriteByte('\n')
	}
	return b.String()
}

// decodeThreads parses the state's value, skipping malformed lines (the
// value is ours, but a bad line must not cost the others).
func decodeThreads(v string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, line := range strings.Split(v, "\n") {
		key, at, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		ch, ts, ok := strings.Cut(key, ":")
		sec, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil || !idRe.MatchString(ch) || !tsRe.MatchString(ts) {
			continue
		}
		out[key] = time.Unix(sec, 0)
	}
	return out
}

// loadThreads reads the remembered threads (at Run). A failure is logged:
// until the next start those threads need a mention.
func (a *Adapter) loadThreads(ctx context.Context) {
	if a.cfg.State == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.HTTPTimeout)
	defer cancel()
	v, ok, err := a.cfg.State.GetState(cctx, a.cfg.Name, stateThreads)
	if err != nil {
		a.log.Warn("slack: cannot read the threads the bot joined; replies there need a mention until the next start", slog.Any("err", err))
		return
	}
	if !ok {
		return
	}
	got := decodeThreads(v)
	a.threads.mu.Lock()
	for k, at := range got {
		if old, ok := a.threads.m[k]; !ok || at.After(old) {
			a.threads.m[k] = at
		}
	}
	a.threads.pruneLocked(a.now().Add(-threadTTL))
	n := len(a.threads.m)
	a.threads.mu.Unlock()
	a.log.Debug("slack: threads the bot joined restored", slog.Int("threads", n))
}

// joinThread remembers that the bot takes part in channel's thread ts and,
// when the thread is new to it, stores the set durably before returning.
func (a *Adapter) joinThread(ctx context.Context, channel, ts string) {
	if channel == "" || ts == "" || strings.HasPrefix(channel, "D") {
		return // direct messages are all for the bot
	}
	key := channel + ":" + ts
	a.threads.mu.Lock()
	_, known := a.threads.m[key]
	a.threads.m[key] = a.now()
	if !known {
		a.threads.pruneLocked(a.now().Add(-threadTTL))
	}
	a.threads.mu.Unlock()
	if known || a.cfg.State == nil {
		return
	}
	a.threads.save.Lock()
	defer a.threads.save.Unlock()
	a.threads.mu.Lock()
	v := a.threads.encodeLocked()
	a.threads.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.HTTPTimeout)
	defer cancel()
	if err := a.cfg.State.SetState(cctx, a.cfg.Name, stateThreads, v); err != nil {
		a.log.Warn("slack: cannot store a thread the bot joined; after a restart replies there need a mention", slog.Any("err", err))
	}
}

// threadKnown reports whether the bot joined channel's thread ts.
func (a *Adapter) threadKnown(channel, ts string) bool {
	a.threads.mu.Lock()
	defer a.threads.mu.Unlock()
	at, ok := a.threads.m[channel+":"+ts]
	return ok && !at.Before(a.now().Add(-threadTTL))
}
