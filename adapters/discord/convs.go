package discord

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
)

// conversations are the conversations Silas is part of (DM channels and
// allowed guild channels it has seen a message in) with the catch-up
// cursor of each: the id of the last message handled. They are kept as one
// JSON value under stateKey in the core's state store, written after each
// message is handled, so the cursor never passes a message that was not
// stored.
type conversations struct {
	state core.StateStore
	ch    core.ChannelName
	// fence, once the gateway runs under a lease, is the holding whose
	// epoch every write carries (lease.go); it stays after a loss, so a
	// write of the lost holding is refused.
	fence atomic.Pointer[fence]

	// wmu orders the writes: each stores a snapshot taken under mu, and
	// an older snapshot must not land after a newer one.
	wmu sync.Mutex
	mu  sync.Mutex
	m   map[string]*convRecord // by channel id
	mem string                 // the JSON when there is no state store
}

type convRecord struct {
	// Guild is "" for a DM: messages fetched over REST carry no guild_id,
	// so where a message was sent is known from here.
	Guild string `json:"guild,omitempty"`
	// User is the other party of a DM.
	User string `json:"user,omitempty"`
	// Last is the id of the last message handled (the catch-up cursor).
	Last string `json:"last,omitempty"`
	// Seen is when the conversation was last active (Unix seconds).
	Seen int64 `json:"seen"`
}

const (
	stateKey = "conversations"
	// maxConversations bounds the records (the least recently active go).
	maxConversations = 500
	// catchUpWindow: conversations quiet for longer are not caught up.
	catchUpWindow = 7 * 24 * time.Hour
	// maxCatchUpConversations and maxCatchUpPages bound one catch-up.
	maxCatchUpConversations = 100
	maxCatchUpPages         = 20
)

func newConversations(st core.StateStore, ch core.ChannelName) *conversations {
	return &conversations{state: st, ch: ch, m: map[string]*convRecord{}}
}

func (c *conversations) load(ctx context.Context) error {
	raw := ""
	if c.state != nil {
		v, ok, err := c.state.GetState(ctx, c.ch, stateKey)
		if err != nil {
			return fmt.Errorf("discord: reading %s: %w", stateKey, err)
		}
		if !ok {
			return nil
		}
		raw = v
	} else {
		c.mu.Lock()
		raw = c.mem
		c.mu.Unlock()
	}
	if raw == "" {
		return nil
	}
	m := map[string]*convRecord{}
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return fmt.Errorf("discord: %s is not valid JSON: %w", stateKey, err)
	}
	c.mu.Lock()
	c.m = m
	c.mu.Unlock()
	return nil
}

// get returns a copy of the record of a channel.
func (c *conversations) get(channel string) (convRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[channel]
	if !ok {
		return convRecord{}, false
	}
	return *r, true
}

func (c *conversations) dmOf(user string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, r := range c.m {
		if r.Guild == "" && r.User == user {
			return id, true
		}
	}
	return "", false
}

// advance moves a conversation's cursor to msgID (never backwards) and
// stores the records.
func (c *conversations) advance(ctx context.Context, channel, guild, user, msgID string, at time.Time) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	r, ok := c.m[channel]
	if !ok {
		r = &convRecord{Guild: guild}
		c.m[channel] = r
	}
	if guild == "" && user != "" {
		r.User = user
	}
	if snowflakeLess(r.Last, msgID) {
		r.Last = msgID
	}
	r.Seen = max(r.Seen, at.Unix())
	if len(c.m) > maxConversations {
		c.evictLocked()
	}
	raw, err := json.Marshal(c.m)
	if c.state == nil {
		c.mem = string(raw)
	}
	c.mu.Unlock()
	if err != nil || c.state == nil {
		return err
	}
	if err := c.set(ctx, stateKey, string(raw)); err != nil {
		return fmt.Errorf("discord: storing the catch-up cursor: %w", err)
	}
	return nil
}

// fence is one holding of the gateway lease.
type fence struct {
	st    lease.StateStore
	name  string
	epoch int64
}

// set writes a state key, fenced by the lease's epoch while the gateway
// runs under one (core.ErrFenced once a newer holder exists).
func (c *conversations) set(ctx context.Context, key, value string) error {
	if f := c.fence.Load(); f != nil {
		return f.st.SetStateFenced(ctx, c.ch, key, value, f.name, f.epoch)
	}
	return c.state.SetState(ctx, c.ch, key, value)
}

func (c *conversations) evictLocked() {
	type kv struct {
		id   string
		seen int64
	}
	all := make([]kv, 0, len(c.m))
	for id, r := range c.m {
		all = append(all, kv{id, r.Seen})
	}
	slices.SortFunc(all, func(a, b kv) int { return int(b.seen - a.seen) })
	for _, e := range all[maxConversations:] {
		delete(c.m, e.id)
	}
}

// recent lists the channel ids to catch up: those with a cursor, active
// within catchUpWindow, most recent first, at most maxCatchUpConversations.
func (c *conversations) recent(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	type kv struct {
		id   string
		seen int64
	}
	var all []kv
	for id, r := range c.m {
		if r.Last != "" && now.Sub(time.Unix(r.Seen, 0)) < catchUpWindow {
			all = append(all, kv{id, r.Seen})
		}
	}
	slices.SortFunc(all, func(a, b kv) int { return int(b.seen - a.seen) })
	out := make([]string, 0, min(len(all), maxCatchUpConversations))
	for i, e := range all {
		if i == maxCatchUpConversations {
			break
		}
		out = append(out, e.id)
	}
	return out
}

// snowflakeLess compares two decimal snowflakes ("" is the smallest).
func snowflakeLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// start records a conversation first met through an interaction: its
// cursor starts at the interaction's id (a snowflake on the same clock as
// message ids), so a later catch-up fetches what follows it. A
// conversation with a cursor keeps it: moving it here could pass messages
// still waiting in the queue.
func (c *conversations) start(channel, guild, user, id string, at time.Time) {
	c.mu.Lock()
	r, ok := c.m[channel]
	if ok && r.Last != "" {
		if guild == "" && user != "" {
			r.User = user
		}
		r.Seen = max(r.Seen, at.Unix())
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	_ = c.advance(context.Background(), channel, guild, user, id, at)
}
