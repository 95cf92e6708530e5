package webchat

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/storetest"
)

var _ SessionStore = (*store.Store)(nil)

// dbFixtures returns n adapters (instances) keeping their sessions in one
// PostgreSQL database, sharing one clock.
func dbFixtures(t *testing.T, n int) ([]*fixture, *store.Store) {
	t.Helper()
	st, err := store.Open(t.Context(), storetest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	clk := &clock{t: time.Now()}
	out := make([]*fixture, n)
	for i := range out {
		out[i] = newFixture(t, Config{Sessions: st, Now: clk.now, RevokePoll: 10 * time.Millisecond})
		out[i].clock = clk
	}
	return out, st
}

func sessionStatus(t *testing.T, f *fixture, token string) int {
	t.Helper()
	return f.do(t, "GET", "/session", cookieHdr(token), "").StatusCode
}

// A session made on one instance is valid on another and on a new
// instance (a restart); a login link works once across instances.
func TestDBSessionsSurviveRestartAndSpanInstances(t *testing.T) {
	t.Parallel()
	fs, _ := dbFixtures(t, 2)
	a, b := fs[0], fs[1]

	secret := a.a.NewLoginSecret(time.Minute)
	resp := b.do(t, "POST", "/login", jsonHdr(), `{"secret":"`+secret+`"}`)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("login on the other instance: %d", resp.StatusCode)
	}
	if resp := a.do(t, "POST", "/login", jsonHdr(), `{"secret":"`+secret+`"}`); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the same secret again, on the first instance: %d", resp.StatusCode)
	}
	var token string
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			token = c.Value
		}
	}
	for i, f := range fs {
		if s := sessionStatus(t, f, token); s != http.StatusOK {
			t.Fatalf("instance %d: /session %d", i, s)
		}
	}
	c := a.dial(t, token)
	want(t, c.next(), "type", "hello")

	// A restart: the instance stops, a new one starts on the same database.
	a.stop()
	if st := c.closeStatus(); st != websocket.StatusGoingAway {
		t.Fatalf("close status at shutdown %v", st)
	}
	fs2, _ := dbFixturesOn(t, b)
	c2 := fs2.dial(t, token)
	want(t, c2.next(), "type", "hello")
	c2.write(`{"type":"message","id":"m-1","text":"still here"}`)
	want(t, c2.next(), "type", "ack", "id", "m-1")

	// The session ends at its expiry, everywhere.
	b.clock.add(DefaultSessionTTL)
	if s := sessionStatus(t, b, token); s != http.StatusUnauthorized {
		t.Fatalf("/session after expiry: %d", s)
	}
}

// dbFixturesOn starts one more instance on the database and clock of f.
func dbFixturesOn(t *testing.T, f *fixture) (*fixture, *store.Store) {
	t.Helper()
	st := f.a.cfg.Sessions.(*store.Store)
	n := newFixture(t, Config{Sessions: st, Now: f.clock.now, RevokePoll: 10 * time.Millisecond})
	n.clock = f.clock
	return n, st
}

// A revoke (what `silas webchat revoke` does: the rows) ends every session
// on every instance: requests are refused at once, open sockets close.
func TestDBSessionsRevokeEndsEveryInstance(t *testing.T) {
	t.Parallel()
	fs, st := dbFixtures(t, 2)
	a, b := fs[0], fs[1]
	t1, t2 := a.login(t), b.login(t)
	ca, cb := a.dial(t, t1), b.dial(t, t2)
	want(t, ca.next(), "type", "hello")
	want(t, cb.next(), "type", "hello")

	n, err := st.RevokeWebSessions(context.Background(), "webchat")
	if err != nil || n != 2 {
		t.Fatalf("revoked %d, %v", n, err)
	}
	for _, tok := range []string{t1, t2} {
		for i, f := range fs {
			if s := sessionStatus(t, f, tok); s != http.StatusUnauthorized {
				t.Fatalf("instance %d: /session after revoke %d", i, s)
			}
		}
	}
	for _, c := range []*wsClient{ca, cb} {
		want(t, c.next(), "type", "error", "code", "unauthorized")
		if s := c.closeStatus(); s != websocket.StatusPolicyViolation {
			t.Fatalf("close status %v", s)
		}
	}
	// A new login works after the revoke.
	t3 := a.login(t)
	if s := sessionStatus(t, b, t3); s != http.StatusOK {
		t.Fatalf("/session of a login after the revoke: %d", s)
	}
}

// A logout on one instance ends the session's socket on another.
func TestDBSessionsLogoutEndsOtherInstancesSockets(t *testing.T) {
	t.Parallel()
	fs, _ := dbFixtures(t, 2)
	a, b := fs[0], fs[1]
	token := a.login(t)
	cb := b.dial(t, token)
	want(t, cb.next(), "type", "hello")
	if resp := a.do(t, "POST", "/logout", cookieHdr(token), ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	want(t, cb.next(), "type", "error", "code", "unauthorized")
	if s := cb.closeStatus(); s != websocket.StatusPolicyViolation {
		t.Fatalf("close status %v", s)
	}
	if s := sessionStatus(t, b, token); s != http.StatusUnauthorized {
		t.Fatalf("/session after logout: %d", s)
	}
}

// An expired login secret is refused; only hashes are stored.
func TestDBSessionsStoreHashesOnly(t *testing.T) {
	t.Parallel()
	fs, st := dbFixtures(t, 1)
	f := fs[0]
	expired := f.a.NewLoginSecret(-time.Second)
	if resp := f.do(t, "POST", "/login", jsonHdr(), `{"secret":"`+expired+`"}`); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("expired secret: %d", resp.StatusCode)
	}
	secret := f.a.NewLoginSecret(time.Minute)
	token := f.login(t)
	var n int
	err := st.Pool().QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM webchat_logins WHERE secret_hash = sha256(convert_to($1, 'UTF8'))) +
		(SELECT count(*) FROM webchat_sessions WHERE token_hash = sha256(convert_to($2, 'UTF8')))`, secret, token).Scan(&n)
	if err != nil || n != 2 {
		t.Fatalf("rows keyed by the hashes: %d, %v", n, err)
	}
	if err := st.Pool().QueryRow(t.Context(), `SELECT count(*) FROM webchat_logins`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d login rows (the expired one is gone, the unused one stays), %v", n, err)
	}
}
