package webchat

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// fakeInbox records turns and answers like the engine: duplicates by
// EventID. onDeliver, when set, runs inside Deliver (before it returns),
// as the engine's outbox may.
type fakeInbox struct {
	mu        sync.Mutex
	turns     []core.Turn
	seen      map[string]bool
	err       error
	onDeliver func(core.Turn)
}

func (f *fakeInbox) Deliver(_ context.Context, t core.Turn) (core.DeliverResult, error) {
	f.mu.Lock()
	if f.err != nil {
		err := f.err
		f.mu.Unlock()
		return core.DeliverResult{}, err
	}
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	dup := f.seen[t.EventID]
	f.seen[t.EventID] = true
	if !dup {
		f.turns = append(f.turns, t)
	}
	n := int64(len(f.turns))
	hook := f.onDeliver
	f.mu.Unlock()
	if hook != nil && !dup {
		hook(t)
	}
	return core.DeliverResult{Seq: n, Duplicate: dup}, nil
}

func (f *fakeInbox) recorded() []core.Turn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]core.Turn(nil), f.turns...)
}

type fakeOutputs map[string]string

func (o fakeOutputs) GetOutput(_ context.Context, ref string) (string, error) {
	s, ok := o[ref]
	if !ok {
		return "", core.ErrNotFound
	}
	return s, nil
}

// scopedOutputs stores outputs per conversation.
type scopedOutputs map[core.ConversationID]fakeOutputs

func (o scopedOutputs) GetOutput(context.Context, string) (string, error) {
	return "", errors.New("GetOutput used although GetConversationOutput exists")
}

func (o scopedOutputs) GetConversationOutput(ctx context.Context, conv core.ConversationID, ref string) (string, error) {
	return o[conv].GetOutput(ctx, ref)
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

type fixture struct {
	a     *Adapter
	srv   *httptest.Server
	inbox *fakeInbox
	clock *clock
	stop  func() // ends Run, as the gateway does on shutdown
}

// newFixture starts an adapter (running, with a fake inbox) behind an
// httptest server.
func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	clk := &clock{t: time.Now()}
	if cfg.Now == nil {
		cfg.Now = clk.now
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in := &fakeInbox{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx, in); close(done) }()
	srv := httptest.NewServer(a)
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(func() {
		stop()
		srv.Close()
	})
	for i := 0; ; i++ {
		a.mu.Lock()
		ready := a.inbox != nil
		a.mu.Unlock()
		if ready {
			break
		}
		if i > 1000 {
			t.Fatal("adapter did not start")
		}
		time.Sleep(time.Millisecond)
	}
	return &fixture{a: a, srv: srv, inbox: in, clock: clk, stop: stop}
}

func (f *fixture) do(t *testing.T, method, path string, hdr http.Header, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func jsonHdr() http.Header { return http.Header{"Content-Type": {"application/json"}} }

// login exchanges a fresh secret for a session cookie.
func (f *fixture) login(t *testing.T) string {
	t.Helper()
	secret := f.a.NewLoginSecret(time.Minute)
	resp := f.do(t, "POST", "/login", jsonHdr(), `{"secret":"`+secret+`"}`)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("login = %d", resp.StatusCode)
	}
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			return c.Value
		}
	}
	t.Fatal("login set no session cookie")
	return ""
}

