package browsertest_test

// A throwaway fake of the web chat server (docs/webchat-protocol.md) that
// serves the real page from adapters/webchat/static/, so the page can be
// checked against the protocol in a real browser before the Go server
// exists. The real end-to-end test belongs with adapters/webchat.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/browsertest"
)

const (
	fakeSecret  = "test"
	fakeCookie  = "silas_session"
	fakeSession = "fake-session-token"
	fakeCSP     = "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'"
	xssOutput   = "<img src=x onerror=alert(1)>hi"
)

var staticDir = filepath.Join("..", "..", "adapters", "webchat", "static")

var clientIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

type botMsg struct {
	ID   string      `json:"message_id"`
	Text string      `json:"text"`
	Card *cards.Card `json:"card,omitempty"`
	At   string      `json:"at"`
}

type fakeServer struct {
	t *testing.T

	mu        sync.Mutex
	secretOK  bool            // the one-time secret is still unused
	seen      map[string]bool // client frame ids stored (for duplicate acks)
	received  []string        // every client frame id received, repeats included
	dropped   map[string]bool // "/drop" frames already dropped once
	history   []*botMsg
	nextID    int
	conns     int
	badFrames []string
}

func newFakeServer(t *testing.T) (*fakeServer, *httptest.Server) {
	f := &fakeServer{t: t, secretOK: true, seen: map[string]bool{}, dropped: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join(staticDir, "index.html"))
	})
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServer(http.Dir(staticDir))))
	mux.HandleFunc("POST /login", f.login)
	mux.HandleFunc("GET /session", f.session)
	mux.HandleFunc("GET /ws", f.ws)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", fakeCSP)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return f, srv
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (f *fakeServer) authed(r *http.Request) bool {
	c, err := r.Cookie(fakeCookie)
	return err == nil && c.Value == fakeSession
}

