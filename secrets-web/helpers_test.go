package secretsweb

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var _ RequestStore = (*store.Store)(nil)

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

// clock is a settable clock shared by the store and the service.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// memStore is an in-memory RequestStore for tests that need no database.
type memStore struct {
	mu      sync.Mutex
	reqs    map[string]secrets.Request
	secrets map[string][]byte
	now     func() time.Time
}

func newMemStore(now func() time.Time) *memStore {
	return &memStore{reqs: map[string]secrets.Request{}, secrets: map[string][]byte{}, now: now}
}

func (m *memStore) GetSecretRequest(_ context.Context, ref string) (secrets.Request, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reqs[ref]
	if !ok {
		return r, core.ErrNotFound
	}
	return r, nil
}

func (m *memStore) FulfillSecret(_ context.Context, ref string, tokenHash, ct []byte) (secrets.Outcome, secrets.Request, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.reqs[ref]
	switch {
	case !ok:
		return secrets.OutcomeNotFound, secrets.Request{}, nil
	case !bytes.Equal(r.TokenHash, tokenHash):
		return secrets.OutcomeWrongToken, secrets.Request{}, nil
	case r.StateAt(m.now()) == secrets.StatusFulfilled:
		return secrets.OutcomeAlreadyFulfilled, r, nil
	case r.StateAt(m.now()) == secrets.StatusExpired:
		return secrets.OutcomeExpired, r, nil
	}
	r.Status = secrets.StatusFulfilled
	m.reqs[ref] = r
	m.secrets[r.Name] = ct
	return secrets.OutcomeStored, r, nil
}

// bundle is one running service with a browser-like client.
type bundle struct {
	srv      *Server
	base     string
	logs     *syncBuffer
	clock    *clock
	sealer   *secrets.Sealer
	mem      *memStore    // when running without a database
	db       *store.Store // when running with one
	roots    *x509.CertPool
	stored   chan secrets.Request
	mu       sync.Mutex
	bodies   []string // every response body read through the bundle
	canaries []string // values that must never show up in logs or bodies
}

type option func(*Config, *Deps)

// setup starts the service on a loopback TLS listener with a self-signed
// certificate; withDB backs it with a migrated PostgreSQL store.
func setup(t *testing.T, withDB bool, opts ...option) *bundle {
	t.Helper()
	b := &bundle{logs: &syncBuffer{}, clock: &clock{t: time.Now().UTC().Truncate(time.Second)}, stored: make(chan secrets.Request, 16)}
	log := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	k, err := secrets.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if b.sealer, err = secrets.NewSealer(k); err != nil {
		t.Fatal(err)
	}
	var reqs RequestStore
	if withDB {
		dsn := storetest.NewDatabase(t)
		b.db, err = store.Open(context.Background(), dsn, store.Options{Logger: log, Now: b.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.db.Close)
		reqs = b.db
	} else {
		b.mem = newMemStore(b.clock.Now)
		reqs = b.mem
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Listen: ln.Addr().String(), PublicURL: "https://" + ln.Addr().String(), TLS: TLSConfig{Mode: TLSSelfSigned, Dir: t.TempDir()}}
	deps := Deps{Requests: reqs, Sealer: b.sealer, Logger: log, Now: b.clock.Now,
		OnStored: func(_ context.Context, r secrets.Request) { b.stored <- r }}
	for _, o := range opts {
		o(&cfg, &deps)
	}
	b.srv, err = New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	b.base = cfg.PublicURL
	b.roots = x509.NewCertPool()
	b.roots.AddCert(b.srv.tlsConfig.Certificates[0].Leaf)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		b.checkCanaries(t)
	})
	return b
}

// browser is an HTTP client with its own cookie jar, trusting the
// service's certificate.
func (b *bundle) browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 20 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.roots}, ForceAttemptHTTP2: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type response struct {
	status int
	header http.Header
	body   string
}

