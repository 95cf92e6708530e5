package slack

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
)

// TestTypedTap: "approve <id>" typed becomes the Tap a button sends, in
// the conversation where it was typed (the card's thread, or the top level
// of a channel, not a new thread under the mention), answered to the
// typist only.
func TestTypedTap(t *testing.T) {
	t.Parallel()
	const card = "abcdefghijklmnopqrstuvwxyz"
	tests := []struct {
		name string
		ev   map[string]any
		conv string
	}{
		{"dm", map[string]any{"type": "message", "user": "U1", "text": "approve " + card, "ts": "1.000001", "channel": "D1", "channel_type": "im"}, "slack:U1"},
		{"channel top level", map[string]any{"type": "app_mention", "user": "U1", "text": "<@U0BOT> Decline " + card, "ts": "1.000002", "channel": "C1"}, "slack:C1"},
		{"card's thread", map[string]any{"type": "message", "user": "U1", "text": "approve " + card, "ts": "1.000003", "thread_ts": "1.000001", "parent_user_id": "U0BOT", "channel": "C1", "channel_type": "channel"}, "slack:C1:1.000001"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := eventToTurn(ev(tc.ev), me, "slack", MethodSocket, nil)
			if r.act != actDeliver || r.turn.Tap == nil {
				t.Fatalf("act = %s (%s), tap %v", r.act, r.reason, r.turn.Tap)
			}
			if err := r.turn.Validate(); err != nil {
				t.Fatal(err)
			}
			if string(r.turn.Conversation) != tc.conv || string(r.turn.Tap.Card) != card || r.turn.Text != "" {
				t.Fatalf("turn = %+v tap %+v", r.turn, *r.turn.Tap)
			}
			if r.tap == nil || r.tap.user != "U1" || r.tap.channel != tc.ev["channel"] || r.tap.messageTS != "" {
				t.Fatalf("tap handle = %+v", r.tap)
			}
		})
	}
	// Not a tap: ordinary text (an id of the wrong shape).
	r := eventToTurn(ev(map[string]any{"type": "message", "user": "U1", "text": "approve it", "ts": "1.000004", "channel": "D1", "channel_type": "im"}), me, "slack", MethodSocket, nil)
	if r.act != actDeliver || r.turn.Tap != nil || r.turn.Text != "approve it" {
		t.Fatalf("plain text: %+v", r.turn)
	}
}

// memState is a core.StateStore in memory.
type memState struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *memState) GetState(_ context.Context, ch core.ChannelName, key string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[string(ch)+"/"+key]
	return v, ok, nil
}

func (s *memState) SetState(_ context.Context, ch core.ChannelName, key, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[string(ch)+"/"+key] = v
	return nil
}

// TestThreadsSurviveRestart: a thread the bot joined is known to a new
// adapter on the same state; stale, malformed and DM entries are not.
func TestThreadsSurviveRestart(t *testing.T) {
	t.Parallel()
	st := &memState{m: map[string]string{}}
	now := time.Unix(1_750_000_000, 0)
	build := func() *Adapter {
		a, err := New(Config{BotToken: botTok, AppToken: appTok, State: st, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := build()
	ctx := context.Background()
	a.joinThread(ctx, "C1", "1.000001")
	a.joinThread(ctx, "D1", "1.000002") // DMs need no memory
	if !a.threadKnown("C1", "1.000001") || a.threadKnown("D1", "1.000002") {
		t.Fatal("in memory")
	}
	// Someone else's junk in the value costs nothing but its line.
	st.m["slack/threads"] += "garbage\nC9:x 1\n"
	b := build()
	if b.threadKnown("C1", "1.000001") {
		t.Fatal("known before the state was read")
	}
	b.loadThreads(ctx)
	if !b.threadKnown("C1", "1.000001") || b.threadKnown("C9", "x") {
		t.Fatalf("after a restart: %v", b.threads.m)
	}
	// Forgotten threadTTL after the bot joined.
	now = now.Add(threadTTL + time.Hour)
	c := build()
	c.loadThreads(ctx)
	if c.threadKnown("C1", "1.000001") || b.threadKnown("C1", "1.000001") {
		t.Fatal("a thread joined longer than threadTTL ago is still known")
	}
}

// TestThreadsBounded: beyond maxThreads the oldest are forgotten.
func TestThreadsBounded(t *testing.T) {
	t.Parallel()
	s := threadSet{m: map[string]time.Time{}}
	base := time.Unix(1_750_000_000, 0)
	for i := range maxThreads + 10 {
		s.m[fmt.Sprintf("C1:1.%06d", i)] = base.Add(time.Duration(i) * time.Second)
	}
	s.pruneLocked(base.Add(-time.Hour))
	if len(s.m) != maxThreads {
		t.Fatalf("%d threads kept; want %d", len(s.m), maxThreads)
	}
	if _, ok := s.m["C1:1.000000"]; ok {
		t.Fatal("the oldest thread was kept")
	}
	got := decodeThreads(s.encodeLocked())
	if len(got) != maxThreads {
		t.Fatalf("round trip: %d threads; want %d", len(got), maxThreads)
	}
	for k, at := range s.m {
		if !got[k].Equal(at) {
			t.Fatalf("round trip: %s = %v; want %v", k, got[k], at)
		}
	}
}
