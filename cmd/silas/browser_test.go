package main

// End-to-end in a real browser: the real `silas serve` (built by TestMain in
// e2e_test.go, on a fresh PostgreSQL database) and the embedded page in
// headless Chromium, driven through the DevTools protocol. Skips when no
// Chromium is installed, unless SILAS_REQUIRE_BROWSER=1.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/silas-gateway/silas/internal/browsertest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// browserWait polls a JavaScript expression until it is truthy.
func browserWait(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

// browserPoll polls a JavaScript expression until it yields a truthy
// string, and returns it.
func browserPoll(t *testing.T, ctx context.Context, what, expr string) string {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Poll[string](expr, chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
	return v
}

func browserEval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func testid(id string) chromedp.CSS { return chromedp.CSS(`[data-testid="` + id + `"]`) }

// js quotes s as a JavaScript string literal.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// browserRun types "/run <command>" and sends it with the send button, then
// returns the id of the pending card that shows exactly that command.
func browserRun(t *testing.T, ctx context.Context, command string) string {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(testid("input"), "/run "+command),
		chromedp.Click(testid("send")),
	); err != nil {
		t.Fatalf("send /run %s: %v", command, err)
	}
	return browserPoll(t, ctx, "pending card for "+command, `(() => {
		const c = [...document.querySelectorAll('[data-testid=card][data-status=pending]')]
			.find(c => c.querySelector('[data-testid=command]')?.textContent === `+js(command)+`);
		return c ? c.dataset.cardId : '';
	})()`)
}

func cardSel(cardID, inner string) chromedp.CSS {
	s := `[data-testid="card"][data-card-id="` + cardID + `"]`
	if inner != "" {
		s += ` [data-testid="` + inner + `"]`
	}
	return chromedp.CSS(s)
}

// cardState reads what a card shows.
func cardState(t *testing.T, ctx context.Context, cardID string) map[string]any {
	t.Helper()
	return browserEval[map[string]any](t, ctx, `(() => {
		const c = document.querySelector('[data-testid=card][data-card-id=`+js(cardID)+`]');
		const q = (id) => { const e = c.querySelector('[data-testid=' + id + ']'); return e ? e.textContent : null; };
		return {status: c.dataset.status, risk: c.dataset.risk, command: q('command'), outcome: q('outcome'),
			output: q('output'), buttons: c.querySelectorAll('button').length};
	})()`)
}

func TestBrowserWebChat(t *testing.T) {
	t.Parallel() // a browser, a server and a database of its own
	// The browser first: without one the test skips before starting a
	// database and a server.
	bctx := browsertest.New(t)
	dsn := storetest.NewDatabase(t)
	s := startServer(t, dsn, t.TempDir())
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()

	// Sign in with the printed one-time address.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/#login="+s.login)); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	browserWait(t, ctx, "connected", `document.querySelector('[data-testid=conn]').dataset.state === 'connected'`)
	if h := browserEval[string](t, ctx, `location.hash`); h != "" {
		t.Errorf("the login secret stayed in the address: %q", h)
	}
	if id := browserEval[string](t, ctx, `document.querySelector('[data-testid=identity]').textContent`); id != "webchat:local" {
		t.Errorf("identity = %q", id)
	}

	// Low risk: one tap.
	low := browserRun(t, ctx, "uname -a")
	browserWait(t, ctx, "message acked", `[...document.querySelectorAll('[data-testid=user-message]')].every(e => e.dataset.state === 'sent')`)
	st := cardState(t, ctx, low)
	if st["risk"] != "low" || st["buttons"] != float64(2) {
		t.Errorf("pending card = %v", st)
	}
	if label := browserEval[string](t, ctx, `document.querySelector('[data-card-id=`+js(low)+`] [data-testid=choice-approve]').innerHTML`); label != "Run <code>uname -a</code>" {
		t.Errorf("approve label = %q", label)
	}
	// The space between "Run" and the command is rendered: the gap from the
	// end of "Run" to the <code> is a space's width, not nothing ("Rununame
	// -a" when the button was a flex box).
	if gap := browserEval[float64](t, ctx, `(() => {
		const b = document.querySelector('[data-card-id=`+js(low)+`] [data-testid=choice-approve]');
		const r = document.createRange();
		r.setStart(b.firstChild, 0);
		r.setEnd(b.firstChild, 3);
		return b.querySelector('code').getBoundingClientRect().left - r.getBoundingClientRect().right;
	})()`); gap < 2 {
		t.Errorf("approve label: %.1f px between \"Run\" and the command; the space is not rendered", gap)
	}
	if err := chromedp.Do(ctx, chromedp.Click(cardSel(low, "choice-approve"))); err != nil {
		t.Fatalf("click approve: %v", err)
	}
	browserWait(t, ctx, "uname done", `document.querySelector('[data-testid=card][data-card-id=`+js(low)+`][data-status=done]')`)
	st = cardState(t, ctx, low)
	if out, _ := st["outcome"].(string); !strings.Contains(out, "exit code 0 ✓") {
		t.Errorf("outcome = %q", out)
	}
	if out, _ := st["output"].(string); !strings.Contains(out, "Linux") {
		t.Errorf("output = %q", out)
	}
	if st["buttons"] != float64(0) {
		t.Errorf("%v buttons left on a done card", st["buttons"])
	}

	// Medium risk: approve, then confirm on the same card.
	med := browserRun(t, ctx, "touch browser-file")
	if r := cardState(t, ctx, med)["risk"]; r != "medium" {
		t.Errorf("touch risk = %v", r)
	}
	if err := chromedp.Do(ctx, chromedp.Click(cardSel(med, "choice-approve"))); err != nil {
		t.Fatalf("click approve: %v", err)
	}
	browserWait(t, ctx, "confirming", `document.querySelector('[data-card-id=`+js(med)+`][data-status=confirming] [data-testid=choice-confirm]:not([disabled])')`)
	if err := chromedp.Do(ctx, chromedp.Click(cardSel(med, "choice-confirm"))); err != nil {
		t.Fatalf("click confirm: %v", err)
	}
	browserWait(t, ctx, "touch done", `document.querySelector('[data-testid=card][data-card-id=`+js(med)+`][data-status=done]')`)
	if out, _ := cardState(t, ctx, med)["outcome"].(string); !strings.Contains(out, "exit code 0 ✓") {
		t.Errorf("touch outcome = %q", out)
	}

	// Hostile output shows literally; nothing becomes an element.
	const payload = "<img src=x onerror=alert(1)>"
	xss := browserRun(t, ctx, "echo '"+payload+"'")
	if err := chromedp.Do(ctx, chromedp.Click(cardSel(xss, "choice-approve"))); err != nil {
		t.Fatalf("click approve: %v", err)
	}
	browserWait(t, ctx, "echo done", `document.querySelector('[data-testid=card][data-card-id=`+js(xss)+`][data-status=done]')`)
	st = cardState(t, ctx, xss)
	if out, _ := st["output"].(string); !strings.Contains(out, payload) {
		t.Errorf("output = %q, want %q shown literally", out, payload)
	}
	if cmd, _ := st["command"].(string); !strings.Contains(cmd, payload) {
		t.Errorf("command = %q, want %q shown literally", cmd, payload)
	}
	if n := browserEval[int](t, ctx, `document.querySelectorAll('img, [onerror]').length`); n != 0 {
		t.Errorf("the page has %d <img>/[onerror] elements: output was parsed as HTML", n)
	}

	// A reload keeps the session (cookie) and the replay shows every card
	// in its current state, once each.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/")); err != nil {
		t.Fatalf("reload: %v", err)
	}
	browserWait(t, ctx, "connected after reload", `document.querySelector('[data-testid=conn]').dataset.state === 'connected'`)
	browserWait(t, ctx, "replayed cards", `document.querySelectorAll('[data-testid=card][data-status=done]').length === 3`)
	if n := browserEval[int](t, ctx, `document.querySelectorAll('[data-testid=card]').length`); n != 3 {
		t.Errorf("%d cards after the replay, want 3", n)
	}
	if n := browserEval[int](t, ctx, `document.querySelectorAll('img, [onerror]').length`); n != 0 {
		t.Errorf("the replay put %d <img>/[onerror] elements on the page", n)
	}

	if errs := browsertest.JSErrors(bctx); len(errs) > 0 {
		t.Errorf("page errors (CSP violations show up here too): %q", errs)
	}
	// Leave the page before the server stops, so it does not log failed
	// reconnects during cleanup.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Logf("leaving the page: %v", err)
	}
}

