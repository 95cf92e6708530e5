package telegram

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
)

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(telegramtest.DefaultToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(testSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := Config{Token: telegramtest.DefaultToken}
	hook := func(c Config) Config {
		c.Mode, c.WebhookURL, c.WebhookSecret = ModeWebhook, "https://silas.example.com/hooks/telegram", testSecret
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		key  string // "" = valid
	}{
		{"defaults with a token", ok, ""},
		{"token from a file", Config{Token: "file:" + tokenFile}, ""},
		{"missing token", Config{}, "telegram.token"},
		{"unreadable token file", Config{Token: "file:" + filepath.Join(dir, "nope")}, "telegram.token"},
		{"token without id", Config{Token: "abcdefghijklmnopqrstuvwxyz"}, "telegram.token"},
		{"unknown mode", func() Config { c := ok; c.Mode = "push"; return c }(), "telegram.mode"},
		{"webhook", hook(ok), ""},
		{"webhook secret from a file", func() Config { c := hook(ok); c.WebhookSecret = "file:" + secretFile; return c }(), ""},
		{"webhook without url", func() Config { c := hook(ok); c.WebhookURL = ""; return c }(), "telegram.webhook_url"},
		{"webhook over http", func() Config { c := hook(ok); c.WebhookURL = "http://silas.example.com/h"; return c }(), "telegram.webhook_url"},
		{"webhook on an odd port", func() Config { c := hook(ok); c.WebhookURL = "https://silas.example.com:9000/h"; return c }(), "telegram.webhook_url"},
		{"webhook on localhost", func() Config { c := hook(ok); c.WebhookURL = "https://localhost/h"; return c }(), "telegram.webhook_url"},
		{"webhook over http to a self-hosted Bot API", func() Config {
			c := hook(ok)
			c.BaseURL, c.WebhookURL = "http://127.0.0.1:8081", "http://127.0.0.1:9000/h"
			return c
		}(), ""},
		{"webhook without secret", func() Config { c := hook(ok); c.WebhookSecret = ""; return c }(), "telegram.webhook_secret"},
		{"short secret", func() Config { c := hook(ok); c.WebhookSecret = "short"; return c }(), "telegram.webhook_secret"},
		{"secret with odd characters", func() Config { c := hook(ok); c.WebhookSecret = strings.Repeat("a", 30) + "!"; return c }(), "telegram.webhook_secret"},
		{"too many connections", func() Config { c := hook(ok); c.WebhookMaxConnections = 500; return c }(), "telegram.webhook_max_connections"},
		{"bad base url", func() Config { c := ok; c.BaseURL = "ftp://x"; return c }(), "telegram.base_url"},
		{"bad username", func() Config { c := ok; c.BotUsername = "@x y"; return c }(), "telegram.bot_username"},
		{"username with @", func() Config { c := ok; c.BotUsername = "@silas_bot"; return c }(), ""},
		{"unknown update type", func() Config { c := ok; c.AllowedUpdates = []string{"message", "callback_query", "emails"}; return c }(), "telegram.allowed_updates"},
		{"no callback_query", func() Config { c := ok; c.AllowedUpdates = []string{"message"}; return c }(), "telegram.allowed_updates"},
		{"poll timeout too long", func() Config { c := ok; c.PollTimeout = time.Minute; return c }(), "telegram.poll_timeout"},
		{"http timeout too short", func() Config { c := ok; c.HTTPTimeout = time.Millisecond; return c }(), "telegram.http_timeout"},
		{"negative interval", func() Config { c := ok; c.Limits.PerChatInterval = -time.Second; return c }(), "telegram.limits.per_chat_interval"},
		{"negative group rate", func() Config { c := ok; c.Limits.GroupPerMinute = -1; return c }(), "telegram.limits.group_per_minute"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.key == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.key != "" && err == nil:
				t.Fatalf("Validate accepted it; want an error naming %s", tt.key)
			case tt.key != "" && !strings.HasPrefix(err.Error(), tt.key+":"):
				t.Fatalf("error %q does not start with %s", err, tt.key)
			}
			if err != nil && (strings.Contains(err.Error(), telegramtest.DefaultToken) || strings.Contains(err.Error(), testSecret)) {
				t.Fatalf("error %q contains a secret", err)
			}
		})
	}
	// A wrong token is never echoed.
	err := Config{Token: "12345:has spaces in it which is wrong"}.Validate()
	if err == nil || strings.Contains(err.Error(), "has spaces") {
		t.Fatalf("error %v", err)
	}
}
