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
// process: it records the time under StateRevokedAt in the channel state,
// which Run checks every RevokePoll.

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
		a.endSessions(func(h [32]byte) bool { return h == sha256.Sum256([]byte(c.Value)) })
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: -1})
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// RevokeAll ends every session now (their sockets close with
// "unauthorized"); a browser must log in again with a new login secret.
func (a *Adapter) RevokeAll() int {
	return a.endSessions(func([32]byte) bool { return true })
}

// endSessions forgets the sessions match selects and closes their sockets.
func (a *Adapter) endSessions(match func([32]byte) bool) int {
	a.mu.Lock()
	n := 0
	for h := range a.sessions {
		if match(h) {
			delete(a.sessions, h)
			n++
		}
	}
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
	return n
}

// watchRevocations ends every session when StateRevokedAt changes.
func (a *Adapter) watchRevocations(ctx context.Context) {
	if a.cfg.State == nil {
		return
	}
	last, _, err := a.cfg.State.GetState(ctx, a.cfg.Name, StateRevokedAt)
	if err != nil {
		a.log.Warn("web chat: cannot read session revocations", slog.Any("err", err))
	}
	t := time.NewTicker(a.cfg.RevokePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v, ok, err := a.cfg.State.GetState(ctx, a.cfg.Name, StateRevokedAt)
		if err != nil || !ok || v == last {
			continue
		}
		last = v
		n := a.RevokeAll()
		a.log.Info("web chat sessions revoked", slog.Int("sessions", n))
	}
}
