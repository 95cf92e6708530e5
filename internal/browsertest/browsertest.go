// Package browsertest starts a headless Chromium for tests that drive real
// pages (the web chat) through the Chrome DevTools Protocol with
// github.com/chromedp/chromedp. Nothing is downloaded: the browser must be
// installed ("apt-get install -y chromium") or named by $SILAS_CHROMIUM.
//
// Tests skip when no browser is found, unless SILAS_REQUIRE_BROWSER=1 (for
// CI that has one), in which case they fail. NewWith takes options, such as
// IgnoreCertificateErrors for a server with a self-signed test certificate.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/silas-gateway/silas/internal/testenv"
)

// Environment variables that control the harness.
const (
	// EnvChromium names the browser executable to use before the
	// well-known locations.
	EnvChromium = "SILAS_CHROMIUM"
	// EnvRequire, when "1", turns a missing or unusable browser into a
	// test failure instead of a skip.
	EnvRequire = "SILAS_REQUIRE_BROWSER"
)

// candidates are the well-known browser locations, in order of preference.
var candidates = []string{
	"/usr/bin/chromium",
	"/usr/bin/chromium-browser",
	"/usr/bin/google-chrome",
}

const howToEnable = "install Chromium (apt-get install -y chromium) or set " +
	EnvChromium + "=/path/to/chromium; set " + EnvRequire + "=1 to fail instead of skip"

// FindBrowser returns the browser executable to use, or "" when there is
// none. A set $SILAS_CHROMIUM that does not name an executable is an error.
func FindBrowser() (string, error) {
	if p := os.Getenv(EnvChromium); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("%s=%q is not an executable file", EnvChromium, p)
		}
		return p, nil
	}
	for _, p := range candidates {
		if isExecutable(p) {
			return p, nil
		}
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// unavailable skips the test, or fails it under SILAS_REQUIRE_BROWSER=1
// or in CI (testenv).
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + ": " + howToEnable
	if os.Getenv(EnvRequire) == "1" {
		t.Fatal("browsertest: " + msg)
	}
	testenv.Missing(t, "browsertest: %s", msg)
}

// New returns a chromedp context for a headless Chromium, or calls t.Skip
// with a message saying how to enable it ("apt-get install -y chromium" / set
// SILAS_CHROMIUM=/path) when no browser is found — unless
// SILAS_REQUIRE_BROWSER=1, in which case it fails the test.
//
// The browser is already running when New returns, with a fresh profile in
// t.TempDir(); it is stopped in t.Cleanup. Derive per-step timeouts from the
// returned context (context.WithTimeout) — never cancel it yourself. Console
// output and uncaught exceptions of the page are logged with t.Logf; read the
// errors among them with JSErrors.
func New(t testing.TB) (ctx context.Context) {
	t.Helper()
	return start(t, options{})
}

// Option changes how NewWith starts the browser.
type Option func(*options)

type options struct {
	ignoreCertErrors bool
}

// IgnoreCertificateErrors makes the browser accept any TLS certificate
// (Chromium's --ignore-certificate-errors), for a test that drives a server
// with a self-signed certificate on loopback, such as the secure form in its
// default development mode. It applies to this browser only: every other
// test keeps full certificate checking.
func IgnoreCertificateErrors() Option {
	return func(o *options) { o.ignoreCertErrors = true }
}

// NewWith is New with options. It skips or fails exactly as New does.
func NewWith(t testing.TB, opts ...Option) (ctx context.Context) {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return start(t, o)
}

func start(t testing.TB, o options) context.Context {
	t.Helper()
	path, err := FindBrowser()
	if err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	if path == "" {
		unavailable(t, "no Chromium found (looked at $%s, %s)", EnvChromium, strings.Join(candidates, ", "))
	}

	// TempDir first: cleanups run last-in first-out, so the browser is
	// gone before its profile directory is removed.
	profile := t.TempDir()

	lt := &logger{t: t}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(profile),
		chromedp.Flag("headless", "new"),
		chromedp.Flag("no-sandbox", true), // needed as root and in most containers
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-features", "Translate,MediaRouter,OptimizationHints"),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.WindowSize(1280, 900),
	}
	if o.ignoreCertErrors {
		opts = append(opts, chromedp.IgnoreCertErrors)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithErrorf(lt.logf))

	col := &collector{lt: lt, done: make(chan struct{})}
	t.Cleanup(func() {
		cancelBrowser()
		<-col.done
		cancelAlloc()
		lt.stop()
	})

	// Start the browser now, with a context that has no deadline: the first
	// Run binds the browser's lifetime to its context.
	if err := chromedp.Do(bctx); err != nil {
		close(col.done)
		unavailable(t, "Chromium at %s did not start: %v", path, err)
	}
	go col.run(bctx)
	return context.WithValue(bctx, collectorKey{}, col)
}

// JSErrors returns the uncaught exceptions and console errors the page of
// ctx (from New) has produced so far, one line each.
func JSErrors(ctx context.Context) []string {
	col, _ := ctx.Value(collectorKey{}).(*collector)
	if col == nil {
		return nil
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	return append([]string(nil), col.errs...)
}

type collectorKey struct{}

// collector logs the page's console and keeps its errors.
type collector struct {
	lt   *logger
	done chan struct{}
	mu   sync.Mutex
	errs []string
}

func (c *collector) run(ctx context.Context) {
	defer close(c.done)
	for m, err := range chromedp.Console(ctx) {
		if err != nil {
			return
		}
		line := m.String()
		c.lt.logf("browser console: %s", line)
		if m.IsException() || m.Type == chromedp.ConsoleError {
			c.mu.Lock()
			c.errs = append(c.errs, line)
			c.mu.Unlock()
		}
	}
}

// logger forwards to t.Logf until the test's cleanup starts, so a late
// browser event never logs after the test has finished.
type logger struct {
	t       testing.TB
	mu      sync.Mutex
	stopped bool
}

func (l *logger) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.t.Logf(format, args...)
	}
}

func (l *logger) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}