func cookieHdr(token string) http.Header {
	return http.Header{"Cookie": {cookieName + "=" + token}}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLogin(t *testing.T) {
	t.Parallel()
	// Many attempts from one address; the rate limit has its own test.
	f := newFixture(t, Config{LoginLimit: RateLimit{Burst: 100, Every: time.Second}})
	good := f.a.NewLoginSecret(time.Minute)
	expired := f.a.NewLoginSecret(-time.Second)
	tests := []struct {
		name   string
		method string
		hdr    http.Header
		body   string
		want   int
	}{
		{"GET", "GET", nil, "", http.StatusMethodNotAllowed},
		{"no content type", "POST", nil, `{"secret":"` + good + `"}`, http.StatusUnsupportedMediaType},
		{"form", "POST", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, `secret=` + good, http.StatusUnsupportedMediaType},
		{"text/plain", "POST", http.Header{"Content-Type": {"text/plain"}}, `{"secret":"` + good + `"}`, http.StatusUnsupportedMediaType},
		{"json lookalike type", "POST", http.Header{"Content-Type": {"application/jsonp"}}, `{"secret":"` + good + `"}`, http.StatusUnsupportedMediaType},
		{"foreign origin", "POST", http.Header{"Content-Type": {"application/json"}, "Origin": {"http://evil.example"}}, `{"secret":"` + good + `"}`, http.StatusForbidden},
		{"malformed json", "POST", jsonHdr(), `{"secret":`, http.StatusBadRequest},
		{"empty secret", "POST", jsonHdr(), `{"secret":""}`, http.StatusBadRequest},
		{"huge body", "POST", jsonHdr(), `{"secret":"` + strings.Repeat("a", 10000) + `"}`, http.StatusBadRequest},
		{"wrong secret", "POST", jsonHdr(), `{"secret":"nope"}`, http.StatusUnauthorized},
		{"expired secret", "POST", jsonHdr(), `{"secret":"` + expired + `"}`, http.StatusUnauthorized},
		{"good secret", "POST", http.Header{"Content-Type": {"application/json; charset=utf-8"}, "Origin": {"ORIGIN"}}, `{"secret":"` + good + `"}`, http.StatusNoContent},
		{"same secret again", "POST", jsonHdr(), `{"secret":"` + good + `"}`, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if o := tt.hdr.Get("Origin"); o == "ORIGIN" {
				tt.hdr.Set("Origin", f.srv.URL)
			}
			resp := f.do(t, tt.method, "/login", tt.hdr, tt.body)
			if resp.StatusCode != tt.want {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.want, readBody(t, resp))
			}
			if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control = %q", cc)
			}
			if tt.want != http.StatusNoContent {
				var body struct{ Error string }
				if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error == "" {
					t.Errorf("error body: %v %+v", err, body)
				}
				if len(resp.Cookies()) != 0 {
					t.Errorf("a refused login set cookies")
				}
				return
			}
			cookies := resp.Cookies()
			if len(cookies) != 1 {
				t.Fatalf("cookies = %v", cookies)
			}
			c := cookies[0]
			if c.Name != cookieName || c.Value == "" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure {
				t.Errorf("cookie = %+v", c)
			}
			if sc := resp.Header.Get("Set-Cookie"); !strings.Contains(sc, "HttpOnly") || !strings.Contains(sc, "SameSite=Strict") {
				t.Errorf("Set-Cookie = %q", sc)
			}
		})
	}
}

func TestSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{SessionTTL: time.Hour})
	token := f.login(t)
	tests := []struct {
		name   string
		method string
		hdr    http.Header
		want   int
	}{
		{"no cookie", "GET", nil, http.StatusUnauthorized},
		{"empty cookie", "GET", cookieHdr(""), http.StatusUnauthorized},
		{"forged cookie", "GET", cookieHdr("forged"), http.StatusUnauthorized},
		{"valid", "GET", cookieHdr(token), http.StatusOK},
		{"POST", "POST", cookieHdr(token), http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := f.do(t, tt.method, "/session", tt.hdr, "")
			body := readBody(t, resp)
			if resp.StatusCode != tt.want {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control = %q", cc)
			}
			var v map[string]string
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if tt.want == http.StatusOK && v["identity"] != "webchat:local" {
				t.Errorf("identity = %q", v["identity"])
			}
			if tt.want == http.StatusUnauthorized && v["error"] == "" {
				t.Errorf("401 without an error message")
			}
		})
	}
	t.Run("expired", func(t *testing.T) {
		f.clock.add(2 * time.Hour)
		if resp := f.do(t, "GET", "/session", cookieHdr(token), ""); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("expired session: status %d", resp.StatusCode)
		}
	})
}

