package slack

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/slack-go/slack"
)

// HTTP mode. The gateway routes PathEvents, PathInteractions and
// PathCommands on http.listen to Handler(). Every request:
//
//  1. is read whole (bounded) and verified with the signing secret on the
//     RAW body — X-Slack-Signature over "v0:<timestamp>:<body>", with
//     X-Slack-Request-Timestamp no more than 5 minutes off — before
//     anything is parsed; a missing header, a bad signature or a stale
//     timestamp is answered exactly 401 and never reaches the core;
//  2. is parsed (events: JSON; interactions: form field payload; commands:
//     form fields) and delivered;
//  3. is answered 200 only after Deliver returned, i.e. once the turn is
//     stored (Slack's 3-second deadline holds: storing is a single
//     group-committed insert). Slack's retries (X-Slack-Retry-Num) carry
//     the same event and are duplicates at the core: 200 again.
//
// The url_verification challenge is answered after the signature check.
// While the channel is not running (before Run learned the workspace,
// during shutdown) the answer is 503, which Slack retries.

// maxBody bounds a request; Slack's payloads are a few KB.
const maxBody = 1 << 20

// Handler serves the three HTTP-mode endpoints (nil in socket mode).
func (a *Adapter) Handler() http.Handler {
	if a.cfg.Mode != ModeHTTP {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathEvents, func(w http.ResponseWriter, r *http.Request) { a.serve(w, r, kindEvents) })
	mux.HandleFunc("POST "+PathInteractions, func(w http.ResponseWriter, r *http.Request) { a.serve(w, r, kindInteractions) })
	mux.HandleFunc("POST "+PathCommands, func(w http.ResponseWriter, r *http.Request) { a.serve(w, r, kindCommands) })
	return mux
}

type reqKind int

const (
	kindEvents reqKind = iota
	kindInteractions
	kindCommands
)

func (a *Adapter) serve(w http.ResponseWriter, r *http.Request, kind reqKind) {
	refuse := func(reason string) {
		a.log.Warn("slack: request refused: signature check failed", slog.String("path", r.URL.Path),
			slog.String("remote", r.RemoteAddr), slog.String("reason", reason))
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	}
	if r.Header.Get("X-Slack-Signature") == "" || r.Header.Get("X-Slack-Request-Timestamp") == "" {
		refuse("missing X-Slack-Signature or X-Slack-Request-Timestamp")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		// A body that cannot be read whole cannot be verified: it is
		// refused like any unverified request (exactly 401).
		refuse("request body unreadable or over 1 MiB: " + err.Error())
		return
	}
	if err := a.verify(r.Header, body); err != nil {
		refuse(err.Error())
		return
	}
	log := a.log.With(slog.String("path", r.URL.Path))
	if n := r.Header.Get("X-Slack-Retry-Num"); n != "" {
		log = log.With(slog.String("retry_num", n), slog.String("retry_reason", r.Header.Get("X-Slack-Retry-Reason")))
	}
	var in inbound
	me := a.bot()
	switch kind {
	case kindEvents:
		p, err := decodeEvents(body)
		if err != nil {
			http.Error(w, "malformed event", http.StatusBadRequest)
			return
		}
		if p.Type == "url_verification" {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, p.Challenge)
			return
		}
		in = eventToTurn(p, me, a.cfg.Name, a.method, a.threadKnown)
	case kindInteractions:
		form, err := url.ParseQuery(string(body))
		if err != nil || form.Get("payload") == "" {
			http.Error(w, "malformed interaction", http.StatusBadRequest)
			return
		}
		ic, err := decodeInteraction([]byte(form.Get("payload")))
		if err != nil {
			http.Error(w, "malformed interaction", http.StatusBadRequest)
			return
		}
		in = interactionToTurn(ic, me, a.cfg.Name, a.method)
	case kindCommands:
		form, err := url.ParseQuery(string(body))
		if err != nil {
			http.Error(w, "malformed command", http.StatusBadRequest)
			return
		}
		in = commandToTurn(commandFromForm(form), me, a.cfg.Name, a.method)
	}
	a.mu.Lock()
	inbox := a.inbox
	a.mu.Unlock()
	select {
	case <-a.ready:
	default:
		inbox = nil
	}
	if inbox == nil {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	if !a.deliverRetrying(r.Context(), inbox, in, body, log) {
		log.Error("slack: delivering a request to the core failed; Slack will retry")
		http.Error(w, "temporarily unavailable", http.StatusInternalServerError)
		return
	}
	// An empty 200: a slash command is not echoed; its answer follows as
	// a message.
	w.WriteHeader(http.StatusOK)
}

// verify checks X-Slack-Signature on the raw body (slack.SecretsVerifier:
// HMAC-SHA256, constant-time comparison, timestamps within 5 minutes).
func (a *Adapter) verify(h http.Header, body []byte) error {
	if h.Get("X-Slack-Signature") == "" || h.Get("X-Slack-Request-Timestamp") == "" {
		return errors.New("missing X-Slack-Signature or X-Slack-Request-Timestamp")
	}
	sv, err := slack.NewSecretsVerifier(h, a.cfg.signing)
	if err != nil {
		return err
	}
	if _, err := sv.Write(body); err != nil {
		return err
	}
	return sv.Ensure()
}
