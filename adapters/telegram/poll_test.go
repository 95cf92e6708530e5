package telegram

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/core"
)

// TestPollingSurvivesKillAndRestart kills the adapter at different points
// of a burst of updates and restarts a new one with the same state store:
// every update is delivered at least once and, the inbox being idempotent
// on the event id, processed exactly once and in order.
func TestPollingSurvivesKillAndRestart(t *testing.T) {
	srv := telegramtest.NewServer(t, telegramtest.Options{NoRateLimits: true})
	in, st, logs := newFakeInbox(), newFakeState(), &syncBuffer{}
	const n = 240
	users := []telegramtest.User{owner, stranger, {ID: 3003, FirstName: "Tia"}}
	var ids []int64
	for i := range n {
		u := users[i%len(users)]
		chat := telegramtest.Private(u)
		text := fmt.Sprintf("/run echo %d", i)
		if i%4 == 3 {
			chat, text = group, fmt.Sprintf("/run@%s echo %d", srv.BotUsername, i)
		}
		ids = append(ids, srv.SendMessage(telegramtest.Msg{Chat: chat, From: u, Text: text}))
	}
	var (
		mu           sync.Mutex
		failNextSave bool
	)
	st.failSet = func(key, _ string) error {
		mu.Lock()
		defer mu.Unlock()
		if key == stateOffset && failNextSave {
			failNextSave = false
			return errors.New("database went away")
		}
		return nil
	}
	// Each life of the adapter ends differently.
	lives := []struct {
		name string
		arm  func(cancel context.CancelFunc, base int)
	}{
		{"killed before the turn is stored", func(cancel context.CancelFunc, base int) {
			in.setHooks(func(k int, _ core.Turn) error {
				if k-base == 40 {
					cancel()
					return context.Canceled
				}
				return nil
			}, nil)
		}},
		{"killed after the turn is stored, before the answer", func(cancel context.CancelFunc, base int) {
			in.setHooks(nil, func(k int, _ core.Turn) error {
				if k-base == 30 {
					cancel()
					return context.Canceled
				}
				return nil
			})
		}},
		{"offset write lost, then killed", func(cancel context.CancelFunc, base int) {
			in.setHooks(func(k int, _ core.Turn) error {
				if k-base == 21 { // right after the lost write
					cancel()
					return context.Canceled
				}
				return nil
			}, func(k int, _ core.Turn) error {
				if k-base == 20 {
					mu.Lock()
					failNextSave = true
					mu.Unlock()
				}
				return nil
			})
		}},
		{"killed from outside at any moment", func(cancel context.CancelFunc, base int) {
			in.setHooks(nil, func(k int, _ core.Turn) error {
				if k-base == 35 {
					go func() {
						time.Sleep(time.Millisecond)
						cancel()
					}()
				}
				return nil
			})
		}},
		{"runs to the end", func(cancel context.CancelFunc, _ int) {
			in.setHooks(nil, nil)
			go func() {
				deadline := time.Now().Add(30 * time.Second)
				for in.count() < n && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
			}()
		}},
	}
	for _, life := range lives {
		a, err := New(Config{Token: srv.Token, BaseURL: srv.URL, BotUsername: srv.BotUsername, State: st, PollTimeout: time.Second,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		base := in.callCount()
		life.arm(cancel, base)
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx, in) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: Run: %v", life.name, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: the adapter did not stop", life.name)
		}
		cancel()
		t.Logf("%s: %d of %d processed so far", life.name, in.count(), n)
	}
	turns := in.list()
	if len(turns) != n {
		t.Fatalf("%d turns processed; want %d", len(turns), n)
	}
	total := 0
	for i, tr := range turns {
		if tr.EventID != eventID(ids[i]) {
			t.Fatalf("turn %d is %s; want %s (in order, each once)", i, tr.EventID, eventID(ids[i]))
		}
		c := in.deliveries(tr.EventID)
		if c < 1 {
			t.Fatalf("%s never delivered", tr.EventID)
		}
		total += c
	}
	if total == n {
		t.Errorf("no update was delivered twice: the kills did not exercise redelivery")
	}
	t.Logf("%d deliveries for %d updates; duplicates were no-ops", total, n)
	if got := st.get(stateOffset); got != strconv.FormatInt(ids[n-1], 10) {
		t.Errorf("stored offset %s; want %d", got, ids[n-1])
	}
	if strings.Contains(logs.String(), srv.Token) {
		t.Error("the token appears in the log")
	}
}