func TestOutputs(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("r", 128)
	hostile := "<script>alert(1)</script><img src=x onerror=alert(1)>"
	f := newFixture(t, Config{Outputs: fakeOutputs{"out-1": hostile, long: "long ref", long + "x": "too long"}})
	token := f.login(t)
	tests := []struct {
		name string
		path string
		hdr  http.Header
		want int
		body string
	}{
		{"no cookie", "/outputs/out-1", nil, http.StatusUnauthorized, ""},
		{"forged cookie", "/outputs/out-1", cookieHdr("forged"), http.StatusUnauthorized, ""},
		{"ok", "/outputs/out-1", cookieHdr(token), http.StatusOK, hostile},
		{"128 characters", "/outputs/" + long, cookieHdr(token), http.StatusOK, "long ref"},
		{"129 characters", "/outputs/" + long + "x", cookieHdr(token), http.StatusNotFound, ""},
		{"unknown", "/outputs/out-2", cookieHdr(token), http.StatusNotFound, ""},
		{"empty", "/outputs/", cookieHdr(token), http.StatusNotFound, ""},
		{"dot", "/outputs/out.1", cookieHdr(token), http.StatusNotFound, ""},
		{"escaped slash", "/outputs/..%2Fsession", cookieHdr(token), http.StatusNotFound, ""},
		{"subpath", "/outputs/out-1/x", cookieHdr(token), http.StatusNotFound, ""},
		{"space", "/outputs/out%201", cookieHdr(token), http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := f.do(t, "GET", tt.path, tt.hdr, "")
			body := readBody(t, resp)
			if resp.StatusCode != tt.want {
				t.Fatalf("status = %d, want %d: %s", resp.StatusCode, tt.want, body)
			}
			h := resp.Header
			if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Content-Security-Policy") != "default-src 'none'; sandbox" || h.Get("Cache-Control") != "no-store" {
				t.Errorf("headers = %v", h)
			}
			if tt.want != http.StatusOK {
				return
			}
			if ct := h.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type = %q", ct)
			}
			if body != tt.body {
				t.Errorf("body = %q, want %q", body, tt.body)
			}
		})
	}

	t.Run("scoped to the conversation", func(t *testing.T) {
		f := newFixture(t, Config{Outputs: scopedOutputs{
			"webchat:local": {"mine": "my output"},
			"telegram:42":   {"theirs": "not yours"},
		}})
		token := f.login(t)
		if resp := f.do(t, "GET", "/outputs/mine", cookieHdr(token), ""); resp.StatusCode != 200 || readBody(t, resp) != "my output" {
			t.Errorf("own output: %d", resp.StatusCode)
		}
		if resp := f.do(t, "GET", "/outputs/theirs", cookieHdr(token), ""); resp.StatusCode != http.StatusNotFound {
			t.Errorf("other conversation's output: %d", resp.StatusCode)
		}
	})
	t.Run("no output source", func(t *testing.T) {
		f := newFixture(t, Config{})
		if resp := f.do(t, "GET", "/outputs/out-1", cookieHdr(f.login(t)), ""); resp.StatusCode != http.StatusNotFound {
			t.Errorf("status = %d", resp.StatusCode)
		}
	})
}

func TestSecurityHeadersAndRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	tests := []struct {
		method, path string
		want         int
		ctype        string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8"},
		{"HEAD", "/", 200, "text/html; charset=utf-8"},
		{"GET", "/static/app.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/static/app.css", 200, "text/css; charset=utf-8"},
		{"GET", "/static/nope.js", 404, ""},
		{"GET", "/favicon.ico", 404, ""},
		{"GET", "/admin", 404, ""},
		{"POST", "/admin", 404, ""},
		{"POST", "/", 405, ""},
		{"GET", "/session", 401, "application/json"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			resp := f.do(t, tt.method, tt.path, nil, "")
			if resp.StatusCode != tt.want {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.want)
			}
			h := resp.Header
			csp := h.Get("Content-Security-Policy")
			for _, d := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "img-src 'self' data:", "frame-ancestors 'none'"} {
				if !strings.Contains(csp, d) {
					t.Errorf("CSP %q lacks %q", csp, d)
				}
			}
			if strings.Contains(csp, "unsafe") {
				t.Errorf("CSP allows unsafe sources: %q", csp)
			}
			if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
				t.Errorf("headers = %v", h)
			}
			if tt.ctype != "" && h.Get("Content-Type") != tt.ctype {
				t.Errorf("Content-Type = %q, want %q", h.Get("Content-Type"), tt.ctype)
			}
		})
	}
	// The page is the embedded index.html.
	resp := f.do(t, "GET", "/", nil, "")
	if body := readBody(t, resp); !strings.Contains(body, `src="/static/app.js"`) {
		t.Errorf("index does not load app.js:\n%s", body)
	}
}

// ---- WebSocket ----

type wsClient struct {
	t      *testing.T
	conn   *websocket.Conn
	frames chan map[string]any
	closed chan error
}

func (f *fixture) wsURL() string { return "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/ws" }

func (f *fixture) dial(t *testing.T, token string) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, f.wsURL(), &websocket.DialOptions{
		HTTPHeader: http.Header{"Cookie": {cookieName + "=" + token}, "Origin": {f.srv.URL}},
	})
	if err != nil {
		t.Fatalf("dial: %v %v", err, resp)
	}
	conn.SetReadLimit(4 << 20) // larger than the protocol's, to catch oversized server frames
	c := &wsClient{t: t, conn: conn, frames: make(chan map[string]any, 4096), closed: make(chan error, 1)}
	go func() {
		for {
			_, b, err := conn.Read(context.Background())
			if err != nil {
				c.closed <- err
				close(c.frames)
				return
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Errorf("server sent a frame that is not a JSON object: %q", b)
			}
			if len(b) > MaxFrameBytes {
				t.Errorf("server frame of %d bytes exceeds %d", len(b), MaxFrameBytes)
			}
			c.frames <- m
		}
	}()
	t.Cleanup(func() { conn.CloseNow() })
	return c
}

func (c *wsClient) next() map[string]any {
	c.t.Helper()
	select {
	case f, ok := <-c.frames:
		if !ok {
			c.t.Fatalf("connection closed: %v", <-c.closed)
		}
		return f
	case <-time.After(5 * time.Second):
		c.t.Fatal("no frame within 5s")
	}
	return nil
}

func (c *wsClient) write(s string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// closeStatus waits for the server to close the connection.
func (c *wsClient) closeStatus() websocket.StatusCode {
	c.t.Helper()
	for {
		select {
		case _, ok := <-c.frames:
			if !ok {
				return websocket.CloseStatus(<-c.closed)
			}
		case <-time.After(15 * time.Second):
			c.t.Fatal("connection not closed within 15s")
		}
	}
}

func want(t *testing.T, f map[string]any, kv ...any) {
	t.Helper()
	for i := 0; i < len(kv); i += 2 {
		if f[kv[i].(string)] != kv[i+1] {
			t.Fatalf("frame %v: %s = %v, want %v", f, kv[i], f[kv[i].(string)], kv[i+1])
		}
	}
}

func TestWebSocketAuth(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	token := f.login(t)
	tests := []struct {
		name string
		hdr  http.Header
		want int
	}{
		{"no cookie", http.Header{"Origin": {f.srv.URL}}, http.StatusUnauthorized},
		{"forged cookie", http.Header{"Origin": {f.srv.URL}, "Cookie": {cookieName + "=forged"}}, http.StatusUnauthorized},
		{"foreign origin", http.Header{"Origin": {"http://evil.example"}, "Cookie": {cookieName + "=" + token}}, http.StatusForbidden},
		{"null origin", http.Header{"Origin": {"null"}, "Cookie": {cookieName + "=" + token}}, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			conn, resp, err := websocket.Dial(ctx, f.wsURL(), &websocket.DialOptions{HTTPHeader: tt.hdr})
			if err == nil {
				conn.CloseNow()
				t.Fatal("dial succeeded")
			}
			if resp == nil || resp.StatusCode != tt.want {
				t.Fatalf("dial: %v, response %v; want status %d", err, resp, tt.want)
			}
		})
	}
	t.Run("ok", func(t *testing.T) {
		c := f.dial(t, token)
		want(t, c.next(), "type", "hello", "identity", "webchat:local", "conversation", "webchat:local")
	})
}

