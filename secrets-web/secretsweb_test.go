package secretsweb

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/secrets"
)

func uniqueValue(prefix string) string { return prefix + "-" + core.NewID() + core.NewID() }

// The whole flow against PostgreSQL: open the link, submit, the card
// callback fires, the secret opens to the value; the link is then used up.
func TestFulfilFlow(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	req, tok := b.request(t, "github_token", 10*time.Minute)
	c := b.browser()

	resp := b.get(t, c, b.srv.Link(req.Ref, tok))
	if resp.status != http.StatusOK {
		t.Fatalf("form: %d", resp.status)
	}
	for _, want := range []string{"Token for github_token", "Paste the token from settings.", `type="password"`, `<label for="value">`,
		`aria-describedby="hint"`, `action="/secrets/` + req.Ref + `"`, `method="post"`, `href="/static/secrets.css"`} {
		if !strings.Contains(resp.body, want) {
			t.Fatalf("form lacks %q:\n%s", want, resp.body)
		}
	}
	if strings.Contains(resp.body, "<script") || strings.Contains(resp.body, " style=") {
		t.Fatal("inline script or style in the form")
	}
	form := b.openForm(t, c, req.Ref, tok)

	value := uniqueValue("ghp")
	resp = b.post(t, c, req.Ref, withValue(form, "  "+value+"\n"))
	if resp.status != http.StatusOK || !strings.Contains(resp.body, "Saved securely as github_token") {
		t.Fatalf("submit: %d %s", resp.status, resp.body)
	}
	select {
	case r := <-b.stored:
		if r.Name != "github_token" || r.Ref != req.Ref || r.Conversation != "webchat:local" {
			t.Fatalf("OnStored got %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnStored not called")
	}
	if got, err := b.openSecret(t, "github_token"); err != nil || got != value {
		t.Fatalf("stored secret: %v (trimmed value expected)", err)
	}

	// The link is single-use, by GET and by POST (a resubmission).
	if resp := b.get(t, c, b.srv.Link(req.Ref, tok)); resp.status != http.StatusConflict {
		t.Fatalf("reused link: %d", resp.status)
	}
	if resp := b.post(t, c, req.Ref, withValue(form, uniqueValue("other"))); resp.status != http.StatusConflict {
		t.Fatalf("resubmitted form: %d", resp.status)
	}
	if got, _ := b.openSecret(t, "github_token"); got != value {
		t.Fatal("a reused link replaced the value")
	}
}

// Rotation: a second request for the same name replaces the value.
func TestRotation(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	for i := range 2 {
		req, tok := b.request(t, "bot_token", time.Minute)
		c := b.browser()
		v := uniqueValue(fmt.Sprint("v", i))
		if resp := b.post(t, c, req.Ref, withValue(b.openForm(t, c, req.Ref, tok), v)); resp.status != http.StatusOK {
			t.Fatalf("%d: %d", i, resp.status)
		}
		if got, _ := b.openSecret(t, "bot_token"); got != v {
			t.Fatalf("%d: not rotated", i)
		}
	}
}

func TestExpired(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	c := b.browser()

	// Expired before it was opened: 410.
	old, oldTok := b.request(t, "old", time.Minute)
	// Opened in time, submitted too late: 410, nothing stored.
	late, lateTok := b.request(t, "late", 2*time.Minute)
	form := b.openForm(t, c, late.Ref, lateTok)
	b.clock.Add(2 * time.Minute)

	if resp := b.get(t, c, b.srv.Link(old.Ref, oldTok)); resp.status != http.StatusGone {
		t.Fatalf("expired link: %d", resp.status)
	}
	if resp := b.post(t, c, late.Ref, withValue(form, uniqueValue("late"))); resp.status != http.StatusGone {
		t.Fatalf("late submit: %d", resp.status)
	}
	if _, err := b.openSecret(t, "late"); err != core.ErrNotFound {
		t.Fatalf("late value stored: %v", err)
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	req, tok := b.request(t, "n", time.Minute)
	c := b.browser()
	unknown := b.get(t, c, b.srv.Link(core.NewID(), tok))
	wrong := b.get(t, c, b.srv.Link(req.Ref, tok[:len(tok)-1]+"x"))
	missing := b.get(t, c, b.base+"/secrets/"+req.Ref)
	for name, r := range map[string]response{"unknown ref": unknown, "wrong token": wrong, "no token": missing} {
		if r.status != http.StatusNotFound {
			t.Fatalf("%s: %d", name, r.status)
		}
		if r.body != unknown.body {
			t.Fatalf("%s: answer differs from an unknown ref's, revealing the ref exists", name)
		}
	}
	for _, p := range []string{"/secrets/UPPER", "/secrets/short", "/secrets/" + strings.Repeat("a", 27), "/", "/secrets/", "/other"} {
		if r := b.get(t, c, b.base+p+"?t="+tok); r.status != http.StatusNotFound {
			t.Fatalf("%s: %d", p, r.status)
		}
	}
	if !strings.Contains(b.logs.String(), "wrong link token") {
		t.Fatal("a wrong token is not logged")
	}
	if strings.Contains(b.logs.String(), tok) {
		t.Fatal("the link token is logged")
	}
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	req, tok := b.request(t, "n", time.Minute)
	other, otherTok := b.request(t, "m", time.Minute)
	c := b.browser()
	form := b.openForm(t, c, req.Ref, tok)
	otherForm := b.openForm(t, c, other.Ref, otherTok)

	noCookie := b.browser() // another browser: has no cookie for this form
	noCookie.Jar = nil
	cases := []struct {
		name   string
		client *http.Client
		form   url.Values
		edit   func(*http.Request)
	}{
		{"missing csrf field", c, url.Values{"t": {tok}}, nil},
		{"bad csrf field", c, url.Values{"t": {tok}, "csrf": {"AAAA" + form.Get("csrf")[4:]}}, nil},
		{"csrf of another request", c, url.Values{"t": {tok}, "csrf": otherForm["csrf"]}, nil},
		{"no cookie", noCookie, form, nil},
		{"cookie of another browser", b.browser(), form, nil},
		{"cross-site browser post", c, form, func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }},
		{"foreign origin", c, form, func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") }},
	}
	for _, cs := range cases {
		t.Run(cs.name, func(t *testing.T) {
			var edits []func(*http.Request)
			if cs.edit != nil {
				edits = append(edits, cs.edit)
			}
			resp := b.post(t, cs.client, req.Ref, withValue(cs.form, uniqueValue("csrf")), edits...)
			if resp.status != http.StatusForbidden {
				t.Fatalf("%d %s", resp.status, resp.body)
			}
		})
	}
	if _, err := b.openSecret(t, "n"); err != core.ErrNotFound {
		t.Fatal("a refused post stored a value")
	}
	// The real form still works afterwards, also with a same-origin header.
	resp := b.post(t, c, req.Ref, withValue(form, uniqueValue("ok")), func(r *http.Request) {
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		r.Header.Set("Origin", b.base)
	})
	if resp.status != http.StatusOK {
		t.Fatalf("genuine post: %d %s", resp.status, resp.body)
	}
	if strings.Contains(b.logs.String(), form.Get("csrf")) {
		t.Fatal("the csrf token is logged")
	}
}

func TestEmptyValueShowsFormAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	req, tok := b.request(t, "n", time.Minute)
	c := b.browser()
	form := b.openForm(t, c, req.Ref, tok)
	resp := b.post(t, c, req.Ref, withValue(form, "   "))
	if resp.status != http.StatusBadRequest || !strings.Contains(resp.body, `role="alert"`) || !strings.Contains(resp.body, `aria-describedby="hint error"`) {
		t.Fatalf("%d %s", resp.status, resp.body)
	}
	if resp := b.post(t, c, req.Ref, withValue(form, uniqueValue("v"))); resp.status != http.StatusOK {
		t.Fatalf("after the error: %d", resp.status)
	}
}

func TestOversized(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	req, tok := b.request(t, "n", time.Minute)
	c := b.browser()
	form := b.openForm(t, c, req.Ref, tok)

	big := strings.Repeat("A", DefaultMaxValueBytes+1)
	b.canary(big)
	if resp := b.post(t, c, req.Ref, withValue(form, big)); resp.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("value over the limit: %d", resp.status)
	}
	// A body far over the limit is refused before it is read.
	huge := strings.Repeat("%FF", DefaultMaxValueBytes+1)
	r, _ := http.NewRequest(http.MethodPost, b.base+"/secrets/"+req.Ref, strings.NewReader("t="+tok+"&csrf="+form.Get("csrf")+"&value="+huge))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp := b.do(t, c, r); resp.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("huge body: %d", resp.status)
	}
	// Multipart is not accepted.
	r, _ = http.NewRequest(http.MethodPost, b.base+"/secrets/"+req.Ref, strings.NewReader("--x--"))
	r.Header.Set("Content-Type", "multipart/form-data; boundary=x")
	if resp := b.do(t, c, r); resp.status != http.StatusUnsupportedMediaType {
		t.Fatalf("multipart: %d", resp.status)
	}
	if _, err := b.openSecret(t, "n"); err != core.ErrNotFound {
		t.Fatal("an oversized value was stored")
	}
	// Exactly at the limit is fine.
	exact := strings.Repeat("B", DefaultMaxValueBytes-10) + core.NewID()[:10]
	if resp := b.post(t, c, req.Ref, withValue(form, exact)); resp.status != http.StatusOK {
		t.Fatalf("value at the limit: %d", resp.status)
	}
}

func TestPlainHTTPRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	req, tok := b.request(t, "n", time.Minute)

	// Plain HTTP to the TLS port: the TLS layer answers 400, the handler
	// never sees the request.
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.base, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /secrets/%s?t=%s HTTP/1.1\r\nHost: x\r\n\r\n", req.Ref, tok)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("plain HTTP: %d", resp.StatusCode)
	}

	// The handler mounted without TLS refuses everything.
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/secrets/"+req.Ref+"?t="+tok, nil),
		httptest.NewRequest(http.MethodPost, "/secrets/"+req.Ref, strings.NewReader("t="+tok)),
		httptest.NewRequest(http.MethodGet, "/static/secrets.css", nil),
	} {
		r.TLS = nil
		w := httptest.NewRecorder()
		b.srv.Handler().ServeHTTP(w, r)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "HTTPS") {
			t.Fatalf("%s %s without TLS: %d", r.Method, r.URL.Path, w.Code)
		}
	}
}

func TestRateLimits(t *testing.T) {
	t.Parallel()
	t.Run("per client", func(t *testing.T) {
		b := setup(t, false, func(c *Config, _ *Deps) { c.PerClient = RateLimit{Burst: 5, Every: time.Hour} })
		req, tok := b.request(t, "n", 3*time.Hour)
		c := b.browser()
		for i := range 5 {
			if r := b.get(t, c, b.srv.Link(req.Ref, tok)); r.status != http.StatusOK {
				t.Fatalf("request %d: %d", i, r.status)
			}
		}
		r := b.get(t, c, b.base+"/static/secrets.css")
		if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
			t.Fatalf("flood: %d %v", r.status, r.header)
		}
		// A minute later the bucket has not refilled (one per hour)...
		b.clock.Add(time.Minute)
		if r := b.get(t, c, b.srv.Link(req.Ref, tok)); r.status != http.StatusTooManyRequests {
			t.Fatalf("after a minute: %d", r.status)
		}
		// ...an hour later one more request passes.
		b.clock.Add(time.Hour)
		if r := b.get(t, c, b.srv.Link(req.Ref, tok)); r.status != http.StatusOK {
			t.Fatalf("after an hour: %d", r.status)
		}
	})
	t.Run("per request from many addresses", func(t *testing.T) {
		b := setup(t, false, func(c *Config, _ *Deps) { c.PerRequest = RateLimit{Burst: 3, Every: time.Hour} })
		req, tok := b.request(t, "n", time.Minute)
		other, otherTok := b.request(t, "m", time.Minute)
		serve := func(ref, tok string, i int) int {
			r := httptest.NewRequest(http.MethodGet, "/secrets/"+ref+"?t="+tok, nil)
			r.TLS = &tls.ConnectionState{}
			r.RemoteAddr = fmt.Sprintf("198.51.100.%d:1234", i)
			w := httptest.NewRecorder()
			b.srv.Handler().ServeHTTP(w, r)
			return w.Code
		}
		for i := range 3 {
			if code := serve(req.Ref, tok, i); code != http.StatusOK {
				t.Fatalf("%d: %d", i, code)
			}
		}
		if code := serve(req.Ref, tok, 99); code != http.StatusTooManyRequests {
			t.Fatalf("flood on one request: %d", code)
		}
		if code := serve(other.Ref, otherTok, 99); code != http.StatusOK {
			t.Fatalf("another request is limited too: %d", code)
		}
	})
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, false, func(c *Config, _ *Deps) { c.PerClient = RateLimit{Burst: 4, Every: time.Hour} })
	req, tok := b.request(t, "n", time.Minute)
	c := b.browser()
	responses := map[string]response{
		"form":      b.get(t, c, b.srv.Link(req.Ref, tok)),
		"css":       b.get(t, c, b.base+"/static/secrets.css"),
		"not found": b.get(t, c, b.base+"/nope"),
	}
	b.get(t, c, b.base+"/nope")
	responses["rate limited"] = b.get(t, c, b.base+"/nope")
	if responses["rate limited"].status != http.StatusTooManyRequests {
		t.Fatal("expected a 429")
	}
	want := map[string]string{
		"Strict-Transport-Security": "max-age=63072000; includeSubDomains",
		"Referrer-Policy":           "no-referrer",
		"X-Frame-Options":           "DENY",
		"X-Content-Type-Options":    "nosniff",
		"Cache-Control":             "no-store",
		"Content-Security-Policy":   contentSecurityPolicy,
	}
	for name, r := range responses {
		for k, v := range want {
			if got := r.header.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", name, k, got, v)
			}
		}
	}
	csp := contentSecurityPolicy
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "script-src") || !strings.Contains(csp, "frame-ancestors 'none'") ||
		!strings.Contains(csp, "default-src 'none'") {
		t.Fatalf("CSP: %s", csp)
	}
	if ct := responses["css"].header.Get("Content-Type"); ct != "text/css; charset=utf-8" || !strings.Contains(responses["css"].body, "font") {
		t.Fatalf("css: %q", ct)
	}
	ck := responses["form"].header.Get("Set-Cookie")
	for _, attr := range []string{"__Host-silas-csrf-" + req.Ref + "=", "Path=/", "HttpOnly", "Secure", "SameSite=Strict", "Max-Age="} {
		if !strings.Contains(ck, attr) {
			t.Fatalf("csrf cookie lacks %q: %s", attr, ck)
		}
	}
}

