package e2e_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
)

// The reproduction: a stranger's "hi\u0000" once made polling
// retry the same update forever, so the owner was never answered.
func TestNULFromStrangerDoesNotBlockOwner(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	w.start(5 * time.Second)
	w.say(telegramtest.Private(sam), sam, "hi\x00")
	w.say(telegramtest.Private(sam), telegramtest.User{ID: 2002, FirstName: "S\x00am\u202e"}, "/whoami \xff")
	dm := telegramtest.Private(owner)
	w.say(dm, owner, "/whoami")
	w.waitMessage(dm.ID, "answer to the owner", func(m telegramtest.Message) bool { return strings.Contains(m.Text, "telegram:1001") })
	w.eventually("every turn done", 10*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM turns WHERE status <> 'done'`)
		return n == 0, fmt.Sprintf("%d turns not done", n)
	})
	// (The fake's JSON encoder already turned \xff into U+FFFD, as
	// Telegram would.)
	if n := w.count(`SELECT count(*) FROM turns WHERE body->'sanitized' ? 'text'`); n != 1 {
		t.Fatalf("%d turns note a sanitized text; want 1", n)
	}
	if n := w.count(`SELECT count(*) FROM turns WHERE body->'sanitized' ? 'sender_name'`); n != 1 {
		t.Fatalf("%d turns note a sanitized sender name; want 1", n)
	}
}

// FuzzWebhookIntake sends arbitrary text, names and ids through the whole
// intake path (webhook payload → adapter → Deliver → PostgreSQL): no
// panic, every request answered without a retry loop (200, or 400 for a
// body that is not an update), and afterwards the owner is still
// answered and no turn is stuck.
func FuzzWebhookIntake(f *testing.F) {
	for _, s := range [][3]string{
		{"hi\x00", "Eve", "1"},
		{"\xff\xfe", "\x00", "2"},
		{"hi\\u0000", "Eve\\u0000", "3"},
		{"\u202eevil", "\u2066x\u2069", "-5"},
		{"/run echo \x00", "O\x00", "0"},
		{`"}`, `\`, `1e99`},
		{strings.Repeat("x", 5000), "", "9"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	w := newWorld(f, options{webhook: true})
	n := w.start(5 * time.Second)
	var next atomic.Int64
	next.Store(1_000_000)
	f.Cleanup(func() {
		dm := telegramtest.Private(owner)
		w.say(dm, owner, "/whoami")
		w.push()
		w.waitMessage(dm.ID, "answer to the owner", func(m telegramtest.Message) bool { return strings.Contains(m.Text, "telegram:1001") })
		w.eventually("no turn pending", 20*time.Second, func() (bool, string) {
			p := w.count(`SELECT count(*) FROM turns WHERE status = 'pending'`)
			return p == 0, fmt.Sprintf("%d turns pending", p)
		})
	})
	f.Fuzz(func(t *testing.T, text, name, chat string) {
		id := next.Add(1)
		// Raw concatenation on purpose: the bytes reach the decoder as
		// they are (invalid UTF-8, stray quotes, escapes).
		body := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1,"chat":{"id":%s,"type":"private"},`+
			`"from":{"id":%s,"is_bot":false,"first_name":"%s"},"text":"%s"}}`, id, id, chat, chat, name, text)
		req := httptest.NewRequest(http.MethodPost, n.tg.WebhookPath(), bytes.NewReader([]byte(body)))
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", hookSecret)
		rec := httptest.NewRecorder()
		n.tg.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("update %d: HTTP %d (%s); want 200 or 400", id, rec.Code, rec.Body.String())
		}
		// Answered 200: stored, ignored or quarantined — never both.
		var both bool
		ev := "u" + strconv.FormatInt(id, 10)
		if err := w.db.Pool().QueryRow(w.ctx, `SELECT EXISTS (SELECT 1 FROM turns WHERE event_id = $1)
			AND EXISTS (SELECT 1 FROM dead_letters WHERE event_id = $1)`, ev).Scan(&both); err != nil {
			t.Fatal(err)
		}
		if both {
			t.Fatalf("update %d was stored and quarantined", id)
		}
	})
}
