package telegram

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
)

func findings(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "%s %s: %s\n", f.Severity, f.Check, f.Message)
	}
	return b.String()
}

func TestDoctor(t *testing.T) {
	ctx := context.Background()
	type scenario struct {
		name    string
		fake    telegramtest.Options
		prepare func(s *telegramtest.Server)
		mod     func(c *Config, s *telegramtest.Server)
		want    []string // substrings of "<severity> <check>: <message>"
	}
	hook := func(c *Config, _ *telegramtest.Server) {
		c.Mode, c.WebhookURL, c.WebhookSecret = ModeWebhook, "https://silas.example.com/hooks/telegram", testSecret
	}
	tests := []scenario{
		{name: "healthy polling", want: []string{"ok config", "ok token: the token belongs to @silas_test_bot", "ok privacy", "ok webhook: no webhook is set"}},
		{name: "revoked token", mod: func(c *Config, _ *telegramtest.Server) { c.Token = "42:AAAAAAAAAAAAAAAAAAAAAAAA" },
			want: []string{"error token: Telegram rejected the bot token"}},
		{name: "bad config", mod: func(c *Config, _ *telegramtest.Server) { c.Mode = "smoke-signals" }, want: []string{"error config: telegram.mode"}},
		{name: "unreachable API", mod: func(c *Config, _ *telegramtest.Server) { c.BaseURL = "http://127.0.0.1:1" },
			want: []string{"error token: could not reach the Bot API at http://127.0.0.1:1"}},
		{name: "wrong username", mod: func(c *Config, _ *telegramtest.Server) { c.BotUsername = "someone_else_bot" },
			want: []string{"error bot_username: telegram.bot_username is @someone_else_bot but the token belongs to @silas_test_bot"}},
		{name: "privacy off", fake: telegramtest.Options{PrivacyOff: true}, want: []string{"info privacy: privacy mode is off"}},
		{name: "webhook left over while polling", prepare: func(s *telegramtest.Server) {
			s.SetWebhook(telegramtest.WebhookInfo{URL: "https://old.example.com/hook"})
		}, want: []string{"warn webhook: a webhook is set (https://old.example.com/hook) but telegram.mode is polling"}},
		{name: "webhook not registered yet", mod: hook, want: []string{"warn webhook: no webhook is registered yet"}},
		{name: "webhook elsewhere and failing", mod: hook, prepare: func(s *telegramtest.Server) {
			s.SetWebhook(telegramtest.WebhookInfo{URL: "https://other.example.com/h", AllowedUpdates: []string{"message"}})
			s.SetWebhookError(time.Now().Add(-time.Minute), "SSL error {error:0A000086:SSL routines::certificate verify failed}")
			for range 150 {
				s.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "hi"})
			}
		}, want: []string{
			"warn webhook: Telegram delivers to https://other.example.com/h, but telegram.webhook_url is https://silas.example.com/hooks/telegram",
			"error webhook: Telegram's last delivery to the webhook failed", "certificate verify failed",
			"warn webhook: the registered webhook does not receive \"callback_query\" updates",
			"warn updates: 150 updates are waiting",
		}},
		{name: "healthy webhook", mod: hook, prepare: func(s *telegramtest.Server) {
			s.SetWebhook(telegramtest.WebhookInfo{URL: "https://silas.example.com/hooks/telegram", AllowedUpdates: []string{"message", "callback_query"}})
		}, want: []string{"ok webhook: Telegram delivers to https://silas.example.com/hooks/telegram"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := telegramtest.NewServer(t, tt.fake)
			if tt.prepare != nil {
				tt.prepare(s)
			}
			cfg := Config{Token: s.Token, BaseURL: s.URL, HTTPTimeout: 5 * time.Second}
			if tt.mod != nil {
				tt.mod(&cfg, s)
			}
			got := findings(Doctor(ctx, cfg))
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("findings lack %q:\n%s", w, got)
				}
			}
			if strings.Contains(got, s.Token) || strings.Contains(got, testSecret) {
				t.Errorf("a secret appears in the findings:\n%s", got)
			}
			// Doctor changes nothing on Telegram's side.
			for _, m := range []string{"setWebhook", "deleteWebhook", "sendMessage"} {
				if n := len(s.Calls(m)); n > 0 {
					t.Errorf("doctor called %s", m)
				}
			}
		})
	}
}
