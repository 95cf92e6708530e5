package llm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The HTTP side of the client: one request to the endpoint, retried, with
// the headers, backoff and error answers of openai-go v3.96.0, the SDK
// this replaced (its request pipeline, internal/requestconfig, is what the
// comments below refer to as "the SDK"). The SDK was a quarter of the
// gateway's code for two endpoints; the wire stays what it was
// (TestChatSendsTheSDKsHeaders, TestRetries, TestDecodeMatchesSDK).

// sdkVersion is the SDK version whose headers the client sends, so an
// endpoint or proxy that looks at them sees what it saw before.
const sdkVersion = "3.96.0"

// maxRetryAfter caps what Retry-After may ask for when no MaxRetryDelay
// is set (New always sets one); the SDK's default.
const maxRetryAfter = 2 * time.Minute

// baseHeader is the headers every request carries (the SDK's defaults:
// its user agent and platform properties, JSON accepted).
func baseHeader() http.Header {
	h := http.Header{}
	h.Set("Accept", "application/json")
	h.Set("User-Agent", "OpenAI/Go "+sdkVersion)
	h.Set("X-Stainless-Lang", "go")
	h.Set("X-Stainless-Package-Version", sdkVersion)
	h.Set("X-Stainless-Os", stainlessOS(runtime.GOOS))
	h.Set("X-Stainless-Arch", stainlessArch(runtime.GOARCH))
	h.Set("X-Stainless-Runtime", "go")
	h.Set("X-Stainless-Runtime-Version", runtime.Version())
	return h
}

func stainlessOS(goos string) string {
	switch goos {
	case "ios":
		return "iOS"
	case "android":
		return "Android"
	case "darwin":
		return "MacOS"
	case "windows":
		return "Windows"
	case "freebsd":
		return "FreeBSD"
	case "openbsd":
		return "OpenBSD"
	case "linux":
		return "Linux"
	}
	return "Other:" + goos
}

func stainlessArch(arch string) string {
	switch arch {
	case "386":
		return "x32"
	case "amd64":
		return "x64"
	case "arm", "arm64":
		return arch
	}
	return "other:" + arch
}

// endpoint is one path under the base URL with the headers of its
// requests, made once by New.
type endpoint struct {
	url    string
	header http.Header
}

// newEndpoint resolves path against base as the SDK did
// (base.Parse(path): a base with a trailing slash gets path appended).
func newEndpoint(base *url.URL, path string, h http.Header) (endpoint, error) {
	u, err := base.Parse(path)
	if err != nil {
		return endpoint{}, fmt.Errorf("llm: base URL: %w", err)
	}
	return endpoint{url: u.String(), header: h}, nil
}

// do sends one request to e (body nil: GET), retrying as the SDK did: a
// connection error, 408, 409, 429 or 5xx (or what x-should-retry says) is
// retried up to MaxRetries times after a backoff of 0.5s·2ⁿ (at most
// MaxRetryDelay, less up to a quarter of jitter) or what Retry-After-Ms /
// Retry-After ask for; a server asking longer than MaxRetryDelay ends the
// retries with its answer. Each attempt has Timeout; an attempt that runs
// out of it, or a cancelled ctx, ends the call at once. It returns the
// body of a 2xx-3xx answer that says it is JSON, an *apiFailure for a
// 4xx/5xx answer, or the transport's error.
func (c *Client) do(ctx context.Context, e endpoint, body []byte) ([]byte, error) {
	method := http.MethodGet
	if body != nil {
		method = http.MethodPost
	}
	var (
		res *http.Response
		err error
	)
	for retry := 0; ; retry++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if d, ok := ctx.Deadline(); !ok || time.Now().Add(c.cfg.Timeout).Before(d) {
			actx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		}
		res, err = c.attempt(actx, method, e, body, retry)
		if actx.Err() != nil {
			cancel()
			if res != nil {
				res.Body.Close()
			}
			return nil, actx.Err()
		}
		if retry >= c.cfg.MaxRetries || !shouldRetry(res, err) {
			return c.finish(res, err, cancel)
		}
		delay, again := retryDelay(res, retry, c.cfg.MaxRetryDelay)
		if !again {
			return c.finish(res, err, cancel)
		}
		if res != nil {
			res.Body.Close()
		}
		// The wait runs under the attempt's timeout, as in the SDK.
		werr := sleep(actx, delay)
		cancel()
		if werr != nil {
			return nil, werr
		}
	}
}

// attempt makes one HTTP request.
func (c *Client) attempt(ctx context.Context, method string, e endpoint, body []byte, retry int) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.url, rd)
	if err != nil {
		return nil, err
	}
	req.Header = e.header.Clone()
	req.Header.Set("X-Stainless-Retry-Count", strconv.Itoa(retry))
	return c.http.Do(req)
}

