// Package e2e_test runs Silas end to end over Slack: the real engine, the
// real Slack adapter and slack-go client, the fake Slack (slacktest) and a
// real PostgreSQL database per test (internal/pgtest).
package e2e_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/silas-gateway/silas/adapters/slack"
	"github.com/silas-gateway/silas/adapters/slack/slacktest"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/trust"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	owner   = "U0OLIVE"
	mia     = "U0MIA"
	sam     = "U0SAM"
	ops     = "C0OPS"
	secret  = "8f742231b10e8888abcd99yyyzzz85a5"
	ownerID = core.IdentityID("slack:" + owner)
)

func dmOf(user string) string { return "D" + user[1:] }

type options struct {
	http   bool
	access trust.AccessPolicy // DM policy ("" = open)
	// speed runs every clock of the deployment — the fake Slack's, the
	// adapter's limiters', the engine's and store's Now and the outbox's
	// retry timers — this many times faster than real time, with the
	// engine's default outbox backoff (5 minutes at most).
	speed float64
	// others are Socket Mode connections of another process on the same
	// app token (slacktest.Options.OtherConnections).
	others int
}

// fastClock is a kit.Clock running speed times faster than real time.
type fastClock struct {
	start time.Time
	speed float64
}

func (c *fastClock) Now() time.Time {
	return c.start.Add(time.Duration(float64(time.Since(c.start)) * c.speed))
}

func (c *fastClock) After(d time.Duration) <-chan time.Time {
	return time.After(time.Duration(float64(d) / c.speed))
}

type world struct {
	t     *testing.T
	opts  options
	fast  *fastClock // options.speed
	srv   *slacktest.Server
	dsn   string
	db    *store.Store
	key   ed25519.PrivateKey
	sbDir string
	logs  *syncBuffer
	ctx   context.Context

	st      *store.Store
	eng     *gateway.Gateway
	sl      *slack.Adapter
	hs      *httptest.Server
	reg     *prometheus.Registry
	stop    func()
	stopped bool
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func newWorld(t *testing.T, o options) *world {
	w := &world{t: t, opts: o, logs: &syncBuffer{}, sbDir: t.TempDir(), ctx: context.Background()}
	so := slacktest.Options{SigningSecret: secret, OtherConnections: o.others}
	if o.speed > 0 {
		w.fast = &fastClock{start: time.Now(), speed: o.speed}
		so.Now = w.fast.Now
	}
	w.srv = slacktest.NewServer(t, so)
	w.dsn = storetest.NewDatabase(t)
	db, err := store.Open(w.ctx, w.dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.db = db
	_, w.key, _ = ed25519.GenerateKey(rand.Reader)
	t.Cleanup(func() {
		if w.stop != nil && !w.stopped {
			w.stop()
		}
		if !t.Failed() {
			if _, err := w.db.VerifyAudit(w.ctx); err != nil {
				t.Errorf("audit chain: %v", err)
			}
		}
		w.db.Close()
		logs := w.logs.String()
		for _, tok := range []string{slacktest.BotToken, slacktest.AppToken, secret} {
			if strings.Contains(logs, tok) {
				t.Errorf("a secret appears in the log")
			}
		}
		for _, v := range w.srv.Violations() {
			t.Errorf("fake Slack: %s", v)
		}
		if t.Failed() {
			if len(logs) > 40000 {
				logs = "…" + logs[len(logs)-40000:]
			}
			t.Logf("gateway log:\n%s", logs)
		}
	})
	return w
}

// start runs a gateway wired like cmd/silas serve.
func (w *world) start(mod func(*slack.Config)) {
	t := w.t
	so := store.Options{MaxConns: 16}
	if w.fast != nil {
		so.Now = w.fast.Now
	}
	st, err := store.Open(w.ctx, w.dsn, so)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: w.sbDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	pol, _ := policy.New(nil)
	log := slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := slack.Config{BotToken: slacktest.BotToken, AppToken: slacktest.AppToken, BaseURL: w.srv.URL, Logger: log, State: st,
		HTTPTimeout: 5 * time.Second, PingInterval: 200 * time.Millisecond, PingTimeout: 400 * time.Millisecond}
	if w.opts.http {
		cfg.Mode, cfg.SigningSecret, cfg.AppToken = slack.ModeHTTP, secret, ""
	}
	ecfg := gateway.Config{OutboxMaxBackoff: 2 * time.Second}
	if w.fast != nil {
		cfg.Now, cfg.Clock = w.fast.Now, w.fast
		ecfg = gateway.Config{Now: w.fast.Now, OutboxAfter: w.fast.After} // default backoff
	}
	if mod != nil {
		mod(&cfg)
	}
	sl, err := slack.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.reg = prometheus.NewRegistry()
	if err := sl.RegisterMetrics(w.reg); err != nil {
		t.Fatal(err)
	}
	var access map[core.ChannelName]trust.AccessPolicy
	if w.opts.access != "" {
		access = map[core.ChannelName]trust.AccessPolicy{sl.Name(): w.opts.access}
	}
	eng, err := gateway.New(gateway.Config{
		Store: st, Channels: []core.Channel{sl}, Agent: agent.Command{}, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}}, Policy: pol, Key: w.key,
		Owners: []core.IdentityID{ownerID}, Access: access, OutboxMaxBackoff: ecfg.OutboxMaxBackoff,
		Now: ecfg.Now, OutboxAfter: ecfg.OutboxAfter, Registry: w.reg, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	engCtx, stopEng := context.WithCancel(w.ctx)
	engDone := make(chan struct{})
	go func() {
		defer close(engDone)
		if err := eng.Run(engCtx, 5*time.Second); err != nil {
			t.Errorf("engine.Run: %v", err)
		}
	}()
	<-eng.Ready()
	if w.opts.http {
		w.hs = httptest.NewServer(sl.Handler())
		w.srv.SetTarget(w.hs.URL)
	}
	slCtx, stopSl := context.WithCancel(w.ctx)
	slDone := make(chan struct{})
	go func() {
		defer close(slDone)
		if err := sl.Run(slCtx, eng); err != nil {
			t.Errorf("slack.Run: %v", err)
		}
	}()
	w.st, w.eng, w.sl, w.stopped = st, eng, sl, false
	w.stop = func() {
		w.stopped = true
		stopSl()
		<-slDone
		stopEng()
		<-engDone
		if w.hs != nil {
			w.hs.Close()
		}
		st.Close()
	}
}

func (w *world) eventually(what string, d time.Duration, cond func() (bool, string)) {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out after %s waiting for %s: %s", d, what, detail)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *world) count(q string, args ...any) int {
	w.t.Helper()
	var n int
	if err := w.db.Pool().QueryRow(w.ctx, q, args...).Scan(&n); err != nil {
		w.t.Fatalf("%s: %v", q, err)
	}
	return n
}

func dump(msgs []slacktest.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "\n  %s thread=%s edits=%d text=%q buttons=%v blocks=%s", m.TS, m.Thread, m.Edits, m.Text, m.Buttons(), m.BlocksText())
	}
	if b.Len() == 0 {
		return "(no messages)"
	}
	return b.String()
}

