package browsertest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/silas-gateway/silas/internal/browsertest"
)

const clickPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>harness</title>
<link rel="icon" href="data:,"><script src="/click.js" defer></script></head>
<body><button id="b" type="button">Click me</button><p id="out">before</p></body></html>`

const clickJS = `document.getElementById('b').addEventListener('click', function () {
  document.getElementById('out').textContent = 'clicked';
});`

// TestHarnessClick proves the harness drives a real browser: a click on a
// button runs the page's script and changes the text.
func TestHarnessClick(t *testing.T) {
	ctx := browsertest.New(t)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(clickPage))
	})
	mux.HandleFunc("GET /click.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Write([]byte(clickJS))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	if err := chromedp.Do(tctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("b")),
	); err != nil {
		t.Fatalf("load page: %v", err)
	}
	before, err := chromedp.Run(tctx, chromedp.Text(chromedp.ID("out")))
	if err != nil || before != "before" {
		t.Fatalf("text before click = %q, %v; want %q", before, err, "before")
	}
	if err := chromedp.Do(tctx, chromedp.Click(chromedp.ID("b"))); err != nil {
		t.Fatalf("click: %v", err)
	}
	after, err := chromedp.Run(tctx, chromedp.Poll[string](
		`document.getElementById('out').textContent === 'clicked' && 'clicked'`,
		chromedp.WithPollingTimeout(10*time.Second)))
	if err != nil || after != "clicked" {
		t.Fatalf("text after click = %q, %v; want %q", after, err, "clicked")
	}
	if errs := browsertest.JSErrors(ctx); len(errs) > 0 {
		t.Errorf("page errors: %q", errs)
	}
}

// TestFindBrowserEnv checks that an explicit SILAS_CHROMIUM wins and that a
// bad one is reported rather than silently ignored.
func TestFindBrowserEnv(t *testing.T) {
	t.Setenv(browsertest.EnvChromium, "/nonexistent/chromium")
	if _, err := browsertest.FindBrowser(); err == nil {
		t.Fatal("FindBrowser with a missing SILAS_CHROMIUM: want an error")
	}
}