func TestPollingResumesFromStoredOffset(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	var ids []int64
	for i := range 5 {
		ids = append(ids, b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: fmt.Sprint("msg ", i)}))
	}
	_ = b.st.SetState(context.Background(), "telegram", stateOffset, strconv.FormatInt(ids[2], 10))
	b.start(t)
	b.waitTurn(t, ids[4])
	if got := b.srv.Calls("getUpdates")[0].Params["offset"]; got != strconv.FormatInt(ids[2]+1, 10) {
		t.Errorf("first getUpdates offset %s; want %d", got, ids[2]+1)
	}
	if turns := b.in.list(); len(turns) != 2 || turns[0].EventID != eventID(ids[3]) {
		t.Fatalf("turns = %+v; want only those after the stored offset", turns)
	}
}

func TestPollingIgnoresStaleOffset(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	ctx := context.Background()
	_ = b.st.SetState(ctx, "telegram", stateOffset, "999999999")
	_ = b.st.SetState(ctx, "telegram", stateOffsetAt, time.Now().Add(-7*24*time.Hour).UTC().Format(time.RFC3339))
	id := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "hello after a quiet week"})
	b.start(t)
	b.waitTurn(t, id)
	if _, ok := b.srv.Calls("getUpdates")[0].Params["offset"]; ok {
		t.Error("a week-old offset was reused")
	}
}

func TestPollingRetriesFailedDeliverBeforeAcknowledging(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	id := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/run date"})
	var pendingWhileFailing []int
	b.in.setHooks(func(k int, _ core.Turn) error {
		if k <= 3 {
			pendingWhileFailing = append(pendingWhileFailing, b.srv.Pending())
			return errors.New("database is down")
		}
		return nil
	}, nil)
	b.start(t)
	b.waitTurn(t, id)
	for _, p := range pendingWhileFailing {
		if p != 1 {
			t.Errorf("Telegram had %d unconfirmed updates during the outage; the update must stay unconfirmed", p)
		}
	}
	if len(pendingWhileFailing) != 3 {
		t.Errorf("%d failed attempts; want 3", len(pendingWhileFailing))
	}
	waitFor(t, "the offset", func() bool { return b.st.get(stateOffset) == strconv.FormatInt(id, 10) })
	waitFor(t, "confirmation", func() bool { return b.srv.Pending() == 0 })
}

func TestPollingAcknowledgesRejectedTurns(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	first := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "too long, say"})
	second := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/help"})
	b.in.setHooks(func(_ int, t core.Turn) error {
		if t.EventID == eventID(first) {
			return &core.RejectedError{Reason: "text too long"}
		}
		return nil
	}, nil)
	b.start(t)
	b.waitTurn(t, second)
	if _, ok := b.in.find(eventID(first)); ok {
		t.Fatal("the rejected turn was stored")
	}
	if !strings.Contains(b.logs.String(), "rejected") {
		t.Error("the rejection was not logged")
	}
}

