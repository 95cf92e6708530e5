package telegram

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/core"
)

// fakeInbox is an idempotent inbox keyed on (channel, event id), like the
// core's intake. Hooks simulate failures and crashes.
type fakeInbox struct {
	mu      sync.Mutex
	calls   int
	turns   []core.Turn    // processed once each, in delivery order
	byEvent map[string]int // deliveries per event id
	// before runs before the turn is stored; an error means "not stored".
	before func(n int, t core.Turn) error
	// after runs after the turn is stored; an error is returned although
	// the turn is stored (a crash before the answer reached the adapter).
	after func(n int, t core.Turn) error
}

func newFakeInbox() *fakeInbox { return &fakeInbox{byEvent: map[string]int{}} }

func (f *fakeInbox) Deliver(ctx context.Context, t core.Turn) (core.DeliverResult, error) {
	f.mu.Lock()
	f.calls++
	n, before, after := f.calls, f.before, f.after
	f.mu.Unlock()
	if before != nil {
		if err := before(n, t); err != nil {
			return core.DeliverResult{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return core.DeliverResult{}, err
	}
	if err := wellFormed(t, t.Channel); err != nil {
		return core.DeliverResult{}, &core.RejectedError{Reason: err.Error()}
	}
	f.mu.Lock()
	key := string(t.Channel) + "|" + t.EventID
	dup := f.byEvent[key] > 0
	f.byEvent[key]++
	if !dup {
		f.turns = append(f.turns, t)
	}
	seq := int64(len(f.turns))
	f.mu.Unlock()
	if after != nil {
		if err := after(n, t); err != nil {
			return core.DeliverResult{}, err
		}
	}
	return core.DeliverResult{Seq: seq, Duplicate: dup}, nil
}

func (f *fakeInbox) setHooks(before, after func(int, core.Turn) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.before, f.after = before, after
}

func (f *fakeInbox) list() []core.Turn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]core.Turn(nil), f.turns...)
}

func (f *fakeInbox) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeInbox) deliveries(ev string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byEvent["telegram|"+ev]
}

func (f *fakeInbox) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.turns)
}

func (f *fakeInbox) find(ev string) (core.Turn, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.turns {
		if t.EventID == ev {
			return t, true
		}
	}
	return core.Turn{}, false
}

// fakeState is a core.StateStore in memory; failSet makes SetState fail.
type fakeState struct {
	mu      sync.Mutex
	m       map[string]string
	writes  []string
	failSet func(key, value string) error
}

func newFakeState() *fakeState { return &fakeState{m: map[string]string{}} }

func (s *fakeState) GetState(_ context.Context, ch core.ChannelName, key string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[string(ch)+"/"+key]
	return v, ok, nil
}

func (s *fakeState) SetState(_ context.Context, ch core.ChannelName, key, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failSet != nil {
		if err := s.failSet(key, value); err != nil {
			return err
		}
	}
	s.m[string(ch)+"/"+key] = value
	s.writes = append(s.writes, key+"="+value)
	return nil
}

// writesOf counts the writes of key.
func (s *fakeState) writesOf(key string) (n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.writes {
		if strings.HasPrefix(w, key+"=") {
			n++
		}
	}
	return n
}

func (s *fakeState) get(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m["telegram/"+key]
}

// syncBuffer collects log output from concurrent goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// People and chats used across tests.
var (
	owner    = telegramtest.User{ID: 1001, FirstName: "Olive", LastName: "Owner", Username: "olive"}
	stranger = telegramtest.User{ID: 2002, FirstName: "Sam"}
	group    = telegramtest.Group(-1001234567890, "Ops")
)

const testSecret = "s3cret-webhook-token-0123456789abcdef"

// quickPerChat is the per-chat interval of setup's scaled-down limits.
const quickPerChat = 100 * time.Millisecond

// bundle is one adapter wired to a fake Bot API, inbox and state store.
type bundle struct {
	a    *Adapter
	srv  *telegramtest.Server
	in   *fakeInbox
	st   *fakeState
	logs *syncBuffer
	cfg  Config
}