// Two browsers submit one link at once: exactly one stores.
func TestConcurrentSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t, true, func(c *Config, _ *Deps) { c.PerRequest = RateLimit{Burst: 20, Every: time.Second} })
	req, tok := b.request(t, "race", time.Minute)
	const n = 6
	clients := make([]*http.Client, n)
	forms := make([]url.Values, n)
	for i := range n {
		clients[i] = b.browser()
		forms[i] = b.openForm(t, clients[i], req.Ref, tok)
	}
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = b.post(t, clients[i], req.Ref, withValue(forms[i], uniqueValue("race"))).status
		}()
	}
	wg.Wait()
	ok, conflict := 0, 0
	for _, c := range codes {
		switch c {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
			conflict++
		}
	}
	if ok != 1 || conflict != n-1 {
		t.Fatalf("codes %v", codes)
	}
}

func TestLink(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	if got := b.srv.Link("abc", "t/k+n="); got != b.base+"/secrets/abc?t=t%2Fk%2Bn%3D" {
		t.Fatal(got)
	}
}

func TestSelfSignedCertificate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "tls")
	now := time.Now()
	cert, fp, err := SelfSigned(dir, []string{"127.0.0.1", "localhost"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "key.pem")); st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %04o", st.Mode().Perm())
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %04o", st.Mode().Perm())
	}
	if cert.Leaf.PublicKeyAlgorithm != x509.ECDSA || Fingerprint(cert.Leaf.Raw) != fp || len(fp) != 95 {
		t.Fatalf("%v %s", cert.Leaf.PublicKeyAlgorithm, fp)
	}
	// Second start: same certificate.
	if _, fp2, err := SelfSigned(dir, []string{"127.0.0.1"}, now.Add(time.Hour)); err != nil || fp2 != fp {
		t.Fatalf("not reused: %v", err)
	}
	// A new host or near expiry: a new certificate.
	if _, fp3, _ := SelfSigned(dir, []string{"127.0.0.2"}, now); fp3 == fp {
		t.Fatal("not regenerated for a new host")
	}
	_, fp4, _ := SelfSigned(dir, []string{"127.0.0.2"}, now)
	if _, fp5, _ := SelfSigned(dir, []string{"127.0.0.2"}, now.Add(340*24*time.Hour)); fp5 == fp4 {
		t.Fatal("not renewed before expiry")
	}
	// A key file others can read is not used: a new one is written 0600.
	os.Chmod(filepath.Join(dir, "key.pem"), 0o644) //nolint:errcheck
	if _, _, err := SelfSigned(dir, []string{"127.0.0.2"}, now); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "key.pem")); st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %04o", st.Mode().Perm())
	}
}