func (w *world) waitMessage(channel, what string, pred func(slacktest.Message) bool) slacktest.Message {
	w.t.Helper()
	var got slacktest.Message
	w.eventually(what, 30*time.Second, func() (bool, string) {
		msgs := w.srv.Messages(channel)
		for _, m := range msgs {
			if pred(m) {
				got = m
				return true, ""
			}
		}
		return false, dump(msgs)
	})
	return got
}

func (w *world) waitEdit(channel, ts, what string, pred func(slacktest.Message) bool) slacktest.Message {
	w.t.Helper()
	var got slacktest.Message
	w.eventually(what, 30*time.Second, func() (bool, string) {
		for _, m := range w.srv.Messages(channel) {
			if m.TS == ts {
				got = m
				return pred(m), dump([]slacktest.Message{m})
			}
		}
		return false, "message gone"
	})
	return got
}

func hasButton(label string) func(slacktest.Message) bool {
	return func(m slacktest.Message) bool {
		b := m.Buttons()
		return len(b) > 0 && b[0][0] == label
	}
}

func done(m slacktest.Message) bool {
	return strings.Contains(m.BlocksText(), "exit code 0 ✓") && len(m.Buttons()) == 0
}

// TestDMRunCardTapUpdatedInPlace: "run …" in a DM gets a Block Kit card;
// tapping updates the same message (chat.update) to the verified result;
// a medium-risk command asks for Confirm on the same card; a replayed tap
// runs nothing again.
func TestDMRunCardTapUpdatedInPlace(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	w.start(nil)
	dm := dmOf(owner)

	w.srv.Send(slacktest.Msg{Channel: dm, User: owner, Text: "run echo hi"})
	card := w.waitMessage(dm, "approval card", hasButton("Run `echo hi`"))
	bt := card.BlocksText()
	for _, want := range []string{`"type":"header"`, "Risk: *low*", "```echo hi```", `"style":"primary"`} {
		if !strings.Contains(bt, want) {
			t.Errorf("card lacks %s:%s", want, dump([]slacktest.Message{card}))
		}
	}
	trig := w.srv.Tap(card, owner, "Run `echo hi`")
	fin := w.waitEdit(dm, card.TS, "card updated to the result", done)
	if !strings.Contains(fin.BlocksText(), "hi\\n") && !strings.Contains(fin.BlocksText(), "```hi") {
		t.Errorf("result card lacks the output:%s", dump([]slacktest.Message{fin}))
	}
	// The same interaction again (Slack retry) and a new tap on the stale
	// buttons: one execution.
	w.srv.TapValue(card, owner, card.Buttons()[0][1], trig)
	w.srv.Tap(card, owner, "Run `echo hi`")
	w.eventually("replayed taps processed", 15*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM turns WHERE channel = 'slack' AND status = 'done'`)
		return n == 3 && w.srv.Pending() == 0, fmt.Sprintf("%d turns done, %d pending", n, w.srv.Pending())
	})
	if n := w.count(`SELECT count(*) FROM executions`); n != 1 {
		t.Fatalf("executions = %d; want 1", n)
	}

	// Medium risk: Review → Confirm on the same message → result.
	w.srv.Send(slacktest.Msg{Channel: dm, User: owner, Text: "/run touch x"})
	c2 := w.waitMessage(dm, "medium card", hasButton("Review: Run `touch x`"))
	w.srv.Tap(c2, owner, "Review: Run `touch x`")
	conf := w.waitEdit(dm, c2.TS, "confirm", hasButton("Confirm: Run `touch x`"))
	w.srv.Tap(conf, owner, "Confirm: Run `touch x`")
	w.waitEdit(dm, c2.TS, "confirmed result", done)
	if msgs := w.srv.Messages(dm); len(msgs) != 2 {
		t.Errorf("DM has %d bot messages; want the 2 cards:%s", len(msgs), dump(msgs))
	}
	if len(w.srv.Calls("chat.update")) < 3 {
		t.Errorf("cards were not updated with chat.update: %d calls", len(w.srv.Calls("chat.update")))
	}
	// The bot's own posts and edits echoed back are ignored.
	w.srv.BotEcho(fin)
	w.srv.Send(slacktest.Msg{Channel: dm, User: owner, Text: "whoami"})
	w.waitMessage(dm, "whoami answer", func(m slacktest.Message) bool { return strings.Contains(m.Text, "slack:"+owner+" with owner trust") })
	if n := w.count(`SELECT count(*) FROM turns WHERE sender = 'slack:U0SILAS'`); n != 0 {
		t.Errorf("the bot's own messages became %d turns", n)
	}
	// A pasted credential: redacted, and deleting it is tried (Slack
	// refuses a bot deleting a person's message; nothing breaks).
	tok := "ghp_" + "0123456789abcdefghijABCDEFGHIJ012345"
	w.srv.Send(slacktest.Msg{Channel: dm, User: owner, Text: "my token is " + tok})
	w.waitMessage(dm, "redaction notice", func(m slacktest.Message) bool {
		return strings.Contains(m.Text, "removed what looked like a credential")
	})
	w.eventually("chat.delete tried", 10*time.Second, func() (bool, string) { return len(w.srv.Calls("chat.delete")) == 1, "" })
	if strings.Contains(w.logs.String(), tok) {
		t.Error("the pasted token appears in the log")
	}
}

// TestChannelMentionAndNonApproverTap: a mention arrives as message and
// app_mention: one card, in a thread under the mention. A member who may
// not approve gets an ephemeral refusal only; the owner's tap runs it.
func TestChannelMentionAndNonApproverTap(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	w.start(nil)
	// Channel chatter without a mention is not for Silas.
	w.srv.Send(slacktest.Msg{Channel: ops, User: sam, Text: "run echo nope"})
	ts := w.srv.Send(slacktest.Msg{Channel: ops, User: owner, Text: "<@" + slacktest.BotUser + "> run echo grp"})
	card := w.waitMessage(ops, "card in the thread", hasButton("Run `echo grp`"))
	if card.Thread != ts {
		t.Errorf("card thread = %q; want under the mention %q", card.Thread, ts)
	}
	w.srv.Tap(card, mia, "Run `echo grp`")
	w.eventually("ephemeral refusal", 15*time.Second, func() (bool, string) {
		for _, e := range w.srv.Ephemerals() {
			if e.User == mia && strings.Contains(e.Text, "may not decide") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", w.srv.Ephemerals())
	})
	w.eventually("outbox idle", 10*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM outbox WHERE status = 'pending'`)
		return n == 0, fmt.Sprintf("%d pending", n)
	})
	if msgs := w.srv.Messages(ops); len(msgs) != 1 {
		t.Errorf("the channel got more than the card:%s", dump(msgs))
	}
	if n := w.count(`SELECT count(*) FROM executions`); n != 0 {
		t.Fatalf("executions = %d after a refused tap", n)
	}
	w.srv.Tap(card, owner, "Run `echo grp`")
	w.waitEdit(ops, card.TS, "owner's approval runs it", done)
	if n := w.count(`SELECT count(*) FROM turns WHERE event_id LIKE 'm:C0OPS:%'`); n != 1 {
		t.Errorf("mention stored as %d turns; want 1", n)
	}
	// A reply in the thread needs no mention.
	w.srv.Send(slacktest.Msg{Channel: ops, User: owner, Text: "whoami", Thread: ts})
	w.waitMessage(ops, "reply in the thread", func(m slacktest.Message) bool {
		return m.Thread == ts && strings.Contains(m.Text, "owner trust")
	})
	// Slash command.
	w.srv.Command(ops, owner, "whoami")
	w.waitMessage(ops, "slash command answer", func(m slacktest.Message) bool { return m.Thread == "" && strings.Contains(m.Text, "owner trust") })
	// Another workspace gets nothing.
	w.srv.Send(slacktest.Msg{Channel: dmOf(sam), User: sam, Text: "whoami", Team: "T0OTHER"})
	w.eventually("foreign event acknowledged", 10*time.Second, func() (bool, string) { return w.srv.Pending() == 0, "" })
	if n := w.count(`SELECT count(*) FROM turns WHERE sender = 'slack:U0SAM'`); n != 0 {
		t.Errorf("foreign workspace event stored")
	}
}