// setup builds an adapter against a fake. mod adjusts the config.
//
// Unless the test gives the fake's limits, both sides use Telegram's limits
// with a tenth of the per-chat interval (as the conformance suite does):
// the fake (unless NoRateLimits) still answers any violation with 429, but a
// test that is not about the limits does not wait a real second per chat
// (the limiter starts as if every chat had just been sent to). Tests about
// Telegram's real limits give them to the fake explicitly; mod may set the
// adapter's.
func setup(t *testing.T, fopts telegramtest.Options, mod func(*Config)) *bundle {
	t.Helper()
	var lim Limits
	if fopts.Limits == (telegramtest.Limits{}) {
		lim.PerChatInterval = quickPerChat
		if !fopts.NoRateLimits {
			fopts.Limits = telegramtest.Limits{PerChat: quickPerChat, Slack: 20 * time.Millisecond}
		}
	}
	srv := telegramtest.NewServer(t, fopts)
	b := &bundle{srv: srv, in: newFakeInbox(), st: newFakeState(), logs: &syncBuffer{}}
	b.cfg = Config{
		Token: srv.Token, BaseURL: srv.URL, BotUsername: srv.BotUsername, State: b.st,
		PollTimeout: 2 * time.Second, HTTPTimeout: 30 * time.Second, Limits: lim,
		Logger: slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&b.cfg)
	}
	a, err := New(b.cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	b.a = a
	t.Cleanup(func() {
		// Whatever happened, the token never reaches a log line.
		if strings.Contains(b.logs.String(), srv.Token) {
			t.Errorf("the bot token appears in the log:\n%s", b.logs.String())
		}
		if t.Failed() {
			t.Logf("adapter log:\n%s", b.logs.String())
		}
	})
	return b
}

// start runs the adapter until the test ends (or stop is called).
func (b *bundle) start(t *testing.T) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.a.Run(ctx, b.in) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond for up to 15 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitTurn waits for the turn of an update.
func (b *bundle) waitTurn(t *testing.T, updateID int64) core.Turn {
	t.Helper()
	var got core.Turn
	waitFor(t, fmt.Sprintf("turn u%d", updateID), func() bool {
		var ok bool
		got, ok = b.in.find(eventID(updateID))
		return ok
	})
	return got
}

// wellFormed checks what every delivered turn must satisfy: the core's one
// validation of a turn (core.Turn.Validate), and what this adapter promises
// on top.
func wellFormed(t core.Turn, ch core.ChannelName) error {
	if err := t.Validate(); err != nil {
		return err
	}
	switch {
	case t.Channel != ch:
		return fmt.Errorf("channel %q", t.Channel)
	case !strings.HasPrefix(string(t.Sender), "telegram:"):
		return fmt.Errorf("sender %q", t.Sender)
	case !strings.HasPrefix(t.EventID, "u") || len(t.EventID) < 2:
		return fmt.Errorf("event id %q", t.EventID)
	case t.Evidence.Method != MethodPolling && t.Evidence.Method != MethodWebhook:
		return fmt.Errorf("evidence %+v", t.Evidence)
	case t.ChatKind == "":
		return fmt.Errorf("no chat kind")
	case (t.Tap == nil) == (strings.TrimSpace(t.Text) == ""):
		return fmt.Errorf("a turn has exactly one of text and tap (text %q, tap %v)", t.Text, t.Tap)
	case t.ChatKind == core.ChatDirect && strings.TrimPrefix(string(t.Conversation), string(ch)+":") != strings.TrimPrefix(string(t.Sender), "telegram:"):
		return fmt.Errorf("direct chat %q with sender %q", t.Conversation, t.Sender)
	}
	if t.Tap != nil {
		if _, err := callbackData(t.Tap.Card, t.Tap.Choice); err != nil {
			return err
		}
	}
	return nil
}