func (b *bundle) do(t *testing.T, c *http.Client, req *http.Request) response {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.bodies = append(b.bodies, string(body))
	for k, vs := range resp.Header {
		b.bodies = append(b.bodies, k+": "+strings.Join(vs, ", "))
	}
	b.mu.Unlock()
	return response{resp.StatusCode, resp.Header, string(body)}
}

func (b *bundle) get(t *testing.T, c *http.Client, u string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b.do(t, c, req)
}

func (b *bundle) post(t *testing.T, c *http.Client, ref string, form url.Values, edit ...func(*http.Request)) response {
	t.Helper()
	if v := form.Get("value"); v != "" {
		b.canary(v)
	}
	req, err := http.NewRequest(http.MethodPost, b.base+"/secrets/"+ref, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, e := range edit {
		e(req)
	}
	return b.do(t, c, req)
}

// canary registers a value that must appear in no log line and no response.
func (b *bundle) canary(v string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.canaries = append(b.canaries, v)
}

func (b *bundle) checkCanaries(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	logs := b.logs.String()
	for _, c := range b.canaries {
		if strings.Contains(logs, c) {
			t.Errorf("a submitted value appears in the log output")
		}
		for _, body := range b.bodies {
			if strings.Contains(body, c) {
				t.Errorf("a submitted value appears in a response")
			}
		}
	}
}

// request creates a pending request (in the database or in memory) and
// returns it with its link token.
func (b *bundle) request(t *testing.T, name string, ttl time.Duration) (secrets.Request, string) {
	t.Helper()
	r, tok, err := secrets.NewRequest(secrets.Request{Name: name, Label: "Token for " + name, Hint: "Paste the token from settings.",
		Requester: "webchat:local", Conversation: "webchat:local", Channel: "webchat"}, b.clock.Now(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	b.insert(t, r)
	return r, tok
}

func (b *bundle) insert(t *testing.T, r secrets.Request) {
	t.Helper()
	if b.db != nil {
		if err := b.db.Do(t.Context(), func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			return tx.InsertSecretRequest(ctx, r)
		}); err != nil {
			t.Fatal(err)
		}
		return
	}
	b.mem.mu.Lock()
	b.mem.reqs[r.Ref] = r
	b.mem.mu.Unlock()
}

var (
	csrfField  = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	tokenField = regexp.MustCompile(`name="t" value="([^"]+)"`)
)

// openForm GETs the link and returns the form's fields.
func (b *bundle) openForm(t *testing.T, c *http.Client, ref, token string) url.Values {
	t.Helper()
	resp := b.get(t, c, b.srv.Link(ref, token))
	if resp.status != http.StatusOK {
		t.Fatalf("GET form: %d %s", resp.status, resp.body)
	}
	cm, tm := csrfField.FindStringSubmatch(resp.body), tokenField.FindStringSubmatch(resp.body)
	if cm == nil || tm == nil {
		t.Fatalf("form fields missing: %s", resp.body)
	}
	return url.Values{"csrf": {cm[1]}, "t": {tm[1]}}
}

func withValue(f url.Values, v string) url.Values {
	g := url.Values{}
	for k, vs := range f {
		g[k] = append([]string(nil), vs...)
	}
	g.Set("value", v)
	return g
}

func (b *bundle) openSecret(t *testing.T, name string) (string, error) {
	t.Helper()
	var ct []byte
	var err error
	if b.db != nil {
		ct, err = b.db.SecretCiphertext(t.Context(), name)
	} else {
		b.mem.mu.Lock()
		var ok bool
		if ct, ok = b.mem.secrets[name]; !ok {
			err = core.ErrNotFound
		}
		b.mem.mu.Unlock()
	}
	if err != nil {
		return "", err
	}
	v, err := b.sealer.Open(name, ct)
	if err != nil {
		return "", errors.New("does not open")
	}
	return string(v), nil
}