// TestHTTPModeSignatures: HTTP mode refuses a bad signature, a stale
// timestamp and missing headers with exactly 401, storing nothing; signed
// pushes are stored once, retries (X-Slack-Retry-Num) are 200 and no-ops.
func TestHTTPModeSignatures(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{http: true})
	w.start(nil)
	body := []byte(`{"type":"event_callback","team_id":"T0TEST","event_id":"Ev1","event":{"type":"message","user":"U0OLIVE","text":"whoami","ts":"1700000001.000001","channel":"D0OLIVE","channel_type":"im"}}`)
	now := time.Now().Unix()
	post := func(path string, h map[string]string, b []byte) int {
		req, _ := http.NewRequest(http.MethodPost, w.hs.URL+path, bytes.NewReader(b))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ts := strconv.FormatInt(now, 10)
	old := strconv.FormatInt(now-6*60, 10)
	// Wait until the adapter learned its workspace.
	w.eventually("ready", 10*time.Second, func() (bool, string) {
		b := []byte(`{"type":"url_verification","challenge":"abc"}`)
		return post(slack.PathEvents, map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": slacktest.Sign(secret, now, b)}, b) == 200, ""
	})
	tests := []struct {
		name string
		path string
		h    map[string]string
	}{
		{"bad signature", slack.PathEvents, map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": slacktest.Sign("wrongsecretwrongsecret", now, body)}},
		{"stale timestamp", slack.PathEvents, map[string]string{"X-Slack-Request-Timestamp": old, "X-Slack-Signature": slacktest.Sign(secret, now-6*60, body)}},
		{"missing signature", slack.PathEvents, map[string]string{"X-Slack-Request-Timestamp": ts}},
		{"missing timestamp", slack.PathInteractions, map[string]string{"X-Slack-Signature": slacktest.Sign(secret, now, body)}},
		{"no headers", slack.PathCommands, nil},
	}
	for _, tc := range tests {
		if code := post(tc.path, tc.h, body); code != http.StatusUnauthorized {
			t.Errorf("%s: status %d; want 401", tc.name, code)
		}
	}
	// A body too large to verify is refused the same way.
	big := append([]byte(`{"type":"event_callback","x":"`), bytes.Repeat([]byte("a"), 2<<20)...)
	big = append(big, `"}`...)
	if code := post(slack.PathEvents, map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": slacktest.Sign(secret, now, big)}, big); code != http.StatusUnauthorized {
		t.Errorf("body over 1 MiB: status %d; want 401", code)
	}
	if n := w.count(`SELECT count(*) FROM turns`); n != 0 {
		t.Fatalf("%d turns stored from refused requests", n)
	}
	good := map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": slacktest.Sign(secret, now, body)}
	if code := post(slack.PathEvents, good, body); code != 200 {
		t.Fatalf("signed event: %d", code)
	}
	good["X-Slack-Retry-Num"] = "1"
	if code := post(slack.PathEvents, good, body); code != 200 {
		t.Fatalf("retried event: %d", code)
	}
	w.waitMessage(dmOf(owner), "answer", func(m slacktest.Message) bool { return strings.Contains(m.Text, "owner trust") })
	if n := w.count(`SELECT count(*) FROM turns`); n != 1 {
		t.Errorf("turns = %d; want 1 (the retry is a duplicate)", n)
	}

	// The full flow over HTTP: run → card → tap → result.
	w.srv.Send(slacktest.Msg{Channel: dmOf(owner), User: owner, Text: "run echo web"})
	w.srv.Push()
	card := w.waitMessage(dmOf(owner), "card", hasButton("Run `echo web`"))
	w.srv.Tap(card, owner, "Run `echo web`")
	w.srv.Push()
	w.waitEdit(dmOf(owner), card.TS, "result", done)
	w.srv.Command(dmOf(owner), owner, "whoami")
	if codes := w.srv.Push(); len(codes) != 1 || codes[0] != 200 {
		t.Errorf("slash command push: %v", codes)
	}
}

// TestSocketModeDropRefreshHalfOpen: during a burst the fake drops the
// socket, asks for a refresh and goes half-open. Every event is processed
// exactly once, never more than one connection is open, and the fake's
// limits are kept.
func TestSocketModeDropRefreshHalfOpen(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	w.start(nil)
	users := []string{owner, sam, mia}
	const perUser = 8
	w.eventually("connected", 10*time.Second, func() (bool, string) { return w.sl.LiveConnections() == 1, "" })
	faults := map[int]func(){4: w.srv.DropSocket, 10: w.srv.Refresh, 16: w.srv.HalfOpen}
	n, opens := 0, 1
	for i := range perUser {
		for _, u := range users {
			w.srv.Send(slacktest.Msg{Channel: dmOf(u), User: u, Text: fmt.Sprintf("whoami %d", i)})
			n++
			if f := faults[n]; f != nil {
				// The previous fault's replacement is the live socket (not
				// the old one on its way out), so each fault hits a fresh one.
				w.eventually("a fresh live socket", 20*time.Second, func() (bool, string) {
					return w.srv.Live() == 1 && w.srv.Opens() >= opens, fmt.Sprintf("%d live, %d opened", w.srv.Live(), w.srv.Opens())
				})
				f()
				opens++
			}
			time.Sleep(30 * time.Millisecond)
		}
	}
	total := perUser * len(users)
	w.eventually("every event stored and acknowledged", 30*time.Second, func() (bool, string) {
		if w.srv.Pending() > 0 {
			w.srv.Redeliver()
		}
		n := w.count(`SELECT count(*) FROM turns WHERE channel = 'slack'`)
		return n == total && w.srv.Pending() == 0, fmt.Sprintf("%d of %d turns, %d pending", n, total, w.srv.Pending())
	})
	w.eventually("every reply delivered", 60*time.Second, func() (bool, string) {
		got := 0
		for _, u := range users {
			got += len(w.srv.Messages(dmOf(u)))
		}
		return got == total, fmt.Sprintf("%d of %d replies", got, total)
	})
	if n := w.count(`SELECT count(DISTINCT event_id) FROM turns WHERE channel = 'slack' AND status = 'done'`); n != total {
		t.Errorf("distinct done turns = %d; want %d", n, total)
	}
	if m := w.srv.MaxLive(); m > 1 {
		t.Errorf("%d Socket Mode connections open at once", m)
	}
	if o := w.srv.Opens(); o < 4 {
		t.Errorf("%d connections opened; the drop, refresh and half-open should each need a new one", o)
	}
}

// TestRateLimitStorm: Slack answers 429 to everything for a while; every
// reply is delivered, in order, and nothing is sent to a channel before
// Retry-After passed (the fake records that as a violation).
func TestRateLimitStorm(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	w.start(nil)
	w.eventually("connected", 10*time.Second, func() (bool, string) { return w.sl.LiveConnections() == 1, "" })
	w.srv.RateLimit(3*time.Second, 1)
	users := []string{owner, sam}
	const perUser = 5
	for i := range perUser {
		for _, u := range users {
			w.srv.Send(slacktest.Msg{Channel: dmOf(u), User: u, Text: fmt.Sprintf("pending %d", i)})
		}
	}
	for i := range perUser {
		for _, u := range users {
			w.srv.Send(slacktest.Msg{Channel: dmOf(u), User: u, Text: "whoami"})
			_ = i
		}
	}
	w.eventually("every reply delivered", 60*time.Second, func() (bool, string) {
		got := 0
		for _, u := range users {
			got += len(w.srv.Messages(dmOf(u)))
		}
		return got == 2*perUser*len(users), fmt.Sprintf("%d replies", got)
	})
	if len(w.srv.Calls("chat.postMessage")) <= 2*perUser*len(users) {
		t.Errorf("no 429 was met")
	}
	for _, u := range users {
		msgs := w.srv.Messages(dmOf(u))
		for i, m := range msgs[perUser:] {
			if !strings.Contains(m.Text, "with") {
				t.Errorf("user %s: reply %d out of order: %q", u, perUser+i, m.Text)
			}
		}
	}
}

// TestPairingAccessRequest: with dm_policy pairing an unknown person's DM
// makes Silas ask the owner privately (a card posted to the owner's user
// id, which Slack puts in the app's DM); the owner's tap on it is in the
// same conversation and lets the person in.
func TestPairingAccessRequest(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{access: trust.AccessPairing})
	w.start(nil)
	w.srv.Send(slacktest.Msg{Channel: dmOf(sam), User: sam, Text: "whoami"})
	w.waitMessage(dmOf(sam), "request code", func(m slacktest.Message) bool { return strings.Contains(m.Text, "request code") })
	card := w.waitMessage(dmOf(owner), "access card to the owner", hasButton("Allow slack:"+sam))
	w.srv.Tap(card, owner, "Allow slack:"+sam)
	w.waitMessage(dmOf(sam), "allowed", func(m slacktest.Message) bool { return strings.Contains(m.Text, "The owner allowed you") })
	w.srv.Send(slacktest.Msg{Channel: dmOf(sam), User: sam, Text: "whoami"})
	w.waitMessage(dmOf(sam), "answered now", func(m slacktest.Message) bool { return strings.Contains(m.Text, "You are slack:"+sam) })
}

// TestThreadStartedSurvivesRestart: a top-level mention is answered in a
// thread under it; that thread is one the bot started, so a reply there
// needs no mention — after a restart of the gateway too. Chatter in other
// threads still is not for the bot.
func TestThreadStartedSurvivesRestart(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	w.start(nil)
	ts := w.srv.Send(slacktest.Msg{Channel: ops, User: owner, Text: "<@" + slacktest.BotUser + "> whoami"})
	w.waitMessage(ops, "the answer in a thread under the mention", func(m slacktest.Message) bool {
		return m.Thread == ts && strings.Contains(m.Text, "owner trust")
	})
	w.stop()
	w.start(nil)
	other := w.srv.Send(slacktest.Msg{Channel: ops, User: sam, Text: "lunch?"})
	w.srv.Send(slacktest.Msg{Channel: ops, User: sam, Text: "whoami", Thread: other})
	w.srv.Send(slacktest.Msg{Channel: ops, User: sam, Text: "whoami", Thread: ts})
	w.waitMessage(ops, "a reply in the bot's thread answered after the restart", func(m slacktest.Message) bool {
		return m.Thread == ts && strings.Contains(m.Text, "slack:"+sam)
	})
	w.eventually("every event acknowledged", 10*time.Second, func() (bool, string) { return w.srv.Pending() == 0, "" })
	if n := w.count(`SELECT count(*) FROM turns`); n != 2 {
		t.Errorf("%d turns; want 2 (the mention and the reply in its thread)", n)
	}
}

// TestAPIOutage60s: a 60 s outage of Slack's Web API — chat.* answered
// alternately 429 (Retry-After 5 s) and 503 — while people keep writing
// (Socket Mode stays up). Every reply is delivered afterwards, once, in
// order per conversation; nothing reaches Slack during the outage; nothing
// is sent to a channel before a 429's Retry-After or closer than Slack's
// one second per channel (the fake records both as violations). The whole
// deployment runs 40 times faster than real time (see options.speed), so
// the outage and the outbox's production backoff pass in seconds with
// every retry they would see. Nothing here depends on how fast the machine
// is: times are read on the shared clock, and a slow run only sends fewer
// calls into the outage.
func TestAPIOutage60s(t *testing.T) {
	t.Parallel()
	const outage = 60 * time.Second
	w := newWorld(t, options{speed: 40})
	w.start(nil)
	w.eventually("connected", 10*time.Second, func() (bool, string) { return w.sl.LiveConnections() == 1, "" })
	start := w.fast.Now()
	end := w.srv.Outage(outage, 5)
	users := []string{owner, sam, mia}
	want := map[string][]string{}
	say := func(round int) {
		for _, u := range users {
			for i := range 3 {
				cmd := fmt.Sprintf("/o%d%d", round, i)
				w.srv.Send(slacktest.Msg{Channel: dmOf(u), User: u, Text: cmd})
				want[u] = append(want[u], "Unknown command "+cmd+". Try /help.")
			}
		}
	}
	say(1)
	// Halfway through, more arrive.
	for w.fast.Now().Sub(start) < outage/2 {
		time.Sleep(5 * time.Millisecond)
	}
	say(2)
	w.eventually("every reply delivered after the outage", 60*time.Second, func() (bool, string) {
		got := 0
		for _, u := range users {
			got += len(w.srv.Messages(dmOf(u)))
		}
		return got >= 18 && w.count(`SELECT count(*) FROM outbox WHERE status = 'pending'`) == 0, fmt.Sprintf("%d of 18", got)
	})
	last := start
	for _, u := range users {
		var got []string
		for _, m := range w.srv.Messages(dmOf(u)) {
			got = append(got, m.Text)
			if m.PostedAt.Before(end) {
				t.Errorf("%q was posted %s before the outage ended", m.Text, end.Sub(m.PostedAt))
			}
			if m.PostedAt.After(last) {
				last = m.PostedAt
			}
		}
		if strings.Join(got, "|") != strings.Join(want[u], "|") {
			t.Errorf("%s's replies:\n%q\nwant (each once, in order)\n%q", u, got, want[u])
		}
	}
	calls := w.srv.OutageCalls()
	retried := w.count(`SELECT count(*) FROM outbox WHERE attempts >= 2`)
	t.Logf("outage of %s (virtual): %d calls refused, %d of 18 replies retried twice or more, the last delivered %s after the outage began",
		outage, calls, retried, last.Sub(start).Round(time.Second))
	// That the outage was met at all (how many calls it refused depends on
	// how much of its virtual minute a busy machine gives the gateway).
	if calls == 0 || retried == 0 {
		t.Errorf("the outage was not met: %d calls refused, %d replies retried twice or more", calls, retried)
	}
}

// gauge reads a gauge of the gateway's registry (-1 when absent).
func (w *world) gauge(name string) float64 {
	w.t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// TestSharedAppTokenWarned: when Slack's hello counts more connections
// than this process holds (another deployment uses the same app token and
// receives some of the events), the adapter warns and the metrics show it;
// its own connections stay at one.
func TestSharedAppTokenWarned(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{others: 1})
	w.start(nil)
	w.eventually("connected", 10*time.Second, func() (bool, string) {
		return w.gauge("silas_slack_socket_connections") == 1 && w.gauge("silas_slack_reported_connections") == 2,
			fmt.Sprintf("own %v, reported %v", w.gauge("silas_slack_socket_connections"), w.gauge("silas_slack_reported_connections"))
	})
	if !strings.Contains(w.logs.String(), "more than one open Socket Mode connection") {
		t.Error("no warning about another process sharing the app token")
	}
	w.stop()
	if g := w.gauge("silas_slack_socket_connections"); g != 0 {
		t.Errorf("after the stop: %v connections", g)
	}
}
