package store

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"
)

func TestWebSessions(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	now := time.Now()
	secret, token := sha256.Sum256([]byte("secret")), sha256.Sum256([]byte("token"))
	if err := s.AddWebLogin(ctx, "webchat", secret, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.UseWebLogin(ctx, "other", secret, token, now, now.Add(time.Hour)); err != nil || ok {
		t.Fatalf("another channel's login: %v %v", ok, err)
	}
	if ok, err := s.UseWebLogin(ctx, "webchat", secret, token, now, now.Add(time.Hour)); err != nil || !ok {
		t.Fatalf("login: %v %v", ok, err)
	}
	if ok, err := s.UseWebLogin(ctx, "webchat", secret, sha256.Sum256([]byte("t2")), now, now.Add(time.Hour)); err != nil || ok {
		t.Fatalf("the secret twice: %v %v", ok, err)
	}
	exp, ok, err := s.WebSession(ctx, "webchat", token, now)
	if err != nil || !ok || !exp.Equal(now.Add(time.Hour).Truncate(time.Microsecond)) {
		t.Fatalf("session: %v %v %v", exp, ok, err)
	}
	if _, ok, _ := s.WebSession(ctx, "webchat", token, now.Add(time.Hour)); ok {
		t.Fatal("valid at its expiry")
	}
	if _, ok, _ := s.WebSession(ctx, "other", token, now); ok {
		t.Fatal("valid on another channel")
	}
	unknown := sha256.Sum256([]byte("unknown"))
	live, err := s.LiveWebSessions(ctx, "webchat", [][32]byte{token, unknown}, now)
	if err != nil || !live[token] || live[unknown] {
		t.Fatalf("live: %v %v", live, err)
	}
	if n, err := s.RevokeWebSessions(ctx, "webchat"); err != nil || n != 1 {
		t.Fatalf("revoke: %d %v", n, err)
	}
	if _, ok, _ := s.WebSession(ctx, "webchat", token, now); ok {
		t.Fatal("valid after revoke")
	}
	if n, err := s.RevokeWebSessions(ctx, "webchat"); err != nil || n != 0 {
		t.Fatalf("revoke again: %d %v", n, err)
	}
}

// BenchmarkWebSession is the cost of the check the web chat makes on every
// request and frame: one primary-key read among many sessions.
func BenchmarkWebSession(b *testing.B) {
	s, ctx := setup(b)
	now := time.Now()
	var token [32]byte
	for i := range 1000 {
		secret := sha256.Sum256(fmt.Appendf(nil, "s%d", i))
		token = sha256.Sum256(fmt.Appendf(nil, "t%d", i))
		if err := s.AddWebLogin(ctx, "webchat", secret, now.Add(time.Minute)); err != nil {
			b.Fatal(err)
		}
		if ok, err := s.UseWebLogin(ctx, "webchat", secret, token, now, now.Add(time.Hour)); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if _, ok, err := s.WebSession(ctx, "webchat", token, now); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkGetStateBaseline is a comparable primary-key read (the channel
// state), to read BenchmarkWebSession against on a busy machine.
func BenchmarkGetStateBaseline(b *testing.B) {
	s, ctx := setup(b)
	if err := s.SetState(ctx, "webchat", "k", "v"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, ok, err := s.GetState(ctx, "webchat", "k"); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}
