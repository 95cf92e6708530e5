package webchat

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/silas-gateway/silas/core"
)

func TestLoginIsRateLimited(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{LoginLimit: RateLimit{Burst: 3, Every: time.Minute}})
	for i := range 3 {
		if resp := f.do(t, "POST", "/login", jsonHdr(), `{"secret":"guess"}`); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i, resp.StatusCode)
		}
	}
	good := f.a.NewLoginSecret(time.Minute)
	resp := f.do(t, "POST", "/login", jsonHdr(), `{"secret":"`+good+`"}`)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("fourth attempt: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	f.clock.add(time.Minute)
	good = f.a.NewLoginSecret(time.Minute)
	if resp := f.do(t, "POST", "/login", jsonHdr(), `{"secret":"`+good+`"}`); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("after the wait: %d", resp.StatusCode)
	}
}

func TestFramesAreRateLimitedPerSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{FrameLimit: RateLimit{Burst: 2, Every: time.Hour}})
	c := f.dial(t, f.login(t))
	want(t, c.next(), "type", "hello")
	c.write(`{"type":"message","id":"m-1","text":"a"}`)
	want(t, c.next(), "type", "ack", "id", "m-1")
	c.write(`{"type":"message","id":"m-2","text":"b"}`)
	want(t, c.next(), "type", "ack", "id", "m-2")
	c.write(`{"type":"message","id":"m-3","text":"c"}`)
	want(t, c.next(), "type", "error", "code", "rate_limited")
	// Another session has its own budget.
	c2 := f.dial(t, f.login(t))
	want(t, c2.next(), "type", "hello")
	c2.write(`{"type":"message","id":"m-4","text":"d"}`)
	want(t, c2.next(), "type", "ack", "id", "m-4")
}

func TestLogoutEndsTheSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	token := f.login(t)
	c := f.dial(t, token)
	want(t, c.next(), "type", "hello")
	resp := f.do(t, "POST", "/logout", cookieHdr(token), "")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	want(t, c.next(), "type", "error", "code", "unauthorized")
	if st := c.closeStatus(); st != websocket.StatusPolicyViolation {
		t.Fatalf("close status %v", st)
	}
	if resp := f.do(t, "GET", "/session", cookieHdr(token), ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("session after logout: %d", resp.StatusCode)
	}
}

type memState struct{ m map[string]string }

func (s *memState) GetState(_ context.Context, _ core.ChannelName, key string) (string, bool, error) {
	v, ok := s.m[key]
	return v, ok, nil
}
func (s *memState) SetState(_ context.Context, _ core.ChannelName, key, v string) error {
	s.m[key] = v
	return nil
}

// `silas webchat revoke` (another process) writes the state key; every
// session ends.
func TestRevokeAllFromState(t *testing.T) {
	t.Parallel()
	st := &lockedState{s: memState{m: map[string]string{StateRevokedAt: "earlier"}}}
	f := newFixture(t, Config{State: st, RevokePoll: 10 * time.Millisecond})
	t1, t2 := f.login(t), f.login(t)
	c := f.dial(t, t1)
	want(t, c.next(), "type", "hello")
	time.Sleep(50 * time.Millisecond) // the old value revokes nothing
	if resp := f.do(t, "GET", "/session", cookieHdr(t2), ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("session before revoke: %d", resp.StatusCode)
	}
	st.set(StateRevokedAt, time.Now().Format(time.RFC3339Nano))
	want(t, c.next(), "type", "error", "code", "unauthorized")
	for _, tok := range []string{t1, t2} {
		if resp := f.do(t, "GET", "/session", cookieHdr(tok), ""); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("session after revoke: %d", resp.StatusCode)
		}
	}
}

func TestDefaultSessionTTLIsUnderThirtyDays(t *testing.T) {
	t.Parallel()
	a, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if a.cfg.SessionTTL >= 30*24*time.Hour {
		t.Fatalf("default session lifetime %s", a.cfg.SessionTTL)
	}
}

type lockedState struct {
	mu sync.Mutex
	s  memState
}

func (l *lockedState) GetState(ctx context.Context, ch core.ChannelName, key string) (string, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.GetState(ctx, ch, key)
}

func (l *lockedState) SetState(ctx context.Context, ch core.ChannelName, key, v string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.SetState(ctx, ch, key, v)
}

func (l *lockedState) set(key, v string) { _ = l.SetState(context.Background(), "", key, v) }