// TestBrowserSignInInOpenTab: after a restart the operator pastes the new
// one-time address into the tab that is already open. Only the fragment
// changes (no page load): the page must still sign in, drop the secret from
// the address bar and clear the stale "session ended" state. A first visit
// shows what to type.
func TestBrowserSignInInOpenTab(t *testing.T) {
	t.Parallel() // a browser, a server and a database of its own
	bctx := browsertest.New(t)
	dsn := storetest.NewDatabase(t)
	data := t.TempDir()
	s := startServer(t, dsn, data)
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()

	if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/#login="+s.login)); err != nil {
		t.Fatalf("navigate: %v", err)
	}
	browserWait(t, ctx, "connected", `document.querySelector('[data-testid=conn]').dataset.state === 'connected'`)
	browserWait(t, ctx, "first-visit hint", `(document.querySelector('[data-testid=hint]')?.textContent || '').includes('/run uname -a')`)

	// The session ends (as after a restart that lost it, or a revoke).
	browserEval[bool](t, ctx, `(fetch('/logout', {method: 'POST'}), true)`)
	browserWait(t, ctx, "login form", `!document.querySelector('[data-testid=login]').hidden`)

	// A restart on the same address prints a new one-time link.
	addr := strings.TrimPrefix(s.base, "http://")
	s.stop()
	s2 := startServer(t, dsn, data, "SILAS_HTTP_LISTEN="+addr)
	if s2.base != s.base {
		t.Fatalf("restarted on %s, want %s", s2.base, s.base)
	}
	// Pasted into the open tab: a fragment-only navigation.
	browserEval[bool](t, ctx, `(location.hash = '#login=`+s2.login+`', true)`)
	browserWait(t, ctx, "connected with the new link", `document.querySelector('[data-testid=conn]').dataset.state === 'connected' && document.querySelector('[data-testid=login]').hidden`)
	if h := browserEval[string](t, ctx, `location.hash`); h != "" {
		t.Errorf("the login secret stayed in the address: %q", h)
	}
	if e := browserEval[string](t, ctx, `document.querySelector('[data-testid=login-error]').textContent`); e != "" {
		t.Errorf("stale login error: %q", e)
	}
	// It works: a command gets its answer.
	browserEval[bool](t, ctx, `(() => { const i = document.querySelector('[data-testid=input]'); i.value = '/whoami'; i.form.requestSubmit(); return true; })()`)
	browserWait(t, ctx, "answer", `[...document.querySelectorAll('[data-testid=message]')].some(m => m.textContent.includes('webchat:local'))`)
	for _, e := range browsertest.JSErrors(bctx) {
		// The session check after the logout answers 401 by design.
		if !strings.Contains(e, "status of 401") {
			t.Errorf("page error: %q", e)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Logf("leaving the page: %v", err)
	}
}