// The service serves the certificate whose fingerprint it reports.
func TestServedFingerprint(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	var seen string
	conn, err := tls.Dial("tcp", strings.TrimPrefix(b.base, "https://"), &tls.Config{InsecureSkipVerify: true, //nolint:gosec // pinned below
		VerifyConnection: func(cs tls.ConnectionState) error { seen = Fingerprint(cs.PeerCertificates[0].Raw); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if seen == "" || seen != b.srv.Fingerprint() {
		t.Fatalf("served %s, reported %s", seen, b.srv.Fingerprint())
	}
}

type fakeACME struct{}

func (fakeACME) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return nil, fmt.Errorf("no network in tests")
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	mem := newMemStore(time.Now)
	k, _ := secrets.GenerateKey()
	sealer, _ := secrets.NewSealer(k)
	deps := Deps{Requests: mem, Sealer: sealer}
	dir := t.TempDir()
	certDir := filepath.Join(dir, "files")
	if _, _, err := SelfSigned(certDir, []string{"secrets.example.com"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name string
		cfg  Config
		deps Deps
		want string
	}{
		{"no public url", Config{TLS: TLSConfig{Mode: TLSSelfSigned, Dir: dir}}, deps, "public_url is required"},
		{"http public url", Config{PublicURL: "http://127.0.0.1:8443", TLS: TLSConfig{Mode: TLSSelfSigned, Dir: dir}}, deps, "must be https"},
		{"public url with path", Config{PublicURL: "https://example.com/x"}, deps, "no path"},
		{"public url with credentials", Config{PublicURL: "https://u:p@example.com"}, deps, "credentials"},
		{"self-signed on a public name", Config{PublicURL: "https://secrets.example.com", TLS: TLSConfig{Mode: TLSSelfSigned, Dir: dir}}, deps, "loopback development only"},
		{"self-signed on all interfaces", Config{Listen: ":8443", PublicURL: "https://127.0.0.1:8443", TLS: TLSConfig{Dir: dir}}, deps, "must listen on a loopback"},
		{"acme without manager", Config{PublicURL: "https://secrets.example.com", TLS: TLSConfig{Mode: TLSACME}}, deps, "Deps.ACME"},
		{"acme on loopback", Config{PublicURL: "https://127.0.0.1", TLS: TLSConfig{Mode: TLSACME}}, Deps{Requests: mem, Sealer: sealer, ACME: fakeACME{}}, "public DNS name"},
		{"files missing", Config{PublicURL: "https://secrets.example.com", TLS: TLSConfig{Mode: TLSFiles}}, deps, "cert_file and tls.key_file"},
		{"no mode for a public name", Config{PublicURL: "https://secrets.example.com"}, deps, "unknown tls mode"},
		{"short csrf key", Config{PublicURL: "https://127.0.0.1:8443", CSRFKey: []byte("short"), TLS: TLSConfig{Dir: dir}}, deps, "CSRF key"},
		{"no store", Config{PublicURL: "https://127.0.0.1:8443"}, Deps{Sealer: sealer}, "required"},
	}
	for _, c := range bad {
		if _, err := New(c.cfg, c.deps); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}

	// ACME: the manager's certificates and the TLS-ALPN-01 protocol.
	s, err := New(Config{PublicURL: "https://secrets.example.com", TLS: TLSConfig{Mode: TLSACME}}, Deps{Requests: mem, Sealer: sealer, ACME: fakeACME{}})
	if err != nil {
		t.Fatal(err)
	}
	if tc := s.TLSConfig(); tc.GetCertificate == nil || !strings.Contains(strings.Join(tc.NextProtos, ","), "acme-tls/1") || tc.MinVersion != tls.VersionTLS12 {
		t.Fatalf("acme tls config: %+v", tc.NextProtos)
	}
	// Files, with the key's permissions checked.
	files := Config{PublicURL: "https://secrets.example.com", TLS: TLSConfig{Mode: TLSFiles,
		CertFile: filepath.Join(certDir, "cert.pem"), KeyFile: filepath.Join(certDir, "key.pem")}}
	if s, err := New(files, deps); err != nil || s.Fingerprint() != "" {
		t.Fatalf("files: %v", err)
	}
	os.Chmod(files.TLS.KeyFile, 0o640) //nolint:errcheck
	if _, err := New(files, deps); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("readable key accepted: %v", err)
	}
	// Loopback public URL defaults to self-signed.
	s, err = New(Config{PublicURL: "https://127.0.0.1:8443", TLS: TLSConfig{Dir: filepath.Join(dir, "auto")}}, deps)
	if err != nil || s.Fingerprint() == "" {
		t.Fatalf("default self-signed: %v", err)
	}
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.srv.Serve(ctx, ln) }()
	c := b.browser()
	if r := b.get(t, c, "https://"+ln.Addr().String()+"/static/secrets.css"); r.status != http.StatusOK {
		t.Fatal(r.status)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}