func TestPollingSkipsMalformedUpdates(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	s := b.srv
	from := `"from":{"id":5,"is_bot":false,"first_name":"Eve"}`
	raws := []string{
		`{"update_id":%d,"message":"not an object"}`,
		`{"update_id":%d,"message":{"message_id":1,"date":1,"chat":{"id":0,"type":"private"},` + from + `,"text":"hi"}}`,
		`{"update_id":%d,"message":{"message_id":1,"date":1,"chat":{"id":6,"type":"private"},` + from + `,"text":"spoofed chat"}}`,
		`{"update_id":%d,"message":{"message_id":1,"date":1,"chat":{"id":-5,"type":"supergroup"},` + from + `,"text":"@silas_test_bot hi","entities":[{"type":"mention","offset":-5,"length":999}]}}`,
		`{"update_id":%d,"callback_query":{"id":"no-such-query",` + from + `,"data":"c:x:y"}}`,
		`{"update_id":%d,"callback_query":{"id":"q2",` + from + `,"message":{"message_id":1,"date":5,"chat":{"id":5,"type":"private"}},"data":"` + strings.Repeat("x", 300) + `"}}`,
		`{"update_id":%d,"my_chat_member":{"chat":{"id":-5,"type":"group"}}}`,
		`{"update_id":%d,"message":{"message_id":1,"date":1,"chat":{"id":5,"type":"channel"},` + from + `,"text":"channel"}}`,
		`{"update_id":%d,"message":{"message_id":1,"date":1,"chat":{"id":5,"type":"private"},"from":{"id":-5},"text":"negative sender"}}`,
		`{"update_id":%d,"message":{"message_id":1,"date":1,"chat":{"id":5,"type":"private"},` + from + `,"photo":[{"file_id":"x"}]}}`,
		`{"update_id":%d,"edited_message":{"message_id":1,"date":1,"chat":{"id":5,"type":"private"},` + from + `,"text":"/run rm -rf /"}}`,
		`{"update_id":%d}`,
	}
	var last int64
	for _, r := range raws {
		last = s.NextUpdateID()
		s.AddRawUpdate(last, fmt.Sprintf(r, last))
	}
	s.AddRawUpdate(0, `42`)
	s.AddRawUpdate(0, `{"message":{}}`)
	good := s.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/help"})
	b.start(t)
	b.waitTurn(t, good)
	if n := b.in.count(); n != 1 {
		t.Fatalf("%d turns delivered; only the good one should be: %+v", n, b.in.list())
	}
	waitFor(t, "the offset", func() bool { return b.st.get(stateOffset) == strconv.FormatInt(good, 10) })
	logs := b.logs.String()
	for _, want := range []string{"malformed update dropped", "private chat id differs", "undecodable update skipped", "tap refused"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if last >= good {
		t.Fatal("test setup: ids out of order")
	}
}

func TestPollingRemovesAWebhook(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	b.srv.SetWebhook(telegramtest.WebhookInfo{URL: "https://old.example.com/hook"})
	id := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/help"})
	b.start(t)
	b.waitTurn(t, id)
	calls := b.srv.Calls("deleteWebhook")
	if len(calls) != 1 || calls[0].Params["drop_pending_updates"] == "true" {
		t.Fatalf("deleteWebhook calls = %+v; want one that keeps pending updates", calls)
	}
}

func TestPollingWithoutStateStore(t *testing.T) {
	b := setup(t, telegramtest.Options{}, func(c *Config) { c.State = nil })
	id := b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "/help"})
	b.start(t)
	b.waitTurn(t, id)
}

func TestRunRefusesASecondRun(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	b.start(t)
	waitFor(t, "the first poll", func() bool { return len(b.srv.Calls("getUpdates")) > 0 })
	if err := b.a.Run(context.Background(), b.in); err == nil {
		t.Fatal("a second Run on the same adapter started")
	}
}

// offset_at is stored with the first update handled and then at most once
// a minute: it only dates the offset for staleOffset, and written with
// every update it was a second write transaction per message.
func TestPollingStoresOffsetAtOncePerMinute(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	b.a.now = func() time.Time { return time.Unix(0, clock.Load()) }
	offsetAtWrites := func() int { return b.st.writesOf(stateOffsetAt) }
	var last int64
	for i := range 4 {
		last = b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: fmt.Sprint("msg ", i)})
	}
	b.start(t)
	b.waitTurn(t, last)
	waitFor(t, "the offset stored", func() bool { return b.st.get(stateOffset) == strconv.FormatInt(last, 10) })
	if n := offsetAtWrites(); n != 1 {
		t.Fatalf("offset_at written %d times for 4 updates within a minute; want 1", n)
	}
	clock.Add(int64(offsetAtEvery))
	last = b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: "a minute later"})
	b.waitTurn(t, last)
	waitFor(t, "the offset stored", func() bool { return b.st.get(stateOffset) == strconv.FormatInt(last, 10) })
	if n := offsetAtWrites(); n != 2 {
		t.Fatalf("offset_at written %d times after a minute passed; want 2", n)
	}
}

// The offset is stored once per getUpdates batch, after its last update
// was delivered (it was a fenced write transaction per update), and
// before the next getUpdates confirms the batch to Telegram.
func TestPollingStoresOffsetOncePerBatch(t *testing.T) {
	b := setup(t, telegramtest.Options{}, nil)
	offsetWrites := func() int { return b.st.writesOf(stateOffset) }
	var last int64
	for i := range 5 {
		last = b.srv.SendMessage(telegramtest.Msg{Chat: telegramtest.Private(owner), From: owner, Text: fmt.Sprint("msg ", i)})
	}
	b.start(t)
	b.waitTurn(t, last)
	waitFor(t, "the offset stored", func() bool { return b.st.get(stateOffset) == strconv.FormatInt(last, 10) })
	waitFor(t, "the next getUpdates", func() bool { return len(b.srv.Calls("getUpdates")) >= 2 })
	if n := offsetWrites(); n != 1 {
		t.Fatalf("offset written %d times for one batch of 5 updates; want 1", n)
	}
	if got := b.srv.Calls("getUpdates")[1].Params["offset"]; got != strconv.FormatInt(last+1, 10) {
		t.Fatalf("the getUpdates after the batch asked from %s; want %d", got, last+1)
	}
}
