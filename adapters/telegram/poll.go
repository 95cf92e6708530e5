package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
)

// Long polling with acknowledge-after-store.
//
// Telegram confirms every update with an id below the offset of a
// getUpdates call. The SDK's poller moves its offset as soon as it queues an
// update for the handlers and keeps it only in memory, so a crash loses
// queued updates. This loop instead:
//
//  1. calls getUpdates with offset = last handled update_id + 1;
//  2. delivers the updates one by one, in order; a failed Deliver is
//     retried (with backoff) before going on, so nothing is skipped — up to
//     maxDeliverAttempts, after which the update is quarantined
//     (quarantine.go) so one poisoned update cannot block the others;
//  3. once the batch is delivered, stores its last update_id under the
//     state key "offset" (core.StateStore) — one write per batch, not per
//     update (it was a fenced write transaction of its own per message);
//  4. asks for more — which is what confirms the handled updates.
//
// Nothing is confirmed to Telegram before the offset covering it is stored
// (3 comes before 4), so no update is lost. A crash, a lost lease or a
// failed offset write between 2 and 3 redelivers the batch's delivered
// updates after a restart or to the next holder; the core's intake stores
// a turn once per event id (a unique constraint: the second delivery,
// even a concurrent one from another instance, is a duplicate and answered
// by nobody), so that is a no-op — as it was for the one update a crash
// between Deliver and its own offset write redelivered before. A holder
// paused past its lease may deliver the rest of its batch on waking (the
// same no-op) and then stops at its fenced offset write, before asking for
// more.
//
// Telegram picks a random next update_id after a week without updates, so
// an offset older than staleOffset is not reused.

const (
	stateOffset   = "offset"
	stateOffsetAt = "offset_at"
	staleOffset   = 6 * 24 * time.Hour
	offsetAtEvery = time.Minute
	pollLimit     = 100
)

func (a *Adapter) getState(ctx context.Context, key string) (string, bool, error) {
	if a.cfg.State == nil {
		a.mu.Lock()
		defer a.mu.Unlock()
		v, ok := a.memState[key]
		return v, ok, nil
	}
	return a.cfg.State.GetState(ctx, a.cfg.Name, key)
}

func (a *Adapter) setState(ctx context.Context, key, v string) error {
	if a.cfg.State == nil {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.memState[key] = v
		return nil
	}
	return a.cfg.State.SetState(ctx, a.cfg.Name, key, v)
}

// loadOffset returns the next offset to ask for (0: none stored).
func (a *Adapter) loadOffset(ctx context.Context) int64 {
	b := kit.Backoff{Min: 500 * time.Millisecond, Max: 30 * time.Second}
	for {
		v, ok, err := a.getState(ctx, stateOffset)
		if err == nil {
			if !ok {
				return 0
			}
			last, err := strconv.ParseInt(v, 10, 64)
			if err != nil || last < 0 {
				a.log.Warn("telegram: stored polling offset is unreadable; starting from Telegram's unconfirmed updates", slog.String("value", v))
				return 0
			}
			if at, ok, _ := a.getState(ctx, stateOffsetAt); ok {
				if t, err := time.Parse(time.RFC3339, at); err == nil && a.now().Sub(t) > staleOffset {
					a.log.Info("telegram: stored polling offset is over six days old; not reusing it")
					return 0
				}
			}
			return last + 1
		}
		if ctx.Err() != nil {
			return 0
		}
		a.log.Error("telegram: cannot read the polling offset; retrying", slog.Any("err", err))
		if kit.SleepCtx(ctx, b.Next()) != nil {
			return 0
		}
	}
}

// saveOffset stores the last handled update id; false means a newer holder of
// the polling lease exists (held: this process's holding, nil without a
// lease), and this poll must stop without asking for more.
func (a *Adapter) saveOffset(ctx context.Context, held *lease.Held, id int64) bool {
	if err := a.setOffsetState(ctx, held, stateOffset, strconv.FormatInt(id, 10)); err != nil {
		if errors.Is(err, core.ErrFenced) {
			a.log.Warn("telegram: another instance polls now; this one stops", slog.Int64("update_id", id), slog.Any("err", err))
			return false
		}
		// The turn is stored; after a restart the update comes again and is
		// a duplicate. Nothing is lost.
		a.log.Warn("telegram: could not store the polling offset", slog.Int64("update_id", id), slog.Any("err", err))
		return true
	}
	// offset_at only tells a restart whether the offset is over six days
	// old (staleOffset), so once a minute is precise enough: written with
	// every update it was a second write transaction per message.
	if now := a.now(); now.Sub(a.offsetAtSaved) >= offsetAtEvery {
		if a.setOffsetState(ctx, held, stateOffsetAt, now.UTC().Format(time.RFC3339)) == nil {
			a.offsetAtSaved = now
		}
	}
	return true
}