func (f *fakeServer) login(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		writeJSON(w, http.StatusUnsupportedMediaType, map[string]string{"error": "want application/json"})
		return
	}
	var body struct {
		Secret string `json:"secret"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad request"})
		return
	}
	f.mu.Lock()
	ok := f.secretOK && body.Secret == fakeSecret
	if ok {
		f.secretOK = false
	}
	f.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid or already used login secret"})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: fakeCookie, Value: fakeSession, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeServer) session(w http.ResponseWriter, r *http.Request) {
	if !f.authed(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "not signed in"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"identity": "webchat:local"})
}

type clientFrame struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	Text   string `json:"text"`
	CardID string `json:"card_id"`
	Choice string `json:"choice"`
}

func (f *fakeServer) ws(w http.ResponseWriter, r *http.Request) {
	if !f.authed(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "not signed in"})
		return
	}
	c, err := websocket.Accept(w, r, nil) // default: Origin must match Host
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(64 << 10)
	ctx := r.Context()

	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return c.Write(ctx, websocket.MessageText, b)
	}

	f.mu.Lock()
	f.conns++
	replay := make([]map[string]any, 0, len(f.history))
	for _, m := range f.history {
		replay = append(replay, m.frame("message", true))
	}
	f.mu.Unlock()

	if send(map[string]any{"type": "hello", "identity": "webchat:local", "conversation": "webchat:local"}) != nil {
		return
	}
	for _, fr := range replay {
		if send(fr) != nil {
			return
		}
	}

	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			send(map[string]any{"type": "error", "code": "bad_frame", "message": "text frames only"})
			continue
		}
		var fr clientFrame
		if err := json.Unmarshal(data, &fr); err != nil || !clientIDRe.MatchString(fr.ID) {
			f.mu.Lock()
			f.badFrames = append(f.badFrames, string(data))
			f.mu.Unlock()
			send(map[string]any{"type": "error", "code": "bad_frame", "message": "malformed frame"})
			continue
		}

		f.mu.Lock()
		f.received = append(f.received, fr.ID)
		if fr.Type == "message" && fr.Text == "/drop" && !f.dropped[fr.ID] {
			// Simulate a connection lost before the ack: nothing stored.
			f.dropped[fr.ID] = true
			f.mu.Unlock()
			c.CloseNow()
			return
		}
		dup := f.seen[fr.ID]
		f.seen[fr.ID] = true
		f.mu.Unlock()

		var out []map[string]any
		switch fr.Type {
		case "message", "tap":
			out = append(out, map[string]any{"type": "ack", "id": fr.ID, "duplicate": dup})
			if !dup {
				out = append(out, f.handle(fr)...)
			}
		default:
			out = append(out, map[string]any{"type": "error", "id": fr.ID, "code": "unknown_type", "message": "unknown frame type " + fr.Type})
		}
		for _, o := range out {
			if send(o) != nil {
				return
			}
		}
	}
}

func (m *botMsg) frame(typ string, replay bool) map[string]any {
	fr := map[string]any{"type": typ, "message_id": m.ID, "text": m.Text}
	if m.Card != nil {
		c := *m.Card
		fr["card"] = &c
	}
	if typ == "message" {
		fr["at"] = m.At
		if replay {
			fr["replay"] = true
		}
	}
	return fr
}

// handle runs a stored client frame and returns the frames it causes.
func (f *fakeServer) handle(fr clientFrame) []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	newMsg := func(text string, card *cards.Card) map[string]any {
		f.nextID++
		m := &botMsg{ID: fmt.Sprintf("s%d", f.nextID), Text: text, Card: card, At: time.Now().UTC().Format(time.RFC3339)}
		f.history = append(f.history, m)
		return m.frame("message", false)
	}
	switch fr.Type {
	case "message":
		if cmd, ok := strings.CutPrefix(fr.Text, "/run "); ok {
			card := &cards.Card{
				ID:            cards.ID(fmt.Sprintf("c%d", f.nextID+1)),
				Kind:          cards.KindApproval,
				Intent:        "Run a shell command",
				Risk:          cards.RiskLow,
				Rationale:     "You asked to run it.",
				Command:       cmd,
				AffectedItems: []string{"this host"},
				Details:       "Runs as the gateway user.",
				Choices: []cards.Choice{
					{ID: "approve", Label: "Run `" + cmd + "`", Style: cards.StylePrimary},
					{ID: "decline", Label: "Decline", Style: cards.StyleDanger},
				},
				Status:    cards.StatusPending,
				ExpiresAt: time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339),
			}
			if err := card.Validate(); err != nil {
				f.t.Errorf("fake card invalid: %v", err)
			}
			return []map[string]any{newMsg("I need your approval first.", card)}
		}
		if fr.Text == "/cards" {
			return []map[string]any{
				newMsg("", &cards.Card{
					ID: "c-high", Kind: cards.KindApproval, Intent: "Delete old backups", Risk: cards.RiskHigh,
					Rationale: "Disk is 97% full.", Command: "find /srv/backups -mtime +30 -delete && echo $(whoami) " + strings.Repeat("very-long-argument-", 12),
					AffectedItems: []string{"/srv/backups"}, Details: "Removes 41 files, 12 GiB.",
					Choices: []cards.Choice{
						{ID: "approve", Label: "Delete 41 files", Style: cards.StyleDanger},
						{ID: "decline", Label: "Keep them", Style: cards.StyleSecondary},
					},
					Status: cards.StatusPending,
				}),
				newMsg("I need a secret for that.", &cards.Card{
					ID: "c-secure", Kind: cards.KindSecureInput, Intent: "Enter the API key",
					Link: &cards.Link{Label: "Open secure form", URL: "https://example.invalid/form/abc"}, Status: cards.StatusPending,
				}),
				newMsg("", &cards.Card{
					ID: "c-info", Kind: cards.KindInfo, Intent: "Hostile link", Link: &cards.Link{Label: "click", URL: "javascript:alert(1)"},
					Status: cards.StatusPending,
				}),
			}
		}
		return []map[string]any{newMsg("echo: "+fr.Text, nil)}
	case "tap":
		for _, m := range f.history {
			if m.Card == nil || string(m.Card.ID) != fr.CardID || !m.Card.Status.Open() {
				continue
			}
			c := *m.Card
			switch {
			case fr.Choice == "approve" && c.Risk.NeedsConfirm() && c.Status == cards.StatusPending:
				c.Status = cards.StatusConfirming
				c.Choices = []cards.Choice{
					{ID: "confirm", Label: "Yes, delete them", Style: cards.StyleDanger},
					{ID: "decline", Label: "Keep them", Style: cards.StyleSecondary},
				}
				m.Card = &c
				return []map[string]any{m.frame("update", false)}
			case fr.Choice == "confirm" && c.Status == cards.StatusConfirming:
				c.Status, c.Outcome = cards.StatusDone, "exit code 0 ✓"
				c.Output = strings.Repeat("removed /srv/backups/file\n", 200)
			case fr.Choice == "approve":
				c.Status, c.Outcome, c.Output, c.OutputRef = cards.StatusDone, "exit code 0 ✓", xssOutput, "out1"
				m.Text = "Done."
			case fr.Choice == "decline":
				c.Status, c.Outcome = cards.StatusDeclined, "declined"
				m.Text = "Declined."
			default:
				return nil
			}
			c.Choices = nil
			m.Card = &c
			return []map[string]any{m.frame("update", false)}
		}
	}
	return nil
}

// ---- helpers driving the page ----

func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func sel(testid string) chromedp.CSS { return chromedp.CSS(`[data-testid="` + testid + `"]`) }

func TestFakeServerRunApprove(t *testing.T) {
	ctx := browsertest.New(t)
	f, srv := newFakeServer(t)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/#login="+fakeSecret)); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	waitJS(t, ctx, "connected", `document.querySelector('[data-testid=conn]').textContent === 'connected'`)
	if h := evalJS[string](t, ctx, `location.hash`); h != "" {
		t.Errorf("login fragment left in the address: %q", h)
	}
	if got := evalJS[string](t, ctx, `document.querySelector('[data-testid=identity]').textContent`); got != "webchat:local" {
		t.Errorf("identity = %q", got)
	}

	// Send with the button.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(sel("input"), "/run uname -a"),
		chromedp.Click(sel("send")),
	); err != nil {
		t.Fatalf("send: %v", err)
	}
	waitJS(t, ctx, "card", `document.querySelector('[data-testid=card][data-status=pending]')`)
	waitJS(t, ctx, "ack", `document.querySelector('[data-testid=user-message]').dataset.state === 'sent'`)
	if v := evalJS[string](t, ctx, `document.querySelector('[data-testid=input]').value`); v != "" {
		t.Errorf("input not cleared after send: %q", v)
	}

	card := evalJS[map[string]any](t, ctx, `(() => {
		const c = document.querySelector('[data-testid=card]');
		const q = (s) => c.querySelector(s);
		return {
			id: c.dataset.cardId,
			intent: q('[data-testid=intent]').textContent,
			risk: q('[data-testid=risk]').textContent,
			command: q('pre code[data-testid=command]').textContent,
			affected: q('[data-testid=affected] li').textContent,
			detailsOpen: q('details').open,
			buttons: [...c.querySelectorAll('[data-testid=choices] button')].map(b => b.dataset.testid + '|' + b.textContent + '|' + b.className),
			msgs: document.querySelectorAll('[data-testid=message]').length,
			msgId: document.querySelector('[data-testid=message]').dataset.messageId,
		};
	})()`)
	want := map[string]any{
		"intent": "Run a shell command", "risk": "low risk", "command": "uname -a", "affected": "this host",
		"detailsOpen": false, "msgs": float64(1), "msgId": "s1",
	}
	for k, v := range want {
		if card[k] != v {
			t.Errorf("card %s = %v, want %v", k, card[k], v)
		}
	}
	buttons, _ := card["buttons"].([]any)
	if len(buttons) != 2 ||
		!strings.HasPrefix(buttons[0].(string), "choice-approve|Run uname -a|") || !strings.Contains(buttons[0].(string), "btn-primary") ||
		!strings.HasPrefix(buttons[1].(string), "choice-decline|Decline|") || !strings.Contains(buttons[1].(string), "btn-danger") {
		t.Errorf("choice buttons = %q", buttons)
	}

	if err := chromedp.Do(ctx, chromedp.Click(sel("choice-approve"))); err != nil {
		t.Fatalf("click approve: %v", err)
	}
	waitJS(t, ctx, "done", `document.querySelector('[data-testid=card][data-status=done]')`)

	res := evalJS[map[string]any](t, ctx, `(() => {
		const c = document.querySelector('[data-testid=card]');
		return {
			outcome: c.querySelector('[data-testid=outcome]').textContent,
			output: c.querySelector('pre[data-testid=output]').textContent,
			full: c.querySelector('[data-testid=full-output]').getAttribute('href'),
			buttons: c.querySelectorAll('button').length,
			imgs: document.querySelectorAll('img').length,
			logImgs: document.querySelector('[data-testid=log]').querySelectorAll('img').length,
			msgs: document.querySelectorAll('[data-testid=message]').length,
			text: document.querySelector('[data-testid=message] [data-testid=text]').textContent,
		};
	})()`)
	if res["outcome"] != "exit code 0 ✓" {
		t.Errorf("outcome = %q", res["outcome"])
	}
	if out, _ := res["output"].(string); out != xssOutput || !strings.Contains(out, "<img") {
		t.Errorf("output = %q, want it shown literally as %q", out, xssOutput)
	}
	if res["imgs"] != float64(0) || res["logImgs"] != float64(0) {
		t.Errorf("output was parsed as HTML: %v <img> elements", res["imgs"])
	}
	if res["full"] != "/outputs/out1" {
		t.Errorf("full output link = %v", res["full"])
	}
	if res["buttons"] != float64(0) {
		t.Errorf("%v buttons left on a done card", res["buttons"])
	}
	if res["msgs"] != float64(1) || res["text"] != "Done." {
		t.Errorf("update not applied in place: %v messages, text %q", res["msgs"], res["text"])
	}

	// Enter sends too.
	if err := chromedp.Do(ctx, chromedp.SendKeys(sel("input"), "hello\r")); err != nil {
		t.Fatalf("send with Enter: %v", err)
	}
	waitJS(t, ctx, "echo", `[...document.querySelectorAll('[data-testid=message] [data-testid=text]')].some(e => e.textContent === 'echo: hello')`)

	f.mu.Lock()
	bad := f.badFrames
	f.mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("server got malformed frames: %q", bad)
	}
	if errs := browsertest.JSErrors(ctx); len(errs) > 0 {
		t.Errorf("page errors (CSP violations show up here too): %q", errs)
	}
}

func TestFakeServerLoginFormAndReconnect(t *testing.T) {
	ctx := browsertest.New(t)
	f, srv := newFakeServer(t)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	// No fragment and no cookie: the sign-in form.
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	waitJS(t, ctx, "login form", `!document.querySelector('[data-testid=login]').hidden`)
	if s := evalJS[string](t, ctx, `document.querySelector('[data-testid=conn]').textContent`); s != "disconnected" {
		t.Errorf("conn = %q while signed out", s)
	}
	// A wrong secret shows the server's error.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(sel("login-secret"), "wrong"),
		chromedp.Click(sel("login-submit")),
	); err != nil {
		t.Fatalf("submit login: %v", err)
	}
	waitJS(t, ctx, "login error", `document.querySelector('[data-testid=login-error]').textContent.includes('invalid')`)
	// Pasting the whole address works.
	if err := chromedp.Do(ctx,
		chromedp.SetValue(sel("login-secret"), srv.URL+"/#login="+fakeSecret),
		chromedp.Click(sel("login-submit")),
	); err != nil {
		t.Fatalf("submit login: %v", err)
	}
	waitJS(t, ctx, "connected", `document.querySelector('[data-testid=conn]').textContent === 'connected'`)

	if err := chromedp.Do(ctx, chromedp.SendKeys(sel("input"), "/run ls\r")); err != nil {
		t.Fatalf("send: %v", err)
	}
	waitJS(t, ctx, "card", `document.querySelector('[data-testid=card][data-status=pending]')`)

	// The server drops the connection before acking "/drop": the page
	// reconnects, gets the history replayed, and re-sends the frame with
	// the same id.
	if err := chromedp.Do(ctx, chromedp.SendKeys(sel("input"), "/drop\r")); err != nil {
		t.Fatalf("send: %v", err)
	}
	waitJS(t, ctx, "resent and acked", `[...document.querySelectorAll('[data-testid=user-message]')].every(e => e.dataset.state === 'sent')`)
	waitJS(t, ctx, "echo after reconnect", `[...document.querySelectorAll('[data-testid=message] [data-testid=text]')].some(e => e.textContent === 'echo: /drop')`)

	dropID := evalJS[string](t, ctx, `[...document.querySelectorAll('[data-testid=user-message]')].pop().dataset.clientId`)
	f.mu.Lock()
	n, conns := 0, f.conns
	for _, id := range f.received {
		if id == dropID {
			n++
		}
	}
	f.mu.Unlock()
	if n != 2 || conns != 2 {
		t.Errorf("frame %s received %d times over %d connections; want 2 over 2", dropID, n, conns)
	}
	// Replay refreshed the existing message instead of adding a copy.
	if c := evalJS[int](t, ctx, `document.querySelectorAll('[data-testid=message][data-message-id=s1]').length`); c != 1 {
		t.Errorf("replayed message shown %d times", c)
	}
	if c := evalJS[int](t, ctx, `document.querySelectorAll('[data-testid=card]').length`); c != 1 {
		t.Errorf("%d cards after replay, want 1", c)
	}
	// The card still works after the reconnect.
	if err := chromedp.Do(ctx, chromedp.Click(sel("choice-decline"))); err != nil {
		t.Fatalf("click decline: %v", err)
	}
	waitJS(t, ctx, "declined", `document.querySelector('[data-testid=card][data-status=declined]')`)
	for _, e := range browsertest.JSErrors(ctx) {
		// The 401s of GET /session and of the wrong secret are expected.
		if !strings.Contains(e, "status of 401") {
			t.Errorf("page error: %s", e)
		}
	}
}

func TestFakeServerCardsPhoneDark(t *testing.T) {
	ctx := browsertest.New(t)
	_, srv := newFakeServer(t)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	dark := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
		})
		return err
	})
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(375, 740, chromedp.EmulateMobile, chromedp.EmulateTouch),
		dark,
		chromedp.Navigate(srv.URL+"/#login="+fakeSecret),
	); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	waitJS(t, ctx, "connected", `document.querySelector('[data-testid=conn]').textContent === 'connected'`)
	if bg := evalJS[string](t, ctx, `getComputedStyle(document.body).backgroundColor`); bg != "rgb(17, 20, 24)" {
		t.Errorf("dark mode body background = %q", bg)
	}

	if err := chromedp.Do(ctx, chromedp.SendKeys(sel("input"), "/cards\r")); err != nil {
		t.Fatalf("send: %v", err)
	}
	waitJS(t, ctx, "cards", `document.querySelectorAll('[data-testid=card]').length === 3`)

	got := evalJS[map[string]any](t, ctx, `(() => {
		const c = (id) => document.querySelector('[data-card-id="' + id + '"]');
		const link = c('c-secure').querySelector('a[data-testid=link]');
		return {
			highDetailsOpen: c('c-high').querySelector('details').open,
			highBadge: c('c-high').querySelector('[data-testid=risk]').textContent,
			highButtons: c('c-high').querySelectorAll('button').length,
			secureButtons: c('c-secure').querySelectorAll('button').length,
			secureHref: link && link.href,
			secureTarget: link && link.target,
			secureRel: link && link.rel,
			secureClass: link && link.className,
			infoLinks: c('c-info').querySelectorAll('a').length,
			overflowX: document.documentElement.scrollWidth - window.innerWidth,
		};
	})()`)
	want := map[string]any{
		"highDetailsOpen": true, "highBadge": "high risk", "highButtons": float64(2), "secureButtons": float64(0),
		"secureHref": "https://example.invalid/form/abc", "secureTarget": "_blank", "secureRel": "noopener noreferrer",
		"infoLinks": float64(0),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if cls, _ := got["secureClass"].(string); !strings.Contains(cls, "btn") {
		t.Errorf("secure-input link is not button-styled: class %q", cls)
	}
	if ox, _ := got["overflowX"].(float64); ox > 0 {
		t.Errorf("page overflows a phone screen horizontally by %vpx", ox)
	}

	// Medium and above: approve, then confirm on the same card.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-card-id="c-high"] [data-testid="choice-approve"]`))); err != nil {
		t.Fatalf("approve: %v", err)
	}
	waitJS(t, ctx, "confirming", `document.querySelector('[data-card-id="c-high"][data-status=confirming] [data-testid=choice-confirm]')`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-card-id="c-high"] [data-testid="choice-confirm"]`))); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	waitJS(t, ctx, "done", `document.querySelector('[data-card-id="c-high"][data-status=done]')`)
	scroll := evalJS[map[string]any](t, ctx, `(() => {
		const o = document.querySelector('[data-card-id="c-high"] [data-testid=output]');
		return {scrolls: o.scrollHeight > o.clientHeight, overflowY: getComputedStyle(o).overflowY,
			full: document.querySelectorAll('[data-card-id="c-high"] [data-testid=full-output]').length,
			overflowX: document.documentElement.scrollWidth - window.innerWidth};
	})()`)
	if scroll["scrolls"] != true || scroll["overflowY"] != "auto" || scroll["full"] != float64(0) {
		t.Errorf("long output: %v", scroll)
	}
	if ox, _ := scroll["overflowX"].(float64); ox > 0 {
		t.Errorf("page overflows a phone screen horizontally by %vpx after the output", ox)
	}

	// Over-long messages are refused locally, not sent.
	before := evalJS[int](t, ctx, `document.querySelectorAll('[data-testid=user-message]').length`)
	if err := chromedp.Do(ctx,
		chromedp.SetValue(sel("input"), strings.Repeat("x", 16001)),
		chromedp.Click(sel("send")),
	); err != nil {
		t.Fatalf("send long: %v", err)
	}
	waitJS(t, ctx, "too long", `document.querySelector('[data-testid=composer-error]').textContent.includes('too long')`)
	if after := evalJS[int](t, ctx, `document.querySelectorAll('[data-testid=user-message]').length`); after != before {
		t.Errorf("an over-long message was sent")
	}
	if errs := browsertest.JSErrors(ctx); len(errs) > 0 {
		t.Errorf("page errors: %q", errs)
	}
}
