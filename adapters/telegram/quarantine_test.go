package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/core"
)

// keepingInbox is a fakeInbox that also keeps dead letters.
type keepingInbox struct {
	*fakeInbox
	mu   sync.Mutex
	kept []core.DeadLetter
	// fail makes Quarantine fail while it returns true.
	fail func() bool
}

func (k *keepingInbox) Quarantine(_ context.Context, d core.DeadLetter) error {
	if k.fail != nil && k.fail() {
		return errors.New("database is down")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kept = append(k.kept, d)
	return nil
}

func (k *keepingInbox) letters() []core.DeadLetter {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]core.DeadLetter(nil), k.kept...)
}

func runWith(t *testing.T, b *bundle, in core.Inbox) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.a.Run(ctx, in) }()
	t.Cleanup(func() { cancel(); <-done })
}

func shortBackoff(t *testing.T) {
	old := deliverBackoffMin
	deliverBackoffMin = time.Millisecond
	t.Cleanup(func() { deliverBackoffMin = old })
}

// One poisoned update is quarantined and the polling offset moves past it:
// the owner's next message is answered.
func TestPollingQuarantinesPoisonedUpdates(t *testing.T) {
	shortBackoff(t)
	tests := []struct {
		name     string
		err      error
		attempts int
	}{
		{name: "permanent error", err: &core.PermanentError{Err: errors.New("invalid byte sequence for encoding UTF8: 0x00")}, attempts: 1},
		{name: "transient error that never clears", err: errors.New("timeout"), attempts: maxDeliverAttempts},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t, telegramtest.Options{}, nil)
			in := &keepingInbox{fakeInbox: b.in}
			poisoned := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(stranger), From: stranger, Text: "hi\x00"})
			next := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/help"})
			var quarantineFailures int
			in.fail = func() bool { quarantineFailures++; return quarantineFailures <= 2 } // the database blinks first
			b.in.setHooks(func(_ int, t core.Turn) error {
				if t.EventID == eventID(poisoned) {
					return tc.err
				}
				return nil
			}, nil)
			runWith(t, b, in)
			b.waitTurn(t, next)
			kept := in.letters()
			if len(kept) != 1 || kept[0].EventID != eventID(poisoned) || kept[0].Channel != b.a.Name() || len(kept[0].Payload) == 0 {
				t.Fatalf("dead letters = %+v", kept)
			}
			if kept[0].Attempts < tc.attempts {
				t.Errorf("quarantined after %d attempts; want at least %d", kept[0].Attempts, tc.attempts)
			}
			waitFor(t, "the offset", func() bool { return b.st.get(stateOffset) == strconv.FormatInt(next, 10) })
		})
	}
}

// A malformed update is kept too (it was dropped before).
func TestPollingQuarantinesMalformedUpdates(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	in := &keepingInbox{fakeInbox: b.in}
	bad := b.srv.NextUpdateID()
	b.srv.AddRawUpdate(bad, fmt.Sprintf(`{"update_id":%d,"message":"not an object"}`, bad))
	next := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/help"})
	runWith(t, b, in)
	b.waitTurn(t, next)
	if kept := in.letters(); len(kept) != 1 || kept[0].EventID != eventID(bad) {
		t.Fatalf("dead letters = %+v", kept)
	}
}

// The webhook answers 500 (Telegram retries) until the update is
// quarantined, then 200 so Telegram stops.
func TestWebhookQuarantinesPoisonedUpdates(t *testing.T) {
	b := setup(t, telegramtest.Options{}, func(c *Config) {
		c.Mode, c.WebhookURL, c.WebhookSecret = ModeWebhook, publicHook, testSecret
	})
	in := &keepingInbox{fakeInbox: b.in}
	mux := http.NewServeMux()
	mux.Handle(b.a.WebhookPath(), b.a)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	runWith(t, b, in)
	waitFor(t, "setWebhook", func() bool { return b.srv.Webhook().URL != "" })

	transient := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(stranger), From: stranger, Text: "x"})
	permanent := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(stranger), From: stranger, Text: "hi\x00"})
	b.in.setHooks(func(_ int, t core.Turn) error {
		switch t.EventID {
		case eventID(transient):
			return errors.New("timeout")
		case eventID(permanent):
			return &core.PermanentError{Err: errors.New("data error")}
		}
		return nil
	}, nil)
	body, _ := b.srv.Update(transient)
	for i := 1; i < maxDeliverAttempts; i++ {
		if code := post(t, hs, http.MethodPost, testSecret, body); code != http.StatusInternalServerError {
			t.Fatalf("attempt %d: %d; want 500", i, code)
		}
	}
	if code := post(t, hs, http.MethodPost, testSecret, body); code != http.StatusOK {
		t.Fatalf("last attempt: %d; want 200", code)
	}
	body, _ = b.srv.Update(permanent)
	if code := post(t, hs, http.MethodPost, testSecret, body); code != http.StatusOK {
		t.Fatalf("permanent error: %d; want 200 at once", code)
	}
	kept := in.letters()
	if len(kept) != 2 || kept[0].EventID != eventID(transient) || kept[0].Attempts != maxDeliverAttempts || kept[1].EventID != eventID(permanent) {
		t.Fatalf("dead letters = %+v", kept)
	}
}
