package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/silas-gateway/silas/adapters/slack"
	"github.com/silas-gateway/silas/internal/config"
)

// slackConfig maps the slack.* keys onto the adapter's config; file:
// values pass through (the adapter reads them itself).
func slackConfig(cfg *config.Config, log *slog.Logger) slack.Config {
	s := cfg.Slack
	return slack.Config{Mode: s.Mode, BotToken: s.BotToken, AppToken: s.AppToken, SigningSecret: s.SigningSecret,
		BaseURL: s.BaseURL, TeamID: s.TeamID, HTTPTimeout: s.HTTPTimeout.Duration,
		PingInterval: s.PingInterval.Duration, PingTimeout: s.PingTimeout.Duration,
		Limits: slack.Limits{PerChannelInterval: s.Limits.PerChannelInterval.Duration, GlobalPerSecond: s.Limits.GlobalPerSecond,
			UpdatePerMinute: s.Limits.UpdatePerMinute, EphemeralPerMinute: s.Limits.EphemeralPerMinute},
		Logger: log}
}

// slackRoutes sends HTTP-mode Slack requests (/slack/…) to the adapter and
// everything else to next. They bypass the loopback Host check: they come
// through a reverse proxy under its public name and are authenticated by
// their signature, not by where they come from.
func slackRoutes(sl *slack.Adapter, next http.Handler) http.Handler {
	if sl == nil || sl.Handler() == nil {
		return next
	}
	h := sl.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/slack/") {
			h.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// doctorSlack prints the Slack checks; it returns the number of problems.
func doctorSlack(ctx context.Context, out io.Writer, cfg *config.Config) int {
	fmt.Fprintln(out, "Slack")
	if strings.TrimSpace(cfg.Slack.BotToken) == "" {
		fmt.Fprintln(out, "  · not configured (no slack.bot_token): skipped")
		return 0
	}
	problems := 0
	for _, f := range slack.Doctor(ctx, slackConfig(cfg, nil)) {
		mark := map[slack.Severity]string{slack.SeverityOK: "✓", slack.SeverityInfo: "·", slack.SeverityWarn: "!", slack.SeverityError: "✗"}[f.Severity]
		fmt.Fprintf(out, "  %s %-12s %s\n", mark, f.Check, f.Message)
		if f.Severity == slack.SeverityError {
			problems++
		}
	}
	return problems
}
