// Package e2e_test runs Silas end to end over Telegram: the real engine, the
// real Telegram adapter, the fake Bot API (telegramtest) and a real
// PostgreSQL database per test (internal/pgtest). It has no non-test code;
// it is its own package so that it can own a TestMain.
package e2e_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/silas-gateway/silas/adapters/telegram"
	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/audit"
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
	botName    = "silas_test_bot"
	hookSecret = "e2e-webhook-secret_0123456789abcdef"
	publicHook = "https://silas.example.com/hooks/telegram"
)

// People and chats. The owner is configured as telegram:1001.
var (
	owner   = telegramtest.User{ID: 1001, FirstName: "Olive", LastName: "Owner", Username: "olive"}
	sam     = telegramtest.User{ID: 2002, FirstName: "Sam"}
	mia     = telegramtest.User{ID: 3003, FirstName: "Mia", Username: "mia"}
	ops     = telegramtest.Group(-1001234567890, "Ops")
	ownerID = core.IdentityID("telegram:1001")
)

// options shape one world.
type options struct {
	access  trust.AccessPolicy // DM policy of the telegram channel ("" = open)
	webhook bool               // webhook mode instead of polling
	limits  telegram.Limits    // the adapter's outbound limits (zero: Telegram's)
	// speed runs the adapter's limiter and the fake's clock this many
	// times faster than real time (0 or 1: real time), so a minute of
	// Telegram's limits passes in seconds. Both keep the same clock: the
	// limits are kept and checked on it.
	speed float64
	fake  telegramtest.Options
	proxy bool // put a faultProxy between the adapter and the fake
}

// world is one deployment: a fake Bot API, a database, a signing key and a
// sandbox directory that survive restarts of the gateway (node).
type world struct {
	t     testing.TB
	opts  options
	srv   *telegramtest.Server
	proxy *faultProxy
	dsn   string
	db    *store.Store // the test's own connection: fixtures and queries
	key   ed25519.PrivateKey
	sbDir string
	logs  *syncBuffer
	node  *node
	ctx   context.Context
	fast  *fastClock // options.speed
}

// fastClock is a kit.Clock running speed times faster than real time.
type fastClock struct {
	start time.Time
	speed float64
}

func newFastClock(speed float64) *fastClock { return &fastClock{start: time.Now(), speed: speed} }

func (c *fastClock) Now() time.Time {
	return c.start.Add(time.Duration(float64(time.Since(c.start)) * c.speed))
}

func (c *fastClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	time.AfterFunc(time.Duration(float64(d)/c.speed), func() { ch <- c.Now() })
	return ch
}

