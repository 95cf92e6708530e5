package telegram

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/core"
)

const publicHook = "https://silas.example.com/hooks/telegram"

// webhookSetup builds a webhook-mode adapter served by an HTTP server the
// way the gateway routes it (WebhookPath).
func webhookSetup(t *testing.T) (*bundle, *httptest.Server) {
	t.Helper()
	b := setup(t, telegramtest.Options{}, func(c *Config) {
		c.Mode, c.WebhookURL, c.WebhookSecret = ModeWebhook, publicHook, testSecret
	})
	mux := http.NewServeMux()
	mux.Handle(b.a.WebhookPath(), b.a)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return b, hs
}

func post(t *testing.T, hs *httptest.Server, method, secret string, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest(method, hs.URL+"/hooks/telegram", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestWebhookIsRegisteredAtStart(t *testing.T) {
	b, _ := webhookSetup(t)
	b.start(t)
	waitFor(t, "setWebhook", func() bool { return b.srv.Webhook().URL != "" })
	w := b.srv.Webhook()
	if w.URL != publicHook || w.Secret != testSecret || !slices.Equal(w.AllowedUpdates, []string{"message", "callback_query"}) || w.MaxConnections != 40 {
		t.Fatalf("webhook = %+v", w)
	}
	if b.a.WebhookPath() != "/hooks/telegram" {
		t.Errorf("WebhookPath = %q", b.a.WebhookPath())
	}
}

func TestWebhookAuthenticatesThenStoresThenAcks(t *testing.T) {
	b, hs := webhookSetup(t)
	id := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/run uname -a"})
	body, _ := b.srv.Update(id)

	// Before Run: authenticated requests wait (503, Telegram retries).
	if code := post(t, hs, http.MethodPost, testSecret, body); code != http.StatusServiceUnavailable {
		t.Fatalf("before Run: %d", code)
	}
	b.start(t)
	waitFor(t, "setWebhook", func() bool { return b.srv.Webhook().URL != "" })

	for name, secret := range map[string]string{
		"missing":       "",
		"wrong":         "not-the-secret-at-all-0123456789",
		"prefix":        testSecret[:len(testSecret)-1],
		"longer":        testSecret + "x",
		"case":          strings.ToUpper(testSecret),
		"another token": b.srv.Token,
	} {
		if code := post(t, hs, http.MethodPost, secret, body); code != http.StatusUnauthorized {
			t.Errorf("%s secret: status %d; want 401", name, code)
		}
	}
	if code := post(t, hs, http.MethodGet, testSecret, nil); code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", code)
	}
	if n := b.in.callCount(); n != 0 {
		t.Fatalf("%d deliveries from unauthenticated requests", n)
	}

	if code := post(t, hs, http.MethodPost, testSecret, body); code != http.StatusOK {
		t.Fatalf("authentic update: %d", code)
	}
	got, ok := b.in.find(eventID(id))
	if !ok || got.Evidence != (core.Evidence{Authenticated: true, Method: "telegram-webhook-secret"}) || got.Text != "/run uname -a" {
		t.Fatalf("turn = %+v, %v", got, ok)
	}
	// Telegram redelivers (say our 200 was lost): a no-op.
	if code := post(t, hs, http.MethodPost, testSecret, body); code != http.StatusOK {
		t.Fatalf("redelivery: %d", code)
	}
	if b.in.count() != 1 || b.in.deliveries(eventID(id)) != 2 {
		t.Fatalf("processed %d, delivered %d times", b.in.count(), b.in.deliveries(eventID(id)))
	}

	// Deliver fails: 500, so Telegram keeps the update and retries.
	id2 := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/pending"})
	body2, _ := b.srv.Update(id2)
	b.in.setHooks(func(int, core.Turn) error { return errors.New("database is down") }, nil)
	if code := post(t, hs, http.MethodPost, testSecret, body2); code != http.StatusInternalServerError {
		t.Fatalf("failing Deliver: %d; want 500", code)
	}
	b.in.setHooks(nil, nil)
	if code := post(t, hs, http.MethodPost, testSecret, body2); code != http.StatusOK {
		t.Fatalf("retry: %d", code)
	}
	if _, ok := b.in.find(eventID(id2)); !ok {
		t.Fatal("retried update not delivered")
	}

	// Malformed and oversized bodies.
	for name, tc := range map[string]struct {
		body []byte
		code int
	}{
		"truncated JSON": {[]byte(`{"update_id":`), 400},
		"no update_id":   {[]byte(`{"message":{}}`), 400},
		"an array":       {[]byte(`[1,2]`), 400},
		"bad message":    {[]byte(`{"update_id":5,"message":"x"}`), 400},
		"huge":           {bytes.Repeat([]byte("a"), 2<<20), 413},
	} {
		if code := post(t, hs, http.MethodPost, testSecret, tc.body); code != tc.code {
			t.Errorf("%s: %d; want %d", name, code, tc.code)
		}
	}
	if !strings.Contains(b.logs.String(), "malformed update refused") {
		t.Error("malformed body not logged")
	}
	// Not for us: acknowledged, not delivered.
	id3 := b.srv.SendMessage(telegramtest.Msg{Chat: group, From: owner, Text: "unrelated group chatter"})
	body3, _ := b.srv.Update(id3)
	if code := post(t, hs, http.MethodPost, testSecret, body3); code != http.StatusOK {
		t.Fatalf("group chatter: %d", code)
	}
	if _, ok := b.in.find(eventID(id3)); ok {
		t.Fatal("group chatter delivered")
	}
	if b.in.count() != 2 {
		t.Fatalf("%d turns; want 2", b.in.count())
	}
}

// TestWebhookPushedByTelegram lets the fake push updates the way Telegram
// does: an update is dropped only after a 2xx.
func TestWebhookPushedByTelegram(t *testing.T) {
	b, hs := webhookSetup(t)
	b.start(t)
	waitFor(t, "setWebhook", func() bool { return b.srv.Webhook().URL != "" })
	// Point the fake at the test server (the public URL is not reachable).
	b.srv.SetWebhook(telegramtest.WebhookInfo{URL: hs.URL + "/hooks/telegram", Secret: testSecret})
	var ids []int64
	for _, text := range []string{"/run date", "/pending", "/whoami"} {
		ids = append(ids, b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: text}))
	}
	ctx := context.Background()
	if n, err := b.srv.PushWebhook(ctx); err != nil || n != 3 {
		t.Fatalf("push: %d, %v", n, err)
	}
	for i, tr := range b.in.list() {
		if tr.EventID != eventID(ids[i]) {
			t.Fatalf("turn %d = %s; want %s", i, tr.EventID, eventID(ids[i]))
		}
	}
	// An outage of the core: Telegram keeps the update.
	id := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/help"})
	b.in.setHooks(func(int, core.Turn) error { return errors.New("database is down") }, nil)
	if _, err := b.srv.PushWebhook(ctx); err == nil || b.srv.Pending() != 1 {
		t.Fatalf("push during an outage: %v, %d pending", err, b.srv.Pending())
	}
	b.in.setHooks(nil, nil)
	if n, err := b.srv.PushWebhook(ctx); err != nil || n != 1 {
		t.Fatalf("push after the outage: %d, %v", n, err)
	}
	b.waitTurn(t, id)
	// Someone who knows the URL but not the secret gets nothing in.
	b.srv.SetWebhook(telegramtest.WebhookInfo{URL: hs.URL + "/hooks/telegram", Secret: "guessed-secret-0123456789abcdef"})
	forged := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/run rm -rf /"})
	if _, err := b.srv.PushWebhook(ctx); err == nil {
		t.Fatal("a wrong secret was accepted")
	}
	if _, ok := b.in.find(eventID(forged)); ok {
		t.Fatal("forged update delivered")
	}
}

func TestWebhookTapsAreAnswered(t *testing.T) {
	b, hs := webhookSetup(t)
	b.start(t)
	waitFor(t, "setWebhook", func() bool { return b.srv.Webhook().URL != "" })
	_, qid := b.srv.Tap(telegramtest.Private(owner), owner, 1, "not-ours")
	uid := b.srv.NextUpdateID() - 1
	body, _ := b.srv.Update(uid)
	if code := post(t, hs, http.MethodPost, testSecret, body); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if a := b.srv.Answers(); len(a) != 1 || a[0].QueryID != qid || a[0].Text != "Unknown button" {
		t.Fatalf("answers = %+v", a)
	}
}

func TestWebhookEndpointIsOffInPollingMode(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	b.start(t)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/hooks/telegram", strings.NewReader(`{"update_id":1}`))
	req.Header.Set("X-Telegram-Bot-Api-Secret-Token", "")
	b.a.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound || b.a.WebhookPath() != "" {
		t.Fatalf("polling adapter answered %d (path %q)", rec.Code, b.a.WebhookPath())
	}
}
