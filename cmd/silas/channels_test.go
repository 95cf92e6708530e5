package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/silas-gateway/silas/adapters/spec"
	"github.com/silas-gateway/silas/internal/config"
)

// The routes the adapter specs return reach the listener the way serve
// wired them by hand before: Telegram's webhook path and Discord's
// interactions endpoint behind the loopback Host check (with the webhook
// URL's public name let through), Slack's /slack/ paths ahead of it.
func TestAdapterRoutes(t *testing.T) {
	cfg := config.Default()
	tg := &cfg.Telegram
	tg.Enabled, tg.Token, tg.Mode = true, "123456:abcdefghijklmnop", "webhook"
	tg.WebhookURL, tg.WebhookSecret = "https://bot.example.com/hooks/telegram", "e2e-webhook-secret_0123456789abcdef"
	dc := &cfg.Discord
	dc.Enabled, dc.Token, dc.ApplicationID, dc.Mode = true, "abcdefgh.ijkl.mnopqrstuvwx", "1234567", "http"
	dc.PublicKey = "1111111111111111111111111111111111111111111111111111111111111111"

	deps := spec.Deps{Logger: slog.New(slog.DiscardHandler)}
	set := &channelSet{}
	for _, a := range cfg.Adapters() {
		if !a.Enabled {
			continue
		}
		b, err := a.Build(context.Background(), deps)
		if err != nil {
			t.Fatalf("%s: %v", a.Name, err)
		}
		set.routes, set.hosts = append(set.routes, b.Routes...), append(set.hosts, b.Hosts...)
	}
	slackHit := false
	set.routes = append(set.routes, spec.Route{Prefix: "/slack/", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		slackHit = true
	})})
	ops := http.NewServeMux()
	ops.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	h := set.handler(ops, "127.0.0.1:8080", nil)

	do := func(method, host, path string) int {
		r := httptest.NewRequest(method, "http://"+host+path, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	tests := []struct {
		name, method, host, path string
		want                     int
	}{
		{"ops on loopback", "GET", "127.0.0.1:8080", "/healthz", http.StatusOK},
		{"ops under another name", "GET", "evil.example.com", "/healthz", http.StatusMisdirectedRequest},
		{"webhook under its public name reaches the adapter (no secret: refused there)", "POST", "bot.example.com", "/hooks/telegram", http.StatusUnauthorized},
		{"webhook under another name", "POST", "evil.example.com", "/hooks/telegram", http.StatusMisdirectedRequest},
		{"discord interactions reach the adapter (unsigned: refused there)", "POST", "127.0.0.1:8080", "/discord/interactions", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		if got := do(tt.method, tt.host, tt.path); got != tt.want {
			t.Errorf("%s: %s %s%s = %d, want %d", tt.name, tt.method, tt.host, tt.path, got, tt.want)
		}
	}
	if do("POST", "proxy.example.com", "/slack/events"); !slackHit {
		t.Error("a /slack/ path under a proxy's name did not reach the Slack route")
	}
}