// poll runs the getUpdates loop until ctx ends (held: see saveOffset).
func (a *Adapter) poll(ctx context.Context, in core.Inbox, held *lease.Held) {
	a.removeWebhook(ctx)
	next := a.loadOffset(ctx)
	lastProgress := a.now()
	errs := kit.Backoff{Min: 500 * time.Millisecond, Max: time.Minute}
	for ctx.Err() == nil {
		if next > 0 && a.now().Sub(lastProgress) > staleOffset {
			// Everything below next was confirmed by the last call.
			next = 0
		}
		asked := next
		batch, err := a.getUpdates(ctx, next)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.live.Lost("getUpdates failing")
			wait := errs.Next()
			var rl *core.RateLimitedError
			if errors.As(err, &rl) {
				wait = rl.RetryAfter
			}
			lvl := slog.LevelWarn
			if errors.Is(err, bot.ErrorUnauthorized) || errors.Is(err, bot.ErrorNotFound) {
				lvl = slog.LevelError
				err = fmt.Errorf("%w (telegram.token is wrong or revoked; run `silas doctor`)", err)
			} else if errors.Is(err, bot.ErrorConflict) {
				lvl = slog.LevelError
				err = fmt.Errorf("%w (a webhook is set or another process polls with this token)", err)
			}
			a.log.Log(ctx, lvl, "telegram: getUpdates failed; retrying", slog.Any("err", err), slog.Duration("wait", wait))
			if kit.SleepCtx(ctx, wait) != nil {
				return
			}
			continue
		}
		errs.Reset()
		// A round trip is a sign of life even when it brought nothing: a
		// long poll that never returns is what deaf looks like here.
		a.live.Heard(a.now(), "polling")
		for _, raw := range batch {
			id, u, derr := decodeUpdate(raw)
			if derr != nil && id == 0 {
				a.log.Warn("telegram: undecodable update skipped", slog.Any("err", derr))
				continue
			}
			if id < next {
				continue // handled already (a server that ignores offset)
			}
			if derr != nil {
				a.log.Warn("telegram: malformed update dropped", slog.Int64("update_id", id), slog.Any("err", derr))
				a.quarantine(ctx, in, id, raw, derr, 1)
			} else if !a.deliverRetrying(ctx, in, raw, u) {
				return // ctx ended; this update and the batch's delivered ones were not acknowledged
			}
			next = id + 1
			lastProgress = a.now()
		}
		if next > asked && !a.saveOffset(ctx, held, next-1) {
			return
		}
	}
}

// deliverRetrying hands u to the core until that succeeds or the update is
// quarantined; false means ctx ended first.
func (a *Adapter) deliverRetrying(ctx context.Context, in core.Inbox, raw []byte, u *models.Update) bool {
	b := kit.Backoff{Min: deliverBackoffMin, Max: 30 * time.Second}
	for attempt := 1; ; attempt++ {
		err := a.handle(ctx, in, u)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if givesUp(err, attempt) && a.quarantine(ctx, in, u.ID, raw, err, attempt) {
			return true
		}
		wait := b.Next()
		a.log.Warn("telegram: delivering an update to the core failed; retrying", slog.Int64("update_id", u.ID),
			slog.Any("err", err), slog.Duration("wait", wait))
		if kit.SleepCtx(ctx, wait) != nil {
			return false
		}
	}
}

// getUpdates calls the Bot API directly: the SDK does not export it.
// https://core.telegram.org/bots/api#getupdates
func (a *Adapter) getUpdates(ctx context.Context, offset int64) ([]json.RawMessage, error) {
	params := map[string]any{
		"limit":           pollLimit,
		"timeout":         int(a.cfg.PollTimeout / time.Second),
		"allowed_updates": a.cfg.AllowedUpdates,
	}
	if offset > 0 {
		params["offset"] = offset
	}
	var out []json.RawMessage
	err := a.call(ctx, a.poller, "getUpdates", params, &out)
	return out, err
}