func newWorld(t testing.TB, o options) *world {
	t.Helper()
	w := &world{t: t, opts: o, logs: &syncBuffer{}, sbDir: t.TempDir(), ctx: context.Background()}
	if o.speed > 1 {
		w.fast = newFastClock(o.speed)
		o.fake.Now = w.fast.Now
	}
	w.srv = telegramtest.NewServer(t, o.fake)
	if o.proxy {
		w.proxy = newFaultProxy(t, w.srv.URL)
	}
	w.dsn = storetest.NewDatabase(t)
	db, err := store.Open(w.ctx, w.dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.db = db
	_, w.key, _ = ed25519.GenerateKey(rand.Reader)
	t.Cleanup(func() {
		if w.node != nil {
			w.node.stop()
		}
		if !t.Failed() {
			if _, err := w.db.VerifyAudit(w.ctx); err != nil {
				t.Errorf("audit chain: %v", err)
			}
		}
		w.db.Close()
		logs := w.logs.String()
		if strings.Contains(logs, w.srv.Token) {
			t.Errorf("the bot token appears in the log")
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

// node is one gateway process: store, engine and Telegram adapter, wired
// the way cmd/silas serve wires them.
type node struct {
	w        *world
	st       *store.Store
	eng      *gateway.Gateway
	tg       *telegram.Adapter
	reg      *prometheus.Registry
	hs       *httptest.Server
	stopTG   context.CancelFunc
	stopEng  context.CancelFunc
	tgDone   chan struct{}
	engDone  chan struct{}
	stopOnce sync.Once
}

// start runs a gateway; grace is the engine's shutdown grace period.
func (w *world) start(grace time.Duration) *node {
	t := w.t
	t.Helper()
	if w.node != nil {
		t.Fatal("a node is already running")
	}
	ctx := w.ctx
	st, err := store.Open(ctx, w.dsn, store.Options{MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: w.sbDir})
	if err == nil {
		t.Cleanup(func() { sb.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	base := w.srv.URL
	if w.proxy != nil {
		base = w.proxy.URL
	}
	cfg := telegram.Config{
		Token: w.srv.Token, BaseURL: base, BotUsername: botName, State: st, Logger: log,
		PollTimeout: 2 * time.Second, HTTPTimeout: 10 * time.Second, Limits: w.opts.limits,
	}
	if w.fast != nil {
		cfg.LimitClock = w.fast
	}
	if w.opts.webhook {
		cfg.Mode, cfg.WebhookURL, cfg.WebhookSecret = telegram.ModeWebhook, publicHook, hookSecret
	}
	tg, err := telegram.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var access map[core.ChannelName]trust.AccessPolicy
	if w.opts.access != "" {
		access = map[core.ChannelName]trust.AccessPolicy{tg.Name(): w.opts.access}
	}
	reg := prometheus.NewRegistry()
	eng, err := gateway.New(gateway.Config{
		Store: st, Channels: []core.Channel{tg}, Agent: agent.Command{}, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}}, Policy: pol, Key: w.key,
		Owners: []core.IdentityID{ownerID}, Access: access, OutboxMaxBackoff: 2 * time.Second,
		Registry: reg, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{w: w, st: st, eng: eng, tg: tg, reg: reg, tgDone: make(chan struct{}), engDone: make(chan struct{})}
	engCtx, stopEng := context.WithCancel(ctx)
	n.stopEng = stopEng
	go func() {
		defer close(n.engDone)
		if err := eng.Run(engCtx, grace); err != nil {
			t.Errorf("engine.Run: %v", err)
		}
	}()
	select {
	case <-eng.Ready():
	case <-n.engDone:
		t.Fatal("engine stopped before it was ready")
	case <-time.After(30 * time.Second):
		t.Fatal("engine not ready after 30s")
	}
	if w.opts.webhook {
		mux := http.NewServeMux()
		mux.Handle(tg.WebhookPath(), tg)
		n.hs = httptest.NewServer(mux)
	}
	tgCtx, stopTG := context.WithCancel(ctx)
	n.stopTG = stopTG
	go func() {
		defer close(n.tgDone)
		if err := tg.Run(tgCtx, eng); err != nil {
			t.Errorf("telegram.Run: %v", err)
		}
	}()
	w.node = n
	if w.opts.webhook {
		// The adapter registers the public URL; point the fake at this
		// node's server instead (the public URL is not reachable).
		w.eventually("setWebhook", 10*time.Second, func() (bool, string) {
			return w.srv.Webhook().URL == publicHook, fmt.Sprintf("%+v", w.srv.Webhook())
		})
		w.srv.SetWebhook(telegramtest.WebhookInfo{URL: n.hs.URL + tg.WebhookPath(), Secret: w.srv.Webhook().Secret})
	}
	return n
}

// stop shuts the node down like serve does: intake first, then the engine
// (with its grace period), then the database connection.
func (n *node) stop() {
	n.stopOnce.Do(func() {
		n.stopTG()
		waitClosed(n.w.t, "telegram.Run", n.tgDone)
		n.stopEng()
		waitClosed(n.w.t, "engine.Run", n.engDone)
		if n.hs != nil {
			n.hs.Close()
		}
		n.st.Close()
		if n.w.node == n {
			n.w.node = nil
		}
	})
}

// kill ends adapter and engine at the same instant (a crash as far as the
// gateway can simulate one in-process; start the node with a tiny grace).
func (n *node) kill() {
	n.stopOnce.Do(func() {
		n.stopTG()
		n.stopEng()
		waitClosed(n.w.t, "telegram.Run", n.tgDone)
		waitClosed(n.w.t, "engine.Run", n.engDone)
		if n.hs != nil {
			n.hs.Close()
		}
		n.st.Close()
		if n.w.node == n {
			n.w.node = nil
		}
	})
}

func waitClosed(t testing.TB, what string, c chan struct{}) {
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not return within 30s of cancel", what)
	}
}

// counter reads a counter of the node's engine metrics.
func (n *node) counter(name string) float64 {
	mfs, err := n.reg.Gather()
	if err != nil {
		n.w.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
		return sum
	}
	return 0
}

// eventually polls cond until it holds or d passes; detail explains the
// last failed check.
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

// count runs a count(*) query on the test's own connection.
func (w *world) count(q string, args ...any) int {
	w.t.Helper()
	var n int
	if err := w.db.Pool().QueryRow(w.ctx, q, args...).Scan(&n); err != nil {
		w.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// say queues a message from a user in a chat.
func (w *world) say(chat telegramtest.Chat, from telegramtest.User, text string) int64 {
	return w.srv.SendMessage(telegramtest.Msg{Chat: chat, From: from, Text: text})
}

// push delivers queued updates to the webhook (webhook worlds).
func (w *world) push() {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	if _, err := w.srv.PushWebhook(ctx); err != nil {
		w.t.Fatalf("PushWebhook: %v", err)
	}
}

// waitMessage waits for a bot message in chat that satisfies pred.
func (w *world) waitMessage(chat int64, what string, pred func(telegramtest.Message) bool) telegramtest.Message {
	w.t.Helper()
	var got telegramtest.Message
	w.eventually(what, 30*time.Second, func() (bool, string) {
		msgs := w.srv.Messages(chat)
		for _, m := range msgs {
			if pred(m) {
				got = m
				return true, ""
			}
		}
		return false, dumpMessages(msgs)
	})
	return got
}

// waitEdit waits until message id in chat satisfies pred.
func (w *world) waitEdit(chat int64, id int, what string, pred func(telegramtest.Message) bool) telegramtest.Message {
	w.t.Helper()
	var got telegramtest.Message
	w.eventually(what, 30*time.Second, func() (bool, string) {
		m, ok := w.srv.Message(chat, id)
		if ok && pred(m) {
			got = m
			return true, ""
		}
		return false, dumpMessages([]telegramtest.Message{m})
	})
	return got
}

// waitAnswer waits for the answerCallbackQuery of query q.
func (w *world) waitAnswer(q string) telegramtest.Answer {
	w.t.Helper()
	var got telegramtest.Answer
	w.eventually("answerCallbackQuery "+q, 30*time.Second, func() (bool, string) {
		for _, a := range w.srv.Answers() {
			if a.QueryID == q {
				got = a
				return true, ""
			}
		}
		return false, fmt.Sprintf("answers: %+v", w.srv.Answers())
	})
	return got
}

func texts(msgs []telegramtest.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Text
	}
	return out
}

func dumpMessages(msgs []telegramtest.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "\n  #%d edits=%d keyboard=%v: %q", m.ID, m.Edits, m.Keyboard, m.Text)
	}
	if b.Len() == 0 {
		return "(no messages)"
	}
	return b.String()
}

// isCard reports an open card whose first button reads label.
func isCard(label string) func(telegramtest.Message) bool {
	return func(m telegramtest.Message) bool {
		return len(m.Keyboard) > 0 && len(m.Keyboard[0]) > 0 && m.Keyboard[0][0].Text == label
	}
}

// checkKeyboard checks the buttons of a card: one per row, first and last
// labels as given, callback data of Silas's shape within Telegram's 64 bytes.
func checkKeyboard(t *testing.T, m telegramtest.Message, first, last string) {
	t.Helper()
	kb := m.Keyboard
	if len(kb) < 2 || kb[0][0].Text != first || kb[len(kb)-1][0].Text != last {
		t.Fatalf("keyboard = %+v; want %q first and %q last", kb, first, last)
	}
	for _, row := range kb {
		if len(row) != 1 {
			t.Errorf("row %+v: want one button per row", row)
		}
		for _, b := range row {
			if d := b.CallbackData; d == "" || len(d) > 64 || !strings.HasPrefix(d, "c:") {
				t.Errorf("button %q: callback_data %q (%d bytes)", b.Text, d, len(d))
			}
		}
	}
}

// button returns the callback data of the button labelled label.
func button(t *testing.T, m telegramtest.Message, label string) string {
	t.Helper()
	for _, row := range m.Keyboard {
		for _, b := range row {
			if b.Text == label {
				return b.CallbackData
			}
		}
	}
	t.Fatalf("no button %q on message %d: %+v", label, m.ID, m.Keyboard)
	return ""
}

// syncBuffer collects log output from concurrent goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ---- fault proxy ------------------------------------------------------------

// faultProxy sits between the adapter and the fake Bot API. In phase
// "storm" it answers sendMessage and editMessageText with 429 and
// retry_after; in phase "outage" it answers every method with 5xx (a proxy's
// HTML page or a JSON 500); otherwise it forwards. It records every request.
type faultProxy struct {
	URL string
	rp  *httputil.ReverseProxy

	mu         sync.Mutex
	phase      string
	retryAfter int
	n          int
	log        []proxied
}

type proxied struct {
	method string
	chat   int64
	at     time.Time
	status int
}

func newFaultProxy(t testing.TB, target string) *faultProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{rp: httputil.NewSingleHostReverseProxy(u)}
	p.rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	hs := httptest.NewServer(p)
	t.Cleanup(hs.Close)
	p.URL = hs.URL
	return p
}

func (p *faultProxy) setPhase(phase string, retryAfter int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase, p.retryAfter = phase, retryAfter
}

func (p *faultProxy) records() []proxied {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	method := strings.ToLower(path.Base(r.URL.Path))
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	rec := proxied{method: method, chat: chatOf(r.Header.Get("Content-Type"), body), at: time.Now()}
	p.mu.Lock()
	phase, ra := p.phase, p.retryAfter
	p.n++
	n := p.n
	p.mu.Unlock()
	switch {
	case phase == "storm" && (method == "sendmessage" || method == "editmessagetext"):
		rec.status = http.StatusTooManyRequests
		writeJSON(w, 429, map[string]any{"ok": false, "error_code": 429, "description": fmt.Sprintf("Too Many Requests: retry after %d", ra),
			"parameters": map[string]any{"retry_after": ra}})
	case phase == "outage" && n%2 == 0:
		rec.status = http.StatusBadGateway
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>\n")
	case phase == "outage":
		rec.status = http.StatusInternalServerError
		writeJSON(w, 500, map[string]any{"ok": false, "error_code": 500, "description": "Internal Server Error"})
	default:
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		p.rp.ServeHTTP(sw, r)
		rec.status = sw.code
	}
	p.mu.Lock()
	p.log = append(p.log, rec)
	p.mu.Unlock()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// chatOf reads chat_id from a multipart (SDK) or JSON request body.
func chatOf(contentType string, body []byte) int64 {
	mt, params, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "multipart/form-data":
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for {
			part, err := mr.NextPart()
			if err != nil {
				return 0
			}
			if part.FormName() == "chat_id" {
				v, _ := io.ReadAll(part)
				id, _ := strconv.ParseInt(string(v), 10, 64)
				return id
			}
		}
	case "application/json":
		var m struct {
			ChatID int64 `json:"chat_id"`
		}
		_ = json.Unmarshal(body, &m)
		return m.ChatID
	}
	return 0
}

// ---- rate-limit analysis ----------------------------------------------------

// limitBreaches checks when the fake accepted messages (SentAt of messages
// never edited) against Telegram's limits, strictly: the adapter's limiter
// measures from the end of earlier requests, so the arrival times at the
// fake must keep the limits with no slack at all (eps absorbs clock
// granularity only).
func limitBreaches(sent map[int64][]time.Time, perChat time.Duration, groupPerMinute, globalPerSecond int) []string {
	const eps = 5 * time.Millisecond
	var out []string
	var all []time.Time
	for chat, ts := range sent {
		ts = slices.Clone(ts)
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		all = append(all, ts...)
		for i := 1; i < len(ts); i++ {
			if gap := ts[i].Sub(ts[i-1]); gap < perChat-eps {
				out = append(out, fmt.Sprintf("chat %d: messages %d and %d only %s apart", chat, i-1, i, gap))
			}
		}
		if chat < 0 {
			for i := groupPerMinute; i < len(ts); i++ {
				if span := ts[i].Sub(ts[i-groupPerMinute]); span < time.Minute-eps {
					out = append(out, fmt.Sprintf("group %d: %d messages within %s", chat, groupPerMinute+1, span))
				}
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Before(all[j]) })
	for i := globalPerSecond; i < len(all); i++ {
		if span := all[i].Sub(all[i-globalPerSecond]); span < time.Second-eps {
			out = append(out, fmt.Sprintf("%d messages within %s overall", globalPerSecond+1, span))
		}
	}
	return out
}

// sentTimes collects SentAt of the bot's messages in chats.
func (w *world) sentTimes(chats []int64) map[int64][]time.Time {
	out := map[int64][]time.Time{}
	for _, c := range chats {
		for _, m := range w.srv.Messages(c) {
			if m.Edits != 0 {
				w.t.Fatalf("message %d in chat %d was edited; sentTimes needs send-only chats", m.ID, c)
			}
			out[c] = append(out[c], m.SentAt)
		}
	}
	return out
}

// ---- tests ------------------------------------------------------------------

// TestStormAndOutage: a 429 storm and then a 5xx outage of the whole Bot
// API (getUpdates included), long enough for several failed polls and
// sends with backoff and for messages to arrive meanwhile, while replies
// are queued for 64 chats; after recovery every reply arrives exactly once,
// in order per chat, and Telegram saw no more than its limits. Alongside, a
// second deployment without faults sends at Telegram's limits (a group
// past 20 messages a minute, 60 chats at once) to show the limits hold at
// capacity; its limiter and the fake share a clock running ten times
// faster than real time, so its minute passes in six seconds.
func TestStormAndOutage(t *testing.T) {
	t.Parallel()
	const outage = 6 * time.Second

	// ---- world A: faults ----
	a := newWorld(t, options{proxy: true})
	// ---- world B: capacity ----
	b := newWorld(t, options{speed: 10})
	a.start(5 * time.Second)
	b.start(5 * time.Second)

	type expect struct {
		chat  int64
		texts []string
	}
	reply := func(cmd string) string { return "Unknown command " + cmd + ". Try /help." }
	var wantA, wantB []expect
	busy := []telegramtest.User{owner, sam, mia}

	a.proxy.setPhase("storm", 2)
	stormAt := time.Now()
	burstB := b.fast.Now()
	// B: a group burst of 25 and 60 chats at once.
	gB := telegramtest.Group(-1009999, "Capacity")
	eB := expect{chat: gB.ID}
	for i := 1; i <= 25; i++ {
		cmd := fmt.Sprintf("/g%02d", i)
		b.say(gB, busy[i%len(busy)], cmd+"@"+botName)
		eB.texts = append(eB.texts, reply(cmd))
	}
	wantB = append(wantB, eB)
	for i := 0; i < 60; i++ {
		u := telegramtest.User{ID: int64(20000 + i), FirstName: fmt.Sprintf("F%d", i)}
		cmd := fmt.Sprintf("/f%d", i)
		b.say(telegramtest.Private(u), u, cmd)
		wantB = append(wantB, expect{chat: u.ID, texts: []string{reply(cmd)}})
	}
	// A: three busy DMs, a group and 60 single-message chats.
	for _, u := range busy {
		e := expect{chat: u.ID}
		for i := 1; i <= 10; i++ {
			cmd := fmt.Sprintf("/u%dm%02d", u.ID, i)
			a.say(telegramtest.Private(u), u, cmd)
			e.texts = append(e.texts, reply(cmd))
		}
		wantA = append(wantA, e)
	}
	eG := expect{chat: ops.ID}
	for i := 1; i <= 10; i++ {
		cmd := fmt.Sprintf("/g%02d", i)
		a.say(ops, busy[i%len(busy)], cmd+"@"+botName)
		eG.texts = append(eG.texts, reply(cmd))
	}
	wantA = append(wantA, eG)
	for i := 0; i < 60; i++ {
		u := telegramtest.User{ID: int64(10000 + i), FirstName: fmt.Sprintf("F%d", i)}
		cmd := fmt.Sprintf("/f%d", i)
		a.say(telegramtest.Private(u), u, cmd)
		wantA = append(wantA, expect{chat: u.ID, texts: []string{reply(cmd)}})
	}
	a.eventually("storm: all turns processed", 60*time.Second, func() (bool, string) {
		n := a.count(`SELECT count(*) FROM turns WHERE status = 'done'`)
		return n == 100, fmt.Sprintf("%d turns done", n)
	})
	a.eventually("storm: 429s answered", 20*time.Second, func() (bool, string) {
		return time.Since(stormAt) >= 5*time.Second, ""
	})

	a.proxy.setPhase("outage", 0)
	outageAt := time.Now()
	t.Logf("429 storm for %s, now a %s outage", outageAt.Sub(stormAt).Round(time.Millisecond), outage)
	time.Sleep(outage / 3)
	// Two more messages arrive while Telegram is down.
	for i := 11; i <= 12; i++ {
		cmd := fmt.Sprintf("/u%dm%02d", owner.ID, i)
		a.say(telegramtest.Private(owner), owner, cmd)
		wantA[0].texts = append(wantA[0].texts, reply(cmd))
	}
	time.Sleep(outage - time.Since(outageAt))
	a.proxy.setPhase("", 0)
	recoveredAt := time.Now()
	if got := len(a.srv.Calls("sendMessage")); got != 0 {
		t.Fatalf("%d sendMessage requests got through the storm and outage", got)
	}

	// check waits for every reply and returns when the last one was sent.
	check := func(w *world, name string, want []expect, deadline time.Duration) time.Time {
		t.Helper()
		total := 0
		for _, e := range want {
			total += len(e.texts)
		}
		w.eventually(name+": every reply delivered", deadline, func() (bool, string) {
			got := 0
			for _, e := range want {
				got += len(w.srv.Messages(e.chat))
			}
			return got >= total, fmt.Sprintf("%d of %d", got, total)
		})
		var chats []int64
		for _, e := range want {
			chats = append(chats, e.chat)
			if got := texts(w.srv.Messages(e.chat)); !slices.Equal(got, e.texts) {
				t.Errorf("%s: chat %d got, in order:\n%q\nwant:\n%q", name, e.chat, got, e.texts)
			}
		}
		if v := w.srv.Violations(); len(v) > 0 {
			t.Errorf("%s: the fake saw %d rate-limit violations: %q", name, len(v), v)
		}
		if br := limitBreaches(w.sentTimes(chats), time.Second, 20, 30); len(br) > 0 {
			t.Errorf("%s: limits breached: %q", name, br)
		}
		w.eventually(name+": outbox drained", 10*time.Second, func() (bool, string) {
			n := w.count(`SELECT count(*) FROM outbox WHERE status = 'pending'`)
			return n == 0, fmt.Sprintf("%d pending", n)
		})
		if got := w.count(`SELECT count(*) FROM outbox WHERE status <> 'delivered'`); got != 0 {
			t.Errorf("%s: %d outbox jobs not delivered", name, got)
		}
		if got := w.count(`SELECT count(*) FROM outbox`); got != total {
			t.Errorf("%s: %d outbox jobs; want %d", name, got, total)
		}
		var last time.Time
		for _, ts := range w.sentTimes(chats) {
			for _, at := range ts {
				if at.After(last) {
					last = at
				}
			}
		}
		return last
	}
	lastA := check(a, "faults", wantA, 60*time.Second)
	t.Logf("faults: all 102 replies delivered; the last %s after recovery", lastA.Sub(recoveredAt).Round(time.Millisecond))
	lastB := check(b, "capacity", wantB, 30*time.Second)
	t.Logf("capacity: all 85 replies delivered; the last %s (on its clock) after the burst", lastB.Sub(burstB).Round(time.Millisecond))

	// B really ran at the limits: the group's 21st message waited for the
	// minute, and the 60 single replies went out at no more than 30/s.
	g := b.srv.Messages(gB.ID)
	if span := g[20].SentAt.Sub(g[0].SentAt); span < time.Minute {
		t.Errorf("capacity: the group's 21st message came %s after the 1st", span)
	}

	// A: every 429 was honoured (no request to that chat before retry_after
	// passed), and the outage really hit getUpdates and sendMessage.
	recs := a.proxy.records()
	var storm429, outage5xx, outagePolls int
	last429 := map[int64]time.Time{}
	for _, r := range recs {
		if r.method != "sendmessage" && r.method != "editmessagetext" {
			if r.method == "getupdates" && r.status >= 500 {
				outagePolls++
			}
			continue
		}
		if until, ok := last429[r.chat]; ok && r.at.Before(until) {
			t.Errorf("chat %d: request at %s, before retry_after ended at %s", r.chat, r.at.Format("15:04:05.000"), until.Format("15:04:05.000"))
		}
		switch {
		case r.status == 429:
			storm429++
			last429[r.chat] = r.at.Add(2 * time.Second)
		case r.status >= 500:
			outage5xx++
		}
	}
	for _, r := range recs {
		if r.method == "getupdates" && r.status == 200 && r.at.After(recoveredAt) {
			t.Logf("faults: first getUpdates after recovery at +%s", r.at.Sub(recoveredAt).Round(time.Millisecond))
			break
		}
	}
	var gs []string
	for _, m := range a.srv.Messages(ops.ID) {
		gs = append(gs, m.SentAt.Sub(recoveredAt).Round(100*time.Millisecond).String())
	}
	t.Logf("faults: group replies sent at %v after recovery", gs)
	var gatt []string
	for _, r := range recs {
		if r.chat == ops.ID && r.at.After(outageAt.Add(-10*time.Second)) {
			gatt = append(gatt, fmt.Sprintf("%s:%d", r.at.Sub(recoveredAt).Round(100*time.Millisecond), r.status))
		}
	}
	t.Logf("faults: group requests (time after recovery:status) %v", gatt)
	for _, u := range busy {
		m := a.srv.Messages(u.ID)
		t.Logf("faults: chat %d: first reply +%s, last +%s after recovery", u.ID, m[0].SentAt.Sub(recoveredAt).Round(time.Millisecond), m[len(m)-1].SentAt.Sub(recoveredAt).Round(time.Millisecond))
	}
	t.Logf("faults: %d answered 429, %d sends answered 5xx, %d getUpdates answered 5xx, %d requests in all", storm429, outage5xx, outagePolls, len(recs))
	if storm429 == 0 || outage5xx == 0 || outagePolls == 0 {
		t.Errorf("the faults were not exercised: 429=%d send5xx=%d poll5xx=%d", storm429, outage5xx, outagePolls)
	}
}

// TestApprovalCardEditedInPlace: the owner's /run in a DM becomes an inline
// keyboard card; a tap runs a low-risk command and the same message is
// edited to the result with its buttons removed; a medium-risk command asks
// for confirmation on the same message first. Every tap is answered.
func TestApprovalCardEditedInPlace(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	w.start(5 * time.Second)
	dm := telegramtest.Private(owner)

	// Low risk: one tap runs it.
	w.say(dm, owner, "/run echo hi")
	card := w.waitMessage(dm.ID, "approval card for echo hi", isCard("Run `echo hi`"))
	checkKeyboard(t, card, "Run `echo hi`", "Decline")
	if card.ParseMode != "HTML" || !strings.Contains(card.Text, "echo hi") || !strings.Contains(card.Text, "Risk: low") {
		t.Fatalf("card = %+v", card)
	}
	_, q1 := w.srv.Tap(dm, owner, card.ID, button(t, card, "Run `echo hi`"))
	done := w.waitEdit(dm.ID, card.ID, "card edited to the result", func(m telegramtest.Message) bool {
		return strings.Contains(m.Text, "exit code 0 ✓")
	})
	if len(done.Keyboard) != 0 {
		t.Errorf("finished card still has buttons: %+v", done.Keyboard)
	}
	if !strings.Contains(done.HTML, "<pre>hi\n</pre>") || !strings.Contains(done.Text, "✅ Done") {
		t.Errorf("finished card does not show the output:\n%s", done.HTML)
	}
	if a := w.waitAnswer(q1); a.Text != "Approved: running it now." {
		t.Errorf("toast for approve = %q", a.Text)
	}

	// Medium risk: approve → Confirm on the same message → result.
	w.say(dm, owner, "/run touch x")
	card2 := w.waitMessage(dm.ID, "approval card for touch x", isCard("Review: Run `touch x`"))
	checkKeyboard(t, card2, "Review: Run `touch x`", "Decline")
	if !strings.Contains(card2.Text, "Risk: medium") {
		t.Errorf("card = %q", card2.Text)
	}
	_, q2 := w.srv.Tap(dm, owner, card2.ID, button(t, card2, "Review: Run `touch x`"))
	conf := w.waitEdit(dm.ID, card2.ID, "confirm button", isCard("Confirm: Run `touch x`"))
	checkKeyboard(t, conf, "Confirm: Run `touch x`", "Decline")
	if !strings.Contains(conf.Text, "confirm to run it") {
		t.Errorf("confirming card = %q", conf.Text)
	}
	if a := w.waitAnswer(q2); !strings.Contains(a.Text, "tap Confirm") {
		t.Errorf("toast for approve (medium) = %q", a.Text)
	}
	if n := w.count(`SELECT count(*) FROM executions WHERE approval_id = (SELECT id FROM approvals WHERE intent = 'Run touch x')`); n != 0 {
		t.Fatal("medium-risk command ran before confirmation")
	}
	_, q3 := w.srv.Tap(dm, owner, conf.ID, button(t, conf, "Confirm: Run `touch x`"))
	done2 := w.waitEdit(dm.ID, card2.ID, "confirmed card edited to the result", func(m telegramtest.Message) bool {
		return strings.Contains(m.Text, "exit code 0 ✓")
	})
	if len(done2.Keyboard) != 0 {
		t.Errorf("finished card still has buttons: %+v", done2.Keyboard)
	}
	if a := w.waitAnswer(q3); a.Text != "Approved: running it now." {
		t.Errorf("toast for confirm = %q", a.Text)
	}

	// Two cards, each edited in place: nothing else was posted.
	if msgs := w.srv.Messages(dm.ID); len(msgs) != 2 {
		t.Errorf("chat has %d bot messages; want the 2 cards:%s", len(msgs), dumpMessages(msgs))
	}
	if n := w.count(`SELECT count(*) FROM executions WHERE status = 'verified'`); n != 2 {
		t.Errorf("verified executions = %d; want 2", n)
	}
	if got := len(w.srv.Answers()); got != 3 {
		t.Errorf("%d answerCallbackQuery for 3 taps: %+v", got, w.srv.Answers())
	}
}

// TestReplayedTapRunsOnce: the approve tap's update redelivered (the
// stored polling offset was lost, so Telegram sends it again) and a new
// update with the same callback data execute nothing a second time.
func TestReplayedTapRunsOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	n := w.start(5 * time.Second)
	dm := telegramtest.Private(owner)
	w.say(dm, owner, "/run echo once")
	card := w.waitMessage(dm.ID, "approval card", isCard("Run `echo once`"))
	data := button(t, card, "Run `echo once`")

	// Queue the tap while the gateway is down, so its raw update can be kept.
	n.stop()
	tapID, q1 := w.srv.Tap(dm, owner, card.ID, data)
	raw, ok := w.srv.Update(tapID)
	if !ok {
		t.Fatal("tap update not queued")
	}
	n = w.start(5 * time.Second)
	w.waitEdit(dm.ID, card.ID, "result", func(m telegramtest.Message) bool { return strings.Contains(m.Text, "exit code 0 ✓") })
	w.waitAnswer(q1)
	w.eventually("tap confirmed to Telegram", 10*time.Second, func() (bool, string) {
		return w.srv.Pending() == 0, fmt.Sprintf("%d pending", w.srv.Pending())
	})

	// Crash between Deliver and storing the offset: the offset is older and
	// Telegram has the update again.
	n.stop()
	if _, err := w.db.Pool().Exec(w.ctx, `UPDATE channel_state SET value = $1 WHERE channel = 'telegram' AND key = 'offset'`,
		strconv.FormatInt(tapID-1, 10)); err != nil {
		t.Fatal(err)
	}
	w.srv.AddRawUpdate(tapID, string(raw))
	n = w.start(5 * time.Second)
	w.eventually("redelivered tap seen as a duplicate", 15*time.Second, func() (bool, string) {
		d := n.counter("silas_turns_duplicate_total")
		return d == 1 && w.srv.Pending() == 0, fmt.Sprintf("duplicates=%v pending=%d", d, w.srv.Pending())
	})

	// A new update carrying the same data: refused as already decided.
	_, q2 := w.srv.Tap(dm, owner, card.ID, data)
	if a := w.waitAnswer(q2); !strings.Contains(a.Text, "Already decided (approved)") {
		t.Errorf("toast for the second tap = %q", a.Text)
	}
	w.eventually("second tap's turn done", 10*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM turns WHERE status = 'done'`)
		return n == 3, fmt.Sprintf("%d turns done", n)
	})
	if got := w.count(`SELECT count(*) FROM executions`); got != 1 {
		t.Fatalf("executions = %d; want 1", got)
	}
	if got := w.count(`SELECT count(*) FROM turns WHERE event_id = $1`, fmt.Sprintf("u%d", tapID)); got != 1 {
		t.Fatalf("turns for the replayed update = %d", got)
	}
	final, _ := w.srv.Message(dm.ID, card.ID)
	if !strings.Contains(final.Text, "exit code 0 ✓") || len(final.Keyboard) != 0 {
		t.Errorf("card after replays:%s", dumpMessages([]telegramtest.Message{final}))
	}
	if msgs := w.srv.Messages(dm.ID); len(msgs) != 1 {
		t.Errorf("replays posted messages:%s", dumpMessages(msgs))
	}
}

// TestGroupTapByNonApprover: in a group, a member who may not approve taps
// the owner's card: a toast tells them, and nothing changes — no execution,
// no edit, no chat message.
func TestGroupTapByNonApprover(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	w.start(5 * time.Second)
	w.say(ops, owner, "/run@"+botName+" echo grp")
	card := w.waitMessage(ops.ID, "card in the group", isCard("Run `echo grp`"))
	data := button(t, card, "Run `echo grp`")

	_, q := w.srv.Tap(ops, mia, card.ID, data)
	a := w.waitAnswer(q)
	if !strings.Contains(a.Text, "You (telegram:3003) may not decide this card") {
		t.Fatalf("toast = %q", a.Text)
	}
	w.eventually("refused tap processed", 10*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM turns WHERE status = 'done'`)
		return n == 2, fmt.Sprintf("%d turns done", n)
	})
	// Let the outbox settle (the open card is re-sent unchanged).
	w.eventually("outbox idle", 10*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM outbox WHERE status = 'pending'`)
		return n == 0, fmt.Sprintf("%d pending", n)
	})
	after, _ := w.srv.Message(ops.ID, card.ID)
	if after.HTML != card.HTML || !reflect.DeepEqual(after.Keyboard, card.Keyboard) || after.Edits != 0 {
		t.Errorf("card changed after a refused tap:\nbefore:%s\nafter:%s", dumpMessages([]telegramtest.Message{card}), dumpMessages([]telegramtest.Message{after}))
	}
	if msgs := w.srv.Messages(ops.ID); len(msgs) != 1 {
		t.Errorf("the group got messages about the refusal:%s", dumpMessages(msgs))
	}
	if msgs := w.srv.Messages(mia.ID); len(msgs) != 0 {
		t.Errorf("the member got a DM:%s", dumpMessages(msgs))
	}
	if got := w.count(`SELECT count(*) FROM executions`); got != 0 {
		t.Fatalf("executions = %d after a refused tap", got)
	}
	if got := w.count(`SELECT count(*) FROM approvals WHERE status = 'pending'`); got != 1 {
		t.Fatalf("approval no longer pending")
	}

	// The owner can still decide it from the group.
	_, q2 := w.srv.Tap(ops, owner, card.ID, data)
	w.waitEdit(ops.ID, card.ID, "owner's approval runs it", func(m telegramtest.Message) bool { return strings.Contains(m.Text, "exit code 0 ✓") })
	if a := w.waitAnswer(q2); a.Text != "Approved: running it now." {
		t.Errorf("owner's toast = %q", a.Text)
	}
}

// TestWebhookSecret: in webhook mode a request with a wrong or missing
// secret is refused with 401 and stores nothing; Telegram's own pushes
// (with the secret) are stored, and a redelivered update — a message or
// a tap — is a no-op.
func TestWebhookSecret(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{webhook: true})
	n := w.start(5 * time.Second)
	hook := n.hs.URL + n.tg.WebhookPath()
	post := func(secret string, body []byte) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, hook, bytes.NewReader(body))
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
	dm := telegramtest.Private(owner)
	id := w.say(dm, owner, "/run echo hook")
	body, _ := w.srv.Update(id)
	for name, secret := range map[string]string{
		"missing": "", "wrong": "not-the-secret-0123456789abcdef", "truncated": hookSecret[:len(hookSecret)-1],
		"the bot token": w.srv.Token,
	} {
		if code := post(secret, body); code != http.StatusUnauthorized {
			t.Errorf("%s secret: HTTP %d; want 401", name, code)
		}
	}
	if got := w.count(`SELECT count(*) FROM turns`); got != 0 {
		t.Fatalf("turns = %d after unauthenticated requests; want 0", got)
	}
	if got := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'turn.received'`); got != 0 {
		t.Fatalf("audit has %d turn.received entries after unauthenticated requests", got)
	}

	// Telegram pushes it with the secret: stored and answered.
	w.push()
	if got := w.count(`SELECT count(*) FROM turns`); got != 1 {
		t.Fatalf("turns = %d after the authentic push; want 1", got)
	}
	card := w.waitMessage(dm.ID, "card", isCard("Run `echo hook`"))
	// Our 200 was lost; Telegram delivers the same update again.
	if code := post(hookSecret, body); code != http.StatusOK {
		t.Fatalf("redelivery: HTTP %d", code)
	}
	if got := w.count(`SELECT count(*) FROM turns`); got != 1 {
		t.Fatalf("turns = %d after a redelivery; want 1", got)
	}

	// A forged tap without the secret does nothing.
	data := button(t, card, "Run `echo hook`")
	tapUpd, _ := w.srv.Tap(dm, owner, card.ID, data)
	tapBody, _ := w.srv.Update(tapUpd)
	if code := post("", tapBody); code != http.StatusUnauthorized {
		t.Fatalf("forged tap: HTTP %d; want 401", code)
	}
	if got := w.count(`SELECT count(*) FROM approvals WHERE status = 'pending'`); got != 1 {
		t.Fatal("a forged tap decided the card")
	}
	// The authentic tap (pushed by Telegram), then redelivered.
	w.push()
	w.waitEdit(dm.ID, card.ID, "result", func(m telegramtest.Message) bool { return strings.Contains(m.Text, "exit code 0 ✓") })
	if code := post(hookSecret, tapBody); code != http.StatusOK {
		t.Fatalf("tap redelivery: HTTP %d", code)
	}
	if got := w.count(`SELECT count(*) FROM executions`); got != 1 {
		t.Fatalf("executions = %d; want 1", got)
	}
	if d := n.counter("silas_turns_duplicate_total"); d != 2 {
		t.Errorf("duplicates = %v; want 2 (message and tap redelivered)", d)
	}
}

// TestBurstSurvivesRestarts: a burst of /whoami across a few chats, with
// the gateway killed twice mid-burst and restarted on the same database:
// every update is processed exactly once and answered exactly once. The
// group gets twice Telegram's 20 messages a minute, on a clock running ten
// times faster than real time, so its budget is used up across the
// restarts and must be remembered over them.
func TestBurstSurvivesRestarts(t *testing.T) {
	t.Parallel()
	const perChat, perGroup = 20, 40
	w := newWorld(t, options{speed: 10})
	users := []telegramtest.User{owner, sam, mia, {ID: 4004, FirstName: "Noor"}}
	members := []telegramtest.User{owner, sam, mia, {ID: 5005, FirstName: "Ola"}}
	type chatPlan struct {
		chat telegramtest.Chat
		want map[string]int // reply text → count
	}
	var plans []chatPlan
	type msg struct {
		chat telegramtest.Chat
		from telegramtest.User
		text string
	}
	var burst []msg
	for _, u := range users {
		p := chatPlan{chat: telegramtest.Private(u), want: map[string]int{}}
		trust := "external"
		if u.ID == owner.ID {
			trust = "owner"
		}
		p.want[fmt.Sprintf("You are telegram:%d with %s trust.", u.ID, trust)] = perChat
		plans = append(plans, p)
	}
	group := chatPlan{chat: ops, want: map[string]int{}}
	for i := 0; i < perGroup; i++ {
		m := members[i%len(members)]
		trust := "external"
		if m.ID == owner.ID {
			trust = "owner"
		}
		group.want[fmt.Sprintf("You are telegram:%d with %s trust.", m.ID, trust)]++
	}
	plans = append(plans, group)
	for i := 0; i < perChat; i++ {
		for _, u := range users {
			burst = append(burst, msg{telegramtest.Private(u), u, "/whoami"})
		}
		for j := i * perGroup / perChat; j < (i+1)*perGroup/perChat; j++ {
			burst = append(burst, msg{ops, members[j%len(members)], "/whoami@" + botName})
		}
	}
	total := len(burst)

	n := w.start(time.Millisecond)
	var injected sync.WaitGroup
	var mu sync.Mutex
	sent := 0
	injected.Add(1)
	go func() {
		defer injected.Done()
		for _, m := range burst {
			w.say(m.chat, m.from, m.text)
			mu.Lock()
			sent++
			mu.Unlock()
			time.Sleep(25 * time.Millisecond)
		}
	}()
	for round, at := range []int{30, 65} {
		w.eventually(fmt.Sprintf("%d turns stored", at), 30*time.Second, func() (bool, string) {
			c := w.count(`SELECT count(*) FROM turns`)
			return c >= at, fmt.Sprintf("%d turns", c)
		})
		n.kill()
		mu.Lock()
		t.Logf("kill %d: %d of %d updates queued, %d turns stored, %d sendMessage calls so far", round+1, sent, total,
			w.count(`SELECT count(*) FROM turns`), len(w.srv.Calls("sendMessage")))
		mu.Unlock()
		time.Sleep(200 * time.Millisecond)
		n = w.start(time.Millisecond)
	}
	injected.Wait()

	w.eventually("every update answered", 90*time.Second, func() (bool, string) {
		got := 0
		for _, p := range plans {
			got += len(w.srv.Messages(p.chat.ID))
		}
		return got >= total && w.srv.Pending() == 0, fmt.Sprintf("%d of %d replies, %d updates unconfirmed", got, total, w.srv.Pending())
	})
	// Every update is confirmed (none comes again), every turn handled and
	// every outbox job done: nothing can send a late duplicate after this,
	// so the counts below are final without waiting to see.
	w.eventually("every turn handled and every reply sent", 90*time.Second, func() (bool, string) {
		turns := w.count(`SELECT count(*) FROM turns WHERE status = 'pending'`)
		jobs := w.count(`SELECT count(*) FROM outbox WHERE status = 'pending'`)
		return turns == 0 && jobs == 0, fmt.Sprintf("%d turns and %d outbox jobs pending", turns, jobs)
	})
	for _, p := range plans {
		got := map[string]int{}
		for _, m := range w.srv.Messages(p.chat.ID) {
			got[m.Text]++
		}
		if !maps.Equal(got, p.want) {
			t.Errorf("chat %d: replies %v; want %v", p.chat.ID, got, p.want)
		}
	}
	if got := w.count(`SELECT count(*) FROM turns`); got != total {
		t.Errorf("turns = %d; want %d", got, total)
	}
	if got := w.count(`SELECT count(DISTINCT event_id) FROM turns`); got != total {
		t.Errorf("distinct event ids = %d; want %d", got, total)
	}
	if got := w.count(`SELECT count(*) FROM turns WHERE status = 'done'`); got != total {
		t.Errorf("turns done = %d; want %d", got, total)
	}
	if got := w.count(`SELECT count(*) FROM outbox WHERE status = 'delivered'`); got != total {
		t.Errorf("outbox delivered = %d; want %d", got, total)
	}
	// A restarted limiter waits a chat's interval from its start, so the
	// per-chat and global limits hold across restarts; a group's sends of
	// the last minute are stored and seed the restarted limiter, so the
	// per-group limit holds too.
	for _, v := range w.srv.Violations() {
		t.Errorf("rate limit exceeded across restarts: %s", v)
	}
}

// TestPairing: under dm_policy pairing an unknown sender gets a request
// code and the owner gets an Allow card in their DM; Allow lets them in.
// A `silas pair` code bound to telegram gives owner trust through /pair.
func TestPairing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{access: trust.AccessPairing})
	w.start(5 * time.Second)
	samDM := telegramtest.Private(sam)
	ownerDM := telegramtest.Private(owner)

	w.say(samDM, sam, "hello?")
	req := w.waitMessage(sam.ID, "request code", func(m telegramtest.Message) bool {
		return strings.Contains(m.Text, "your request code is")
	})
	code := strings.TrimSuffix(req.Text[strings.LastIndex(req.Text, " ")+1:], ".")
	// The button names the sender by platform id, not by a name they chose.
	card := w.waitMessage(owner.ID, "owner's Allow card", isCard("Allow telegram:2002"))
	checkKeyboard(t, card, "Allow telegram:2002", "Deny")
	if !strings.Contains(card.Text, "Allow Sam (telegram:2002) to talk to Silas?") || !strings.Contains(card.Text, code) {
		t.Fatalf("card = %q (request code %s)", card.Text, code)
	}
	_, q := w.srv.Tap(ownerDM, owner, card.ID, button(t, card, "Allow telegram:2002"))
	if a := w.waitAnswer(q); a.Text != "Allowed." {
		t.Errorf("toast = %q", a.Text)
	}
	w.waitMessage(sam.ID, "welcome", func(m telegramtest.Message) bool { return strings.Contains(m.Text, "you can talk to Silas now") })
	decided := w.waitEdit(owner.ID, card.ID, "card decided", func(m telegramtest.Message) bool {
		return strings.Contains(m.Text, "Allowed by telegram:1001")
	})
	if len(decided.Keyboard) != 0 {
		t.Errorf("decided card keeps its buttons: %+v", decided.Keyboard)
	}
	w.say(samDM, sam, "/whoami")
	w.waitMessage(sam.ID, "auth trust", func(m telegramtest.Message) bool {
		return m.Text == "You are telegram:2002 with auth trust."
	})

	// A code from `silas pair` for telegram; one for another platform is refused.
	insert := func(code, platform string) {
		err := w.db.Do(w.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			tx.QueuePairingCode(trust.HashPairingCode(code), "owner", platform, time.Now().Add(10*time.Minute))
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	insert("ABCDE-23456", "telegram")
	insert("WEBCH-23456", "webchat")
	miaDM := telegramtest.Private(mia)
	w.say(miaDM, mia, "/pair WEBCH-23456")
	w.waitMessage(mia.ID, "other platform's code refused", func(m telegramtest.Message) bool {
		return strings.Contains(m.Text, "unknown, used or expired")
	})
	w.say(miaDM, mia, "/pair abcde-23456")
	w.waitMessage(mia.ID, "paired", func(m telegramtest.Message) bool {
		return m.Text == "Paired: telegram:3003 now has owner trust."
	})
	w.say(miaDM, mia, "/whoami")
	w.waitMessage(mia.ID, "owner trust", func(m telegramtest.Message) bool {
		return m.Text == "You are telegram:3003 with owner trust."
	})
	// /pair is the only thing Mia's turns did before pairing: no access request.
	if got := w.count(`SELECT count(*) FROM access_requests WHERE identity = 'telegram:3003'`); got != 0 {
		t.Errorf("access requests for a /pair sender = %d", got)
	}
	if msgs := w.srv.Messages(owner.ID); len(msgs) != 1 {
		t.Errorf("owner's DM:%s", dumpMessages(msgs))
	}
}

// TestGroupMentionGating: in a group only messages that address the bot
// reach the engine and get a reply.
func TestGroupMentionGating(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	w.start(5 * time.Second)
	w.say(ops, mia, "hello everyone")
	w.say(ops, mia, "/whoami@other_bot")
	w.say(ops, mia, "what does /whoami do?")
	w.say(ops, mia, "/whoami@"+botName)
	w.waitMessage(ops.ID, "reply to /whoami@bot", func(m telegramtest.Message) bool {
		return m.Text == "You are telegram:3003 with external trust."
	})
	w.say(ops, owner, "@"+botName+" /whoami")
	w.waitMessage(ops.ID, "reply to a mention", func(m telegramtest.Message) bool {
		return m.Text == "You are telegram:1001 with owner trust."
	})
	if got := w.count(`SELECT count(*) FROM turns`); got != 2 {
		t.Errorf("turns = %d; want only the 2 addressed messages", got)
	}
	w.eventually("updates confirmed", 10*time.Second, func() (bool, string) { return w.srv.Pending() == 0, "" })
	if msgs := w.srv.Messages(ops.ID); len(msgs) != 2 {
		t.Errorf("group replies:%s", dumpMessages(msgs))
	}
}

// TestFormattingInjection: markup in a command, its output and a sender's
// name is shown literally — escaped in what is sent, never parsed as tags.
func TestFormattingInjection(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{access: trust.AccessPairing})
	w.start(5 * time.Second)
	dm := telegramtest.Private(owner)
	const payload = `<b>x</b> <a href="http://e">y</a> &amp;`
	const escaped = `&lt;b&gt;x&lt;/b&gt; &lt;a href="http://e"&gt;y&lt;/a&gt; &amp;amp;`
	w.say(dm, owner, `/run echo '`+payload+`'`)
	label := "Run `echo '" + payload + "'`"
	card := w.waitMessage(dm.ID, "card", isCard(label))
	if !strings.Contains(card.Text, "echo '"+payload+"'") || !strings.Contains(card.HTML, escaped) {
		t.Errorf("card does not show the command literally:\nHTML: %s\ntext: %s", card.HTML, card.Text)
	}
	_, q := w.srv.Tap(dm, owner, card.ID, button(t, card, label))
	w.waitAnswer(q)
	done := w.waitEdit(dm.ID, card.ID, "result", func(m telegramtest.Message) bool { return strings.Contains(m.Text, "exit code 0 ✓") })
	if !strings.Contains(done.Text, payload+"\n") || !strings.Contains(done.HTML, "<pre>"+escaped+"\n</pre>") {
		t.Errorf("output not shown literally:\nHTML: %s", done.HTML)
	}

	// A stranger whose name is markup asks to talk: the owner's card shows it.
	eve := telegramtest.User{ID: 6006, FirstName: "<i>Eve</i>", LastName: "& <a href=\"tg://x\">co</a>"}
	w.say(telegramtest.Private(eve), eve, "hi")
	name := `<i>Eve</i> & <a href="tg://x">co</a>`
	ask := w.waitMessage(owner.ID, "access card", isCard("Allow telegram:6006"))
	if !strings.Contains(ask.Text, "Allow "+name+" (telegram:6006) to talk to Silas?") {
		t.Errorf("access card: %q", ask.Text)
	}

	// Everything the bot sent parses to our own tags only, with no raw
	// markup from user input.
	for _, method := range []string{"sendMessage", "editMessageText"} {
		for _, c := range w.srv.Calls(method) {
			text := c.Params["text"]
			_, tags, err := telegramtest.ParseHTML(text)
			if err != nil {
				t.Errorf("%s text does not parse: %v\n%s", method, err, text)
			}
			for _, tag := range tags {
				if tag.Name == "a" || tag.Href != "" {
					t.Errorf("%s sent a link tag %+v:\n%s", method, tag, text)
				}
			}
			for _, raw := range []string{"<b>x</b>", `<a href=`, "<i>Eve</i>", "& <a"} {
				if strings.Contains(text, raw) {
					t.Errorf("%s text contains raw %q:\n%s", method, raw, text)
				}
			}
		}
	}
}
