package webchat

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"time"
)

// Ending sessions. POST /logout ends the caller's session (and closes its
// sockets); `silas webchat revoke` ends every session, also from another
// process. With a SessionStore (serve) both are rows in the database: every
// request and frame reads its session there, and Run checks the sessions
// of the open sockets every RevokePoll, closing those ended elsewhere (a
// logout or revoke on another instance). Without one, the command records
// the time under StateRevokedAt in the channel state, which Run checks
// every RevokePoll.

func (a *Adapter) serveLogout(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, "POST")
		return
	}
	if !sameOrigin(r) {
		httpError(w, http.StatusForbidden, "cross-origin logout refused")
		return
	}
	if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
		h := sha256.Sum256([]byte(c.Value))
		if err := a.sess.end(r.Context(), h); err != nil {
			a.log.Error("web chat logout: could not end the session", slog.Any("err", err))
			httpError(w, http.StatusServiceUnavailable, "the gateway could not end the session; retry")
			return
		}
		a.closeSockets(func(s [32]byte) bool { return s == h })
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: -1})
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// RevokeAll ends every session now (their sockets here close with
// "unauthorized"; other instances close theirs within RevokePoll) and
// returns how many were live; a browser must log in again with a new
// login secret.
func (a *Adapter) RevokeAll(ctx context.Context) (int, error) {
	n, err := a.sess.revokeAll(ctx)
	if err != nil {
		return 0, err
	}
	a.closeSockets(func([32]byte) bool { return true })
	return n, nil
}

// closeSockets closes the open sockets whose session match selects.
func (a *Adapter) closeSockets(match func([32]byte) bool) {
	a.mu.Lock()
	var ended []*client
	for c := range a.clients {
		if match(c.session) {
			ended = append(ended, c)
		}
	}
	a.mu.Unlock()
	for _, c := range ended {
		a.endSession(c)
	}
}

// watchRevocations ends the sockets of sessions that ended elsewhere: every
// RevokePoll it reads which of the open sockets' sessions are still live
// (one query for all of them), and, without a SessionStore, ends every
// session when StateRevokedAt changes.
func (a *Adapter) watchRevocations(ctx context.Context) {
	var last string
	watchState := a.cfg.State != nil && !a.sess.durable()
	if watchState {
		var err error
		if last, _, err = a.cfg.State.GetState(ctx, a.cfg.Name, StateRevokedAt); err != nil {
			a.log.Warn("web chat: cannot read session revocations", slog.Any("err", err))
		}
	}
	t := time.NewTicker(a.cfg.RevokePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if watchState {
			if v, ok, err := a.cfg.State.GetState(ctx, a.cfg.Name, StateRevokedAt); err == nil && ok && v != last {
				last = v
				n, _ := a.RevokeAll(ctx)
				a.log.Info("web chat sessions revoked", slog.Int("sessions", n))
			}
		}
		a.closeEnded(ctx)
	}
}

// closeEnded closes the open sockets whose session is no longer live.
func (a *Adapter) closeEnded(ctx context.Context) {
	a.mu.Lock()
	open := make([][32]byte, 0, len(a.clients))
	seen := map[[32]byte]bool{}
	for c := range a.clients {
		if !seen[c.session] {
			seen[c.session] = true
			open = append(open, c.session)
		}
	}
	a.mu.Unlock()
	if len(open) == 0 {
		return
	}
	live, err := a.sess.live(ctx, open, a.now())
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("web chat: cannot read the open sessions", slog.Any("err", err))
		}
		return
	}
	ended := 0
	for _, h := range open {
		if !live[h] {
			ended++
		}
	}
	if ended == 0 {
		return
	}
	a.closeSockets(func(h [32]byte) bool { return seen[h] && !live[h] })
	a.log.Info("web chat sessions ended elsewhere: sockets closed", slog.Int("sessions", ended))
}