// finish reads the last attempt's answer.
func (c *Client) finish(res *http.Response, err error, cancel context.CancelFunc) ([]byte, error) {
	defer cancel()
	if err != nil {
		return nil, err
	}
	b, rerr := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode >= 400 {
		if rerr != nil {
			return nil, rerr
		}
		return nil, &apiFailure{status: res.StatusCode, body: b}
	}
	if rerr != nil {
		return nil, fmt.Errorf("error reading response body: %w", rerr)
	}
	ct := res.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	if !strings.Contains(mt, "application/json") && !strings.HasSuffix(mt, "+json") {
		return nil, fmt.Errorf("the endpoint answered %d with content type %q, not JSON", res.StatusCode, ct)
	}
	return b, nil
}

// apiFailure is an error answer (status ≥ 400) and its body; wrap turns
// it into an *APIError.
type apiFailure struct {
	status int
	body   []byte
}

func (f *apiFailure) Error() string { return fmt.Sprintf("the endpoint answered %d", f.status) }

// errWrongOrigin ends a call whose request (a redirect) would leave the
// base URL's origin, with the API key in it. It is not retried.
var errWrongOrigin = errors.New("request URL origin must match the configured base URL")

func shouldRetry(res *http.Response, err error) bool {
	if errors.Is(err, errWrongOrigin) {
		return false
	}
	if res == nil {
		return err != nil // a connection error
	}
	switch res.Header.Get("X-Should-Retry") {
	case "true":
		return true
	case "false":
		return false
	}
	s := res.StatusCode
	return s == http.StatusRequestTimeout || s == http.StatusConflict || s == http.StatusTooManyRequests || s >= 500
}

// retryDelay is how long to wait before retry n+1 and whether to retry
// at all (not when the server asks for longer than maxDelay).
func retryDelay(res *http.Response, n int, maxDelay time.Duration) (time.Duration, bool) {
	if d, ok, tooLong := retryAfter(res, maxDelay); ok {
		return d, !tooLong
	}
	if maxDelay <= 0 {
		maxDelay = 8 * time.Second
	}
	backoff := 0.5 * float64(time.Second) * math.Pow(2, float64(n))
	delay := maxDelay
	if !math.IsInf(backoff, 0) && backoff < float64(maxDelay) {
		delay = time.Duration(backoff)
	}
	if jitter := int64(delay / 4); jitter > 0 {
		delay -= time.Duration(rand.Int64N(jitter))
	}
	return delay, true
}

// retryAfter reads Retry-After-Ms (milliseconds) or else Retry-After
// (seconds, or an HTTP date): the wait, whether a header said one, and
// whether it is longer than maxDelay. A value that is negative or not a
// number is skipped.
func retryAfter(res *http.Response, maxDelay time.Duration) (d time.Duration, ok, tooLong bool) {
	if res == nil {
		return 0, false, false
	}
	if maxDelay <= 0 {
		maxDelay = maxRetryAfter
	}
	for _, h := range []struct {
		name string
		unit time.Duration
	}{{"Retry-After-Ms", time.Millisecond}, {"Retry-After", time.Second}} {
		v := res.Header.Get(h.name)
		if v == "" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if errors.Is(err, strconv.ErrRange) && math.IsInf(f, 1) {
			return 0, true, true
		}
		if err == nil {
			if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
				continue
			}
			limit := float64(maxDelay) / float64(h.unit)
			switch {
			case f > limit:
				return 0, true, true
			case f == limit:
				return maxDelay, true, false
			}
			return time.Duration(f * float64(h.unit)), true, false
		}
		if h.unit != time.Second {
			continue
		}
		t, err := time.Parse(time.RFC1123, v)
		if err != nil {
			continue
		}
		switch d := time.Until(t); {
		case d <= 0:
			return 0, true, false
		case d > maxDelay:
			return 0, true, true
		default:
			return d, true, false
		}
	}
	return 0, false, false
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// originTransport refuses any request — a redirect the http.Client
// follows — that leaves the base URL's origin (scheme, host, port): the
// API key must not go anywhere else. The SDK did the same.
type originTransport struct {
	origin *url.URL
	next   http.RoundTripper
}

func (t originTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Opaque != "" || req.RequestURI != "" || !sameOrigin(req.URL, t.origin) ||
		(req.Host != "" && !sameOrigin(&url.URL{Scheme: req.URL.Scheme, Host: req.Host}, req.URL)) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errWrongOrigin
	}
	return t.next.RoundTrip(req)
}

func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && effectivePort(a) == effectivePort(b)
}

func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return "443"
	case "http":
		return "80"
	}
	return ""
}
