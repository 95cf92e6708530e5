package webchat

import (
	"context"
	"crypto/subtle"
	"sync"
	"time"

	"github.com/silas-gateway/silas/core"
)

// SessionStore keeps the one-time login secrets and the sessions where
// every `silas serve` on the database sees them (*store.Store), so a
// session survives a restart and is valid on every instance. Only SHA-256
// hashes of secrets and tokens pass through it. Each call takes the
// adapter's clock reading (now), so the injected clock decides expiry.
type SessionStore interface {
	AddWebLogin(ctx context.Context, ch core.ChannelName, secretHash [32]byte, expires time.Time) error
	// UseWebLogin deletes the login and creates the session in one step;
	// false means the secret is unknown, used or expired.
	UseWebLogin(ctx context.Context, ch core.ChannelName, secretHash, tokenHash [32]byte, now, expires time.Time) (bool, error)
	WebSession(ctx context.Context, ch core.ChannelName, tokenHash [32]byte, now time.Time) (time.Time, bool, error)
	LiveWebSessions(ctx context.Context, ch core.ChannelName, tokenHashes [][32]byte, now time.Time) (map[[32]byte]bool, error)
	EndWebSession(ctx context.Context, ch core.ChannelName, tokenHash [32]byte) error
	RevokeWebSessions(ctx context.Context, ch core.ChannelName) (int, error)
}

// keeper is where the adapter keeps logins and sessions: the database
// (dbKeeper, under serve) or this process's memory (memKeeper: tests and
// embedders without a SessionStore; a restart ends every session).
type keeper interface {
	addLogin(ctx context.Context, secretHash [32]byte, expires time.Time) error
	login(ctx context.Context, secretHash, tokenHash [32]byte, now, expires time.Time) (bool, error)
	session(ctx context.Context, tokenHash [32]byte, now time.Time) (time.Time, bool, error)
	live(ctx context.Context, tokenHashes [][32]byte, now time.Time) (map[[32]byte]bool, error)
	end(ctx context.Context, tokenHash [32]byte) error
	revokeAll(ctx context.Context) (int, error)
	// durable reports whether other processes see what this one keeps
	// (then `silas webchat revoke` revokes the rows itself, and the
	// channel-state key is not needed to end sessions).
	durable() bool
}

type dbKeeper struct {
	st SessionStore
	ch core.ChannelName
}

func (k dbKeeper) addLogin(ctx context.Context, h [32]byte, exp time.Time) error {
	return k.st.AddWebLogin(ctx, k.ch, h, exp)
}

func (k dbKeeper) login(ctx context.Context, s, t [32]byte, now, exp time.Time) (bool, error) {
	return k.st.UseWebLogin(ctx, k.ch, s, t, now, exp)
}

func (k dbKeeper) session(ctx context.Context, h [32]byte, now time.Time) (time.Time, bool, error) {
	return k.st.WebSession(ctx, k.ch, h, now)
}

func (k dbKeeper) live(ctx context.Context, hs [][32]byte, now time.Time) (map[[32]byte]bool, error) {
	return k.st.LiveWebSessions(ctx, k.ch, hs, now)
}

func (k dbKeeper) end(ctx context.Context, h [32]byte) error { return k.st.EndWebSession(ctx, k.ch, h) }

func (k dbKeeper) revokeAll(ctx context.Context) (int, error) {
	return k.st.RevokeWebSessions(ctx, k.ch)
}

func (dbKeeper) durable() bool { return true }

type memKeeper struct {
	mu       sync.Mutex
	secrets  map[[32]byte]time.Time // login secret hash → expiry (one-time)
	sessions map[[32]byte]time.Time // session token hash → expiry
}

func newMemKeeper() *memKeeper {
	return &memKeeper{secrets: map[[32]byte]time.Time{}, sessions: map[[32]byte]time.Time{}}
}

func (k *memKeeper) addLogin(_ context.Context, h [32]byte, exp time.Time) error {
	k.mu.Lock()
	k.secrets[h] = exp
	k.mu.Unlock()
	return nil
}

func (k *memKeeper) login(_ context.Context, s, t [32]byte, now, exp time.Time) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var ok bool
	for h, e := range k.secrets {
		if subtle.ConstantTimeCompare(h[:], s[:]) == 1 && now.Before(e) {
			ok = true
		}
		if !now.Before(e) {
			delete(k.secrets, h)
		}
	}
	if ok {
		delete(k.secrets, s) // one-time
		k.sessions[t] = exp
	}
	return ok, nil
}

func (k *memKeeper) session(_ context.Context, h [32]byte, now time.Time) (time.Time, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	exp, ok := k.sessions[h]
	if ok && !now.Before(exp) {
		delete(k.sessions, h)
		return exp, false, nil
	}
	return exp, ok, nil
}

func (k *memKeeper) live(ctx context.Context, hs [][32]byte, now time.Time) (map[[32]byte]bool, error) {
	out := make(map[[32]byte]bool, len(hs))
	for _, h := range hs {
		_, ok, _ := k.session(ctx, h, now)
		out[h] = ok
	}
	return out, nil
}

func (k *memKeeper) end(_ context.Context, h [32]byte) error {
	k.mu.Lock()
	delete(k.sessions, h)
	k.mu.Unlock()
	return nil
}

func (k *memKeeper) revokeAll(context.Context) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := len(k.sessions)
	clear(k.sessions)
	return n, nil
}

func (*memKeeper) durable() bool { return false }
