package telegram

import (
	"context"
	"errors"
	"fmt"
	"github.com/silas-gateway/silas/internal/doctor"
	"slices"
	"strings"
	"time"

	"github.com/go-telegram/bot"

	"github.com/silas-gateway/silas/adapters/kit"
)

// Severity and Finding are the shape every doctor shares (internal/doctor).
type (
	Severity = doctor.Severity
	Finding  = doctor.Finding
)

// Severities, from fine to broken.
const (
	SeverityOK    = doctor.OK
	SeverityInfo  = doctor.Info
	SeverityWarn  = doctor.Warn
	SeverityError = doctor.Error
)

// Doctor checks the configuration, the token (getMe) and the webhook status
// (getWebhookInfo) and explains misconfiguration in plain words. It never
// includes the token or the webhook secret in a finding. Nothing is changed
// on Telegram's side.
func Doctor(ctx context.Context, cfg Config) []Finding {
	var out []Finding
	add := func(s Severity, check, format string, a ...any) {
		out = append(out, Finding{Severity: s, Check: check, Message: fmt.Sprintf(format, a...)})
	}
	r, err := cfg.resolve()
	if err != nil {
		add(SeverityError, "config", "%v", err)
		return out
	}
	add(SeverityOK, "config", "telegram settings are valid (mode %s, Bot API %s)", r.Mode, r.BaseURL)
	a, err := New(cfg)
	if err != nil {
		add(SeverityError, "config", "%v", err)
		return out
	}
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, r.HTTPTimeout) }

	cctx, cancel := call()
	me, err := a.bot.GetMe(cctx)
	cancel()
	switch {
	case errors.Is(err, bot.ErrorUnauthorized) || errors.Is(err, bot.ErrorNotFound):
		add(SeverityError, "token", "Telegram rejected the bot token (%s): it is wrong or was revoked. Get the current one from @BotFather (/token) and set telegram.token.", shortErr(err))
		return out
	case err != nil:
		add(SeverityError, "token", "could not reach the Bot API at %s to check the token: %s. Check the network, a proxy, or telegram.base_url.", r.BaseURL, shortErr(err))
		return out
	}
	add(SeverityOK, "token", "the token belongs to @%s (bot id %d)", me.Username, me.ID)
	if r.BotUsername != "" && !strings.EqualFold(r.BotUsername, me.Username) {
		add(SeverityError, "bot_username", "telegram.bot_username is @%s but the token belongs to @%s: group mentions would not be recognised. Remove the key or correct it.", r.BotUsername, me.Username)
	}
	if me.CanReadAllGroupMessages {
		add(SeverityInfo, "privacy", "privacy mode is off: the bot receives every group message. Silas ignores those not addressed to it; to stop receiving them, turn privacy mode on in @BotFather (/setprivacy) and re-add the bot to its groups.")
	} else {
		add(SeverityOK, "privacy", "privacy mode is on: in groups the bot only receives commands, mentions and replies")
	}

	cctx, cancel = call()
	info, err := a.bot.GetWebhookInfo(cctx)
	cancel()
	if err != nil {
		add(SeverityWarn, "webhook", "could not read the webhook status: %s", shortErr(err))
		return out
	}
	switch r.Mode {
	case ModePolling:
		if info.URL != "" {
			add(SeverityWarn, "webhook", "a webhook is set (%s) but telegram.mode is polling: Telegram refuses getUpdates while it is set. `silas serve` removes it at start (pending updates are kept); if you meant to use it, set telegram.mode: webhook.", info.URL)
		} else {
			add(SeverityOK, "webhook", "no webhook is set, as polling needs")
		}
	case ModeWebhook:
		switch {
		case info.URL == "":
			add(SeverityWarn, "webhook", "no webhook is registered yet. `silas serve` registers %s at start; if it keeps missing, look for setWebhook errors in the log.", r.WebhookURL)
		case info.URL != r.WebhookURL:
			add(SeverityWarn, "webhook", "Telegram delivers to %s, but telegram.webhook_url is %s. `silas serve` re-registers it at start; another deployment using the same token would take it back.", info.URL, r.WebhookURL)
		default:
			add(SeverityOK, "webhook", "Telegram delivers to %s", info.URL)
		}
		if info.LastErrorDate > 0 {
			when := time.Unix(int64(info.LastErrorDate), 0).UTC().Format(time.RFC3339)
			sev := SeverityWarn
			if time.Since(time.Unix(int64(info.LastErrorDate), 0)) < time.Hour {
				sev = SeverityError
			}
			add(sev, "webhook", "Telegram's last delivery to the webhook failed at %s: %q. Check that the URL is reachable from the internet over HTTPS with a valid certificate, and that the proxy forwards it to Silas.", when, info.LastErrorMessage)
		}
		if info.URL != "" {
			for _, need := range DefaultAllowedUpdates {
				if len(info.AllowedUpdates) > 0 && !slices.Contains(info.AllowedUpdates, need) {
					add(SeverityWarn, "webhook", "the registered webhook does not receive %q updates; `silas serve` fixes this at start.", need)
				}
			}
		}
	}
	if info.PendingUpdateCount > 100 {
		add(SeverityWarn, "updates", "%d updates are waiting at Telegram: Silas has not been receiving for a while (Telegram keeps them for 24 hours).", info.PendingUpdateCount)
	} else if info.PendingUpdateCount > 0 {
		add(SeverityInfo, "updates", "%d update(s) waiting at Telegram; they are delivered when Silas runs.", info.PendingUpdateCount)
	}
	return out
}

// shortErr is an error for a finding: the SDK's prefix trimmed.
func shortErr(err error) string {
	err = kit.RedactURL(err)
	var tm *bot.TooManyRequestsError
	if errors.As(err, &tm) {
		return fmt.Sprintf("rate limited, retry after %ds", tm.RetryAfter)
	}
	s := err.Error()
	if i := strings.LastIndex(s, ", "); i >= 0 && (errors.Is(err, bot.ErrorUnauthorized) || errors.Is(err, bot.ErrorNotFound)) {
		return strings.TrimSpace(s[i+2:])
	}
	return s
}
