package telegram

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/go-telegram/bot"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
)

// Webhook mode. Run registers the webhook (setWebhook with secret_token and
// allowed_updates); the gateway's HTTP server routes WebhookPath() to the
// adapter, which is an http.Handler:
//
//   - a request whose X-Telegram-Bot-Api-Secret-Token does not match
//     (constant-time comparison), or that has none, gets 401 and never
//     reaches the core;
//   - the update is decoded (malformed → 400, logged) and delivered;
//   - 200 only after Deliver returned, so the turn is stored before Telegram
//     forgets the update; a Deliver error answers 500 and Telegram retries,
//     until the update is quarantined (a permanent error, or
//     maxDeliverAttempts failures): then 200, so Telegram stops retrying;
//   - while the channel is not running (before Run, during shutdown) the
//     answer is 503, which Telegram retries too.

// maxWebhookBody bounds a webhook request; updates are a few KB.
const maxWebhookBody = 1 << 20

// WebhookPath is the path of telegram.webhook_url, where the gateway should
// route webhook requests to the adapter ("" in polling mode).
func (a *Adapter) WebhookPath() string {
	if a.cfg.Mode != ModeWebhook {
		return ""
	}
	u, err := url.Parse(a.cfg.WebhookURL)
	if err != nil || u.Path == "" {
		return "/"
	}
	return u.Path
}

// ServeHTTP is the webhook endpoint.
func (a *Adapter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Mode != ModeWebhook {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if !a.secretMatches(r.Header.Get("X-Telegram-Bot-Api-Secret-Token")) {
		a.log.Warn("telegram webhook: request without the right secret token refused", slog.String("remote", r.RemoteAddr))
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	a.mu.Lock()
	in := a.inbox
	a.mu.Unlock()
	if in == nil || a.botUsername() == "" {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			a.log.Warn("telegram webhook: request body too large", slog.Int64("limit", mbe.Limit))
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read the request body", http.StatusBadRequest)
		return
	}
	id, u, err := decodeUpdate(body)
	if err != nil {
		a.log.Warn("telegram webhook: malformed update refused", slog.Int64("update_id", id), slog.Any("err", err))
		if _, keeps := in.(core.Quarantiner); keeps && id != 0 && a.quarantine(r.Context(), in, id, body, err, 1) {
			w.WriteHeader(http.StatusOK) // kept; a retry could not fix it
			return
		}
		http.Error(w, "malformed update", http.StatusBadRequest)
		return
	}
	if err := a.handle(r.Context(), in, u); err != nil {
		if n := a.webhookAttempt(id); givesUp(err, n) && a.quarantine(r.Context(), in, id, body, err, n) {
			a.webhookDone(id)
			w.WriteHeader(http.StatusOK)
			return
		}
		a.log.Error("telegram webhook: delivering an update to the core failed; Telegram will retry",
			slog.Int64("update_id", id), slog.Any("err", err))
		http.Error(w, "temporarily unavailable", http.StatusInternalServerError)
		return
	}
	a.webhookDone(id)
	w.WriteHeader(http.StatusOK)
}

// secretMatches compares in constant time (hashes of equal length, so the
// length of the secret does not leak either).
func (a *Adapter) secretMatches(got string) bool {
	if got == "" || a.cfg.secret == "" {
		return false
	}
	h := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(h[:], a.secretH[:]) == 1
}

// setWebhook registers the webhook, retrying until it succeeds or ctx ends.
// Pending updates are kept (drop_pending_updates is false).
func (a *Adapter) setWebhook(ctx context.Context) {
	b := kit.Backoff{Min: time.Second, Max: time.Minute}
	for {
		cctx, cancel := context.WithTimeout(ctx, a.cfg.HTTPTimeout)
		_, err := a.bot.SetWebhook(cctx, &bot.SetWebhookParams{
			URL: a.cfg.WebhookURL, SecretToken: a.cfg.secret, AllowedUpdates: a.cfg.AllowedUpdates,
			MaxConnections: a.cfg.WebhookMaxConnections,
		})
		cancel()
		if err == nil {
			a.log.Info("telegram webhook registered", slog.String("url", a.cfg.WebhookURL))
			return
		}
		if ctx.Err() != nil {
			return
		}
		wait := b.Next()
		a.log.Error("telegram: setWebhook failed; retrying", slog.Any("err", mapError("setWebhook", err)), slog.Duration("wait", wait))
		if kit.SleepCtx(ctx, wait) != nil {
			return
		}
	}
}