func approvalCard(id string, status cards.Status) *cards.Card {
	c := &cards.Card{ID: cards.ID(id), Kind: cards.KindApproval, Intent: "Run a shell command", Risk: cards.RiskLow,
		Rationale: "You asked.", Command: "uname -a", Status: status}
	if status.Open() {
		c.Choices = []cards.Choice{{ID: "approve", Label: "Run", Style: cards.StylePrimary}, {ID: "decline", Label: "Decline", Style: cards.StyleDanger}}
	}
	return c
}

func cardOf(t *testing.T, f map[string]any) *cards.Card {
	t.Helper()
	raw, ok := f["card"]
	if !ok {
		return nil
	}
	b, _ := json.Marshal(raw)
	var c cards.Card
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestSendUpdateBroadcast(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	ctx := context.Background()
	c1, c2 := f.dial(t, f.login(t)), f.dial(t, f.login(t))
	for _, c := range []*wsClient{c1, c2} {
		want(t, c.next(), "type", "hello")
	}
	ref, err := f.a.Send(ctx, core.OutMessage{Conversation: f.a.Conversation(), Text: "I need your approval first.", Card: approvalCard("c1", cards.StatusPending)})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.a.Update(ctx, ref, core.OutMessage{Conversation: f.a.Conversation(), Text: "Done.", Card: &cards.Card{
		ID: "c1", Kind: cards.KindApproval, Intent: "Run a shell command", Risk: cards.RiskLow, Rationale: "You asked.",
		Status: cards.StatusDone, Outcome: "exit code 0 ✓", Output: "Linux", OutputRef: "out-1",
	}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*wsClient{c1, c2} {
		m := c.next()
		want(t, m, "type", "message", "message_id", string(ref), "text", "I need your approval first.")
		if _, ok := m["replay"]; ok {
			t.Errorf("live message marked replay: %v", m)
		}
		if at, _ := m["at"].(string); at == "" {
			t.Errorf("message without at: %v", m)
		} else if _, err := time.Parse(time.RFC3339, at); err != nil {
			t.Errorf("at %q: %v", at, err)
		}
		if cd := cardOf(t, m); cd == nil || cd.Status != cards.StatusPending || len(cd.Choices) != 2 {
			t.Errorf("card = %+v", cd)
		}
		u := c.next()
		want(t, u, "type", "update", "message_id", string(ref), "text", "Done.")
		if cd := cardOf(t, u); cd == nil || cd.Status != cards.StatusDone || cd.OutputRef != "out-1" || cd.Output != "Linux" {
			t.Errorf("updated card = %+v", cd)
		}
	}
	// An invalid card is a permanent error, not a broadcast.
	_, err = f.a.Send(ctx, core.OutMessage{Card: &cards.Card{ID: "bad"}})
	var perm *core.PermanentError
	if !errors.As(err, &perm) {
		t.Fatalf("Send(invalid card) = %v, want a PermanentError", err)
	}
	// An update of a message that left the transcript is still pushed.
	if err := f.a.Update(ctx, "m-unknown", core.OutMessage{Text: "late"}); err != nil {
		t.Fatal(err)
	}
	want(t, c1.next(), "type", "update", "message_id", "m-unknown", "text", "late")
}

func TestReplayOnConnect(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{History: 3})
	ctx := context.Background()
	var refs []core.MessageRef
	for _, text := range []string{"one", "two", "three", "four"} {
		ref, err := f.a.Send(ctx, core.OutMessage{Text: text})
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	// Updates missed while disconnected are in the replay.
	if err := f.a.Update(ctx, refs[2], core.OutMessage{Text: "three, edited", Card: approvalCard("c3", cards.StatusDone)}); err != nil {
		t.Fatal(err)
	}
	c := f.dial(t, f.login(t))
	want(t, c.next(), "type", "hello")
	for i, text := range []string{"two", "three, edited", "four"} { // the oldest fell out of History
		m := c.next()
		want(t, m, "type", "message", "replay", true, "message_id", string(refs[i+1]), "text", text)
	}
	// Then live frames, and nothing else was queued after the replay.
	ref, err := f.a.Send(ctx, core.OutMessage{Text: "live"})
	if err != nil {
		t.Fatal(err)
	}
	m := c.next()
	want(t, m, "type", "message", "message_id", string(ref), "text", "live")
	if _, ok := m["replay"]; ok {
		t.Fatalf("live message marked replay")
	}
}

func TestFramesAndAcks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	// Like the engine's outbox, reply before Deliver has returned: the ack
	// must still reach the browser first.
	f.inbox.onDeliver = func(turn core.Turn) {
		f.a.Send(context.Background(), core.OutMessage{Text: "reply to " + turn.EventID})
	}
	c := f.dial(t, f.login(t))
	want(t, c.next(), "type", "hello")

	c.write(`{"type":"message","id":"m-1","text":"/run uname -a"}`)
	want(t, c.next(), "type", "ack", "id", "m-1", "duplicate", false)
	want(t, c.next(), "type", "message", "text", "reply to m:m-1")

	c.write(`{"type":"tap","id":"t-1","card_id":"c1","choice":"approve"}`)
	want(t, c.next(), "type", "ack", "id", "t-1", "duplicate", false)
	want(t, c.next(), "type", "message", "text", "reply to t:t-1")

	// A reply to one of the bot's messages (the optional reply_to): its
	// message_id is the turn's ReplyTo, the ref Send returned.
	ref, err := f.a.Send(context.Background(), core.OutMessage{Text: "Which day?"})
	if err != nil {
		t.Fatal(err)
	}
	want(t, c.next(), "type", "message", "message_id", string(ref))
	c.write(`{"type":"message","id":"m-r","text":"friday","reply_to":"` + string(ref) + `"}`)
	want(t, c.next(), "type", "ack", "id", "m-r", "duplicate", false)
	want(t, c.next(), "type", "message", "text", "reply to m:m-r")

	// A retry with the same id: duplicate, nothing delivered again.
	c.write(`{"type":"message","id":"m-1","text":"/run uname -a"}`)
	want(t, c.next(), "type", "ack", "id", "m-1", "duplicate", true)

	turns := f.inbox.recorded()
	if len(turns) != 3 {
		t.Fatalf("turns = %+v", turns)
	}
	m, tap := turns[0], turns[1]
	if r := turns[2]; r.Text != "friday" || r.ReplyTo != ref || m.ReplyTo != "" {
		t.Errorf("reply turn = %+v (want ReplyTo %q), message turn ReplyTo %q", r, ref, m.ReplyTo)
	}
	if m.Text != "/run uname -a" || m.Channel != "webchat" || m.Conversation != "webchat:local" || m.Sender != "webchat:local" ||
		!m.Evidence.Authenticated || m.Evidence.Method != "webchat-session" || m.Tap != nil {
		t.Errorf("message turn = %+v", m)
	}
	if tap.Tap == nil || tap.Tap.Card != "c1" || tap.Tap.Choice != "approve" || tap.Text != "" {
		t.Errorf("tap turn = %+v", tap)
	}

	// Protocol errors keep the connection.
	errs := []struct{ in, code, id string }{
		{`{not json`, "bad_frame", ""},
		{`{"type":"message","id":"bad id","text":"x"}`, "bad_frame", ""},
		{`{"type":"message","id":"m-2","text":""}`, "bad_frame", "m-2"},
		{`{"type":"launch","id":"x-1"}`, "unknown_type", "x-1"},
		{`{"type":"message","id":"m-7","text":"x","reply_to":"a b"}`, "bad_frame", "m-7"},
		{`{"type":"tap","id":"t-7","card_id":"c1","choice":"approve","reply_to":"b-1"}`, "bad_frame", "t-7"},
		{`{"type":"message","id":"m-3","text":"` + strings.Repeat("é", MaxTextChars+1) + `"}`, "too_large", "m-3"},
	}
	for _, e := range errs {
		c.write(e.in)
		fr := c.next()
		want(t, fr, "type", "error", "code", e.code)
		if id, _ := fr["id"].(string); id != e.id {
			t.Errorf("%s: error id = %q, want %q", e.in, id, e.id)
		}
		if msg, _ := fr["message"].(string); msg == "" {
			t.Errorf("%s: error without message", e.in)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageBinary, []byte(`{"type":"message","id":"m-4","text":"x"}`)); err != nil {
		t.Fatal(err)
	}
	want(t, c.next(), "type", "error", "code", "bad_frame")

	// The core refusing or failing to store: an error with the frame's id.
	f.inbox.mu.Lock()
	f.inbox.err = &core.RejectedError{Reason: "nope"}
	f.inbox.mu.Unlock()
	c.write(`{"type":"message","id":"m-5","text":"x"}`)
	want(t, c.next(), "type", "error", "id", "m-5", "code", "rejected", "message", "nope")
	f.inbox.mu.Lock()
	f.inbox.err = errors.New("database down")
	f.inbox.mu.Unlock()
	c.write(`{"type":"message","id":"m-6","text":"x"}`)
	want(t, c.next(), "type", "error", "id", "m-6", "code", "internal")
	if len(f.inbox.recorded()) != 3 {
		t.Errorf("refused frames were recorded")
	}
}

func TestReadLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	token := f.login(t)
	frame := func(size int) string {
		head, tail := `{"type":"message","id":"m-1","text":"`, `"}`
		return head + strings.Repeat("a", size-len(head)-len(tail)) + tail
	}
	// Exactly 64 KiB is read (and refused by the text limit, not the socket).
	c := f.dial(t, token)
	want(t, c.next(), "type", "hello")
	c.write(frame(MaxFrameBytes))
	want(t, c.next(), "type", "error", "code", "too_large", "id", "m-1")
	// One byte more closes the connection with 1009.
	c.write(frame(MaxFrameBytes + 1))
	if st := c.closeStatus(); st != websocket.StatusMessageTooBig {
		t.Fatalf("close status = %v, want %v", st, websocket.StatusMessageTooBig)
	}
}

func TestServerFramesFit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	c := f.dial(t, f.login(t))
	want(t, c.next(), "type", "hello")
	// '<' is escaped to 6 bytes by encoding/json: 20,000 of them would make
	// a 120 KB frame.
	big := strings.Repeat("<", 20000)
	done := approvalCard("c1", cards.StatusDone)
	done.Output, done.OutputRef = big, "out-c1"
	ref, err := f.a.Send(context.Background(), core.OutMessage{Text: "Done.", Card: done})
	if err != nil {
		t.Fatal(err)
	}
	cd := cardOf(t, c.next()) // the reader checks the size
	if cd.OutputRef != "out-c1" || !strings.HasSuffix(cd.Output, truncMark) || !strings.HasPrefix(cd.Output, "<<<") || cd.Status != cards.StatusDone {
		t.Errorf("card = %+v", cd)
	}
	if done.Output != big {
		t.Errorf("Send modified the caller's card")
	}
	// The replay fits too, and the update path.
	f.a.Update(context.Background(), ref, core.OutMessage{Text: strings.Repeat("&", 20000)})
	u := c.next()
	if text, _ := u["text"].(string); !strings.HasSuffix(text, truncMark) {
		t.Errorf("update text not truncated: %d bytes", len(text))
	}
	c2 := f.dial(t, f.login(t))
	want(t, c2.next(), "type", "hello")
	want(t, c2.next(), "type", "message", "replay", true)
}

func TestEncodeMessageFrame(t *testing.T) {
	t.Parallel()
	small := messageFrame{Type: "message", MessageID: "m-1", Text: "hi", Card: approvalCard("c1", cards.StatusPending)}
	b, err := encodeMessageFrame(small)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := json.Marshal(small); string(b) != string(want) {
		t.Errorf("a small frame was changed: %s", b)
	}
	huge := approvalCard("c2", cards.StatusPending)
	huge.Command = strings.Repeat("x", 100000)
	huge.Output = strings.Repeat("é\u2028", 30000)
	huge.Details = strings.Repeat("d", 70000)
	f := messageFrame{Type: "update", MessageID: "m-2", Text: strings.Repeat("t", 70000), Card: huge}
	b, err = encodeMessageFrame(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxFrameBytes {
		t.Fatalf("frame is %d bytes", len(b))
	}
	var got messageFrame
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(got.Card.Output) || !utf8.ValidString(got.Text) {
		t.Errorf("cut inside a rune")
	}
	// A command too large to show is never offered for approval.
	if len(got.Card.Choices) != 0 || !strings.HasSuffix(got.Card.Command, truncMark) {
		t.Errorf("oversized command card: %d choices, command of %d bytes", len(got.Card.Choices), len(got.Card.Command))
	}
	if len(huge.Choices) != 2 || len(huge.Command) != 100000 {
		t.Errorf("the caller's card was modified")
	}
}

func TestSlowClientIsDisconnected(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{History: 1})
	f.a.queueSlack = 8
	// A client that never reads: TCP buffers fill, then its queue.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, f.wsURL(), &websocket.DialOptions{
		HTTPHeader: http.Header{"Cookie": {cookieName + "=" + f.login(t)}, "Origin": {f.srv.URL}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	// And a healthy one that keeps receiving.
	good := f.dial(t, f.login(t))
	want(t, good.next(), "type", "hello")

	text := strings.Repeat("x", 60000)
	for i := range 300 {
		// A Send that waited for the slow client would never return: a
		// generous bound tells that apart from a busy machine.
		done := make(chan error, 1)
		go func() {
			sctx, scancel := context.WithTimeout(context.Background(), time.Second)
			defer scancel()
			_, err := f.a.Send(sctx, core.OutMessage{Text: text})
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Send %d: %v", i, err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("Send %d is blocked by the client that does not read", i)
		}
		want(t, good.next(), "type", "message")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		f.a.mu.Lock()
		n := len(f.a.clients)
		f.a.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d clients still registered; the slow one was not disconnected", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSessionEndsWhileConnected(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{SessionTTL: 300 * time.Millisecond, Now: time.Now})
	c := f.dial(t, f.login(t))
	want(t, c.next(), "type", "hello")
	fr := c.next()
	want(t, fr, "type", "error", "code", "unauthorized")
	if _, ok := fr["id"]; ok {
		t.Errorf("unauthorized error carries an id: %v", fr)
	}
	if st := c.closeStatus(); st != websocket.StatusPolicyViolation {
		t.Fatalf("close status = %v, want 1008", st)
	}
}

func TestShutdownClosesSockets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{})
	token := f.login(t)
	c := f.dial(t, token)
	want(t, c.next(), "type", "hello")
	f.stop()
	if st := c.closeStatus(); st != websocket.StatusGoingAway {
		t.Fatalf("close status = %v, want 1001", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, f.wsURL(), &websocket.DialOptions{
		HTTPHeader: http.Header{"Cookie": {cookieName + "=" + token}, "Origin": {f.srv.URL}},
	})
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("dial after shutdown: %v %v", err, resp)
	}
}