// call makes one JSON Bot API request and maps its error like the SDK does
// (so mapError and errors.Is(bot.Error…) work on it).
func (a *Adapter) call(ctx context.Context, client *http.Client, method string, params any, dest any) error {
	body, err := json.Marshal(params)
	if err != nil {
		return err
	}
	// The URL holds the token: it must never reach a log or an error.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.cfg.BaseURL+"/bot"+a.cfg.token+"/"+method, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("telegram: %s: cannot build the request", method)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("telegram: %s: %w", method, kit.RedactURL(err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("telegram: %s: reading the answer: %w", method, err)
	}
	var r struct {
		OK          bool            `json:"ok"`
		Result      json.RawMessage `json:"result"`
		ErrorCode   int             `json:"error_code"`
		Description string          `json:"description"`
		Parameters  struct {
			RetryAfter int `json:"retry_after"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("telegram: %s: HTTP %d with a body that is not a Bot API answer", method, resp.StatusCode)
	}
	if !r.OK {
		code := r.ErrorCode
		if code == 0 {
			code = resp.StatusCode
		}
		ae := &apiError{Method: method, Code: code, Description: r.Description}
		switch code {
		case http.StatusTooManyRequests:
			return kit.RateLimited(kit.RetryAfterSeconds(r.Parameters.RetryAfter), ae)
		case http.StatusUnauthorized:
			return fmt.Errorf("%w: %w", bot.ErrorUnauthorized, ae)
		case http.StatusNotFound:
			return fmt.Errorf("%w: %w", bot.ErrorNotFound, ae)
		case http.StatusConflict:
			return fmt.Errorf("%w: %w", bot.ErrorConflict, ae)
		case http.StatusBadRequest:
			return fmt.Errorf("%w: %w", bot.ErrorBadRequest, ae)
		case http.StatusForbidden:
			return fmt.Errorf("%w: %w", bot.ErrorForbidden, ae)
		}
		return ae
	}
	if dest != nil {
		if err := json.Unmarshal(r.Result, dest); err != nil {
			return fmt.Errorf("telegram: %s: unexpected result: %w", method, err)
		}
	}
	return nil
}

// removeWebhook makes polling possible: getUpdates fails with 409 while a
// webhook is set. Errors are logged; the loop reports a persisting problem.
func (a *Adapter) removeWebhook(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, a.cfg.HTTPTimeout)
	defer cancel()
	info, err := a.bot.GetWebhookInfo(cctx)
	if err != nil || info.URL == "" {
		return
	}
	a.log.Warn("telegram: a webhook is set but telegram.mode is polling; removing the webhook (pending updates are kept)",
		slog.String("webhook_url", info.URL))
	if _, err := a.bot.DeleteWebhook(cctx, &bot.DeleteWebhookParams{}); err != nil {
		a.log.Error("telegram: could not remove the webhook", slog.Any("err", mapError("deleteWebhook", err)))
	}
}

// Health reports the inbound liveness (core.HealthReporter): in polling
// mode the last getUpdates round trip (a long poll that never returns is
// what deaf looks like there); in webhook mode what the last probe
// (ProbeHealth) said.
func (a *Adapter) Health() core.ChannelHealth {
	return a.live.Health()
}

// ProbeHealth is the platform probe of webhook mode (core.HealthProber):
// getWebhookInfo says how many updates Telegram holds for us and its last
// delivery error. Nothing waiting, or no delivery error on record, is a
// sign of life; updates waiting behind a delivery error are not, so a
// webhook Telegram cannot reach goes deaf once that lasts. Polling has its
// round trips instead.
func (a *Adapter) ProbeHealth(ctx context.Context) {
	if a.cfg.Mode != ModeWebhook {
		return
	}
	info, err := a.bot.GetWebhookInfo(ctx)
	if err != nil {
		// The error stays in the log (redacted): the probe is shown in
		// chats (/status), where no byte of a URL with the token belongs.
		a.log.Warn("telegram: getWebhookInfo failed", slog.String("err", shortErr(err)))
		a.live.Lost("getWebhookInfo failing")
		a.live.Probe("getWebhookInfo failed (see the log)")
		return
	}
	probe := fmt.Sprintf("getWebhookInfo: %d update(s) pending", info.PendingUpdateCount)
	if info.LastErrorDate > 0 {
		probe += fmt.Sprintf(", last delivery error at %s: %s", time.Unix(int64(info.LastErrorDate), 0).UTC().Format(time.RFC3339), info.LastErrorMessage)
	}
	a.live.Probe(probe)
	if info.PendingUpdateCount > 0 && info.LastErrorDate > 0 {
		a.live.Lost("webhook: Telegram cannot deliver")
		return
	}
	a.live.Heard(a.now(), "webhook")
}
