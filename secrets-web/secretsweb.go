// Package secretsweb is the secure form: a small HTTPS service where a user
// types a credential that Silas asked for with `/secret <name>`. The chat
// only ever carries a link (/secrets/{ref}?t=<token>); the value goes from
// the browser straight to this service, is sealed (AES-256-GCM, see
// core/secrets) and stored as ciphertext. It never passes through a chat
// platform, the agent, a log line or the audit log.
//
// The service:
//   - serves only over TLS (certificate files, ACME, or a self-signed
//     certificate for loopback development) and refuses any request that
//     did not arrive over TLS;
//   - answers GET with the form (unknown ref or wrong token → 404, used
//     link → 409, expired → 410) and never consumes the link on GET, so
//     chat link previews cannot burn it;
//   - accepts POST only with the link token and a CSRF token bound to the
//     request, the token and a cookie of this browser; stores the sealed
//     value with a compare-and-swap that makes the link single-use, and
//     answers with a confirmation that carries nothing derived from the
//     value (no echo, hash or length);
//   - sends strict headers (CSP without any script, HSTS, no-referrer,
//     frame-ancestors 'none', no-store, nosniff) and rate-limits per client
//     address and per request.
//
// It must never log, echo or store a submitted value, the link token or
// the CSRF token; logs carry the request ref and the secret's name.
package secretsweb

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/internal/httpserve"
)

// Config configures the service. Zero fields take the defaults noted.
type Config struct {
	// Listen is the TCP address ListenAndServe listens on with TLS
	// (default "127.0.0.1:8443").
	Listen string
	// PublicURL is the https:// base URL links point at, as users' browsers
	// reach the service: "https://secrets.example.com" or, for loopback
	// development, "https://127.0.0.1:8443". Required; no path.
	PublicURL string
	// TLS selects the certificate.
	TLS TLSConfig
	// MaxValueBytes bounds a submitted value (default 16 KiB); a larger one
	// is answered 413.
	MaxValueBytes int
	// PerClient limits requests per client IP (IPv6: per /64); default
	// 30 at once, then one every 2 s.
	PerClient RateLimit
	// PerRequest limits requests per request ref; default 10 at once,
	// then one every 30 s.
	PerRequest RateLimit
	// CSRFKey keys the CSRF tokens (at least 32 bytes). Default: random per
	// process, so a form opened before a restart must be reloaded.
	CSRFKey []byte
	// ShutdownGrace bounds the graceful shutdown in Serve (default 10 s).
	ShutdownGrace time.Duration
	// Limits are the listener's timeouts, header size and connection cap
	// (zero fields: 10s header, 30s read, 30s write, 60s idle, 16 KiB of
	// headers, 512 connections).
	Limits httpserve.Limits
	// AllowedHosts are extra Host values a loopback listener (or a
	// self-signed one on a wildcard address, TLSConfig.SelfSignedListenAny)
	// serves besides loopback names and PublicURL's host (DNS rebinding).
	AllowedHosts []string
}

// RequestStore reads and fulfils secure-input requests. *store.Store
// implements it.
type RequestStore interface {
	// GetSecretRequest returns core.ErrNotFound for an unknown ref.
	GetSecretRequest(ctx context.Context, ref string) (secrets.Request, error)
	// FulfillSecret stores ciphertext if ref is pending, unexpired and
	// tokenHash matches (compare-and-swap), and says what happened.
	FulfillSecret(ctx context.Context, ref string, tokenHash, ciphertext []byte) (secrets.Outcome, secrets.Request, error)
}

// Sealer seals a value for a secret name (*secrets.Sealer).
type Sealer interface {
	Seal(name string, value []byte) ([]byte, error)
}

// Deps are the service's collaborators.
type Deps struct {
	Requests RequestStore
	Sealer   Sealer
	// OnStored runs after a value was stored (committed), with the request
	// (never the value): the gateway updates the chat card ("github_token
	// stored ✓"). Optional. Its context outlives the HTTP request by at
	// most 10 s.
	OnStored func(ctx context.Context, req secrets.Request)
	Logger   *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// ACME supplies certificates in TLS mode "acme".
	ACME CertificateSource
	// Passkeys answers the passkey pages (/passkey/enroll/…,
	// /passkey/stepup/…; core/stepup). Optional: nil serves none.
	Passkeys Passkeys
	// Previews answers the preview pages of long approval previews
	// (/preview/…); nil: none.
	Previews PreviewSource
}

// Server is the secure-form service.
type Server struct {
	cfg         Config
	deps        Deps
	log         *slog.Logger
	now         func() time.Time
	base        *url.URL
	tlsConfig   *tls.Config
	fingerprint string
	csrfKey     []byte
	perClient   *limiter
	perRequest  *limiter
	origin      *http.CrossOriginProtection
	handler     http.Handler
	qr          qrPages
}

// Defaults.
const (
	DefaultListen        = "127.0.0.1:8443"
	DefaultMaxValueBytes = 16 << 10
)

// New checks cfg, prepares TLS (generating the self-signed certificate if
// that mode is chosen) and builds the handler.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Requests == nil || deps.Sealer == nil {
		return nil, errors.New("secretsweb: Deps.Requests and Deps.Sealer are required")
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.MaxValueBytes <= 0 {
		cfg.MaxValueBytes = DefaultMaxValueBytes
	}
	if cfg.PerClient.Burst <= 0 || cfg.PerClient.Every <= 0 {
		cfg.PerClient = RateLimit{Burst: 30, Every: 2 * time.Second}
	}
	if cfg.PerRequest.Burst <= 0 || cfg.PerRequest.Every <= 0 {
		cfg.PerRequest = RateLimit{Burst: 10, Every: 30 * time.Second}
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	base, err := parsePublicURL(cfg.PublicURL)
	if err != nil {
		return nil, err
	}
	if cfg.TLS.Mode == "" && isLoopbackHost(base.Hostname()) {
		cfg.TLS.Mode = TLSSelfSigned
	}
	s := &Server{cfg: cfg, deps: deps, log: deps.Logger, now: deps.Now, base: base,
		perClient: newLimiter(cfg.PerClient, 100_000), perRequest: newLimiter(cfg.PerRequest, 100_000),
		origin: http.NewCrossOriginProtection()}
	switch {
	case cfg.CSRFKey == nil:
		s.csrfKey = make([]byte, 32)
		if _, err := rand.Read(s.csrfKey); err != nil {
			return nil, fmt.Errorf("secretsweb: csrf key: %w", err)
		}
	case len(cfg.CSRFKey) < 32:
		return nil, errors.New("secretsweb: the CSRF key must be at least 32 bytes")
	default:
		s.csrfKey = append([]byte(nil), cfg.CSRFKey...)
	}
	if err := s.origin.AddTrustedOrigin(base.Scheme + "://" + base.Host); err != nil {
		return nil, fmt.Errorf("secretsweb: public url: %w", err)
	}
	if err := s.setupTLS(deps.ACME); err != nil {
		return nil, err
	}
	s.handler = s.routes()
	return s, nil
}

func parsePublicURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("secretsweb: public_url is required (e.g. https://secrets.example.com)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("secretsweb: public_url: %w", err)
	}
	if u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Trim(u.Path, "/") != "" {
		return nil, fmt.Errorf("secretsweb: public_url %q must be https://host[:port] with no path, query or credentials", raw)
	}
	u.Path = ""
	return u, nil
}

// Link is the URL of the form for request ref with its link token: what the
// secure-input card's button opens.
func (s *Server) Link(ref, token string) string {
	return s.base.String() + "/secrets/" + url.PathEscape(ref) + "?t=" + url.QueryEscape(token)
}

// Fingerprint is the SHA-256 fingerprint of the self-signed certificate
// (AB:CD:…), or "" in the other TLS modes. Print it for the operator.
func (s *Server) Fingerprint() string { return s.fingerprint }

// TLSConfig is the server's TLS configuration (a clone).
func (s *Server) TLSConfig() *tls.Config { return s.tlsConfig.Clone() }

// Handler serves the routes. It refuses requests that did not arrive over
// TLS, so mounting it behind a plain-HTTP listener fails closed.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves HTTPS on ln (a plain TCP listener; Serve wraps it in TLS)
// until ctx ends, then shuts down gracefully within ShutdownGrace.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// net/http adjusts the TLS config it serves with (HTTP/2 set-up): give
	// each Serve its own.
	tc := s.tlsConfig.Clone()
	l := s.cfg.Limits
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = 30 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 60 * time.Second
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 16 << 10
	}
	l = l.WithDefaults()
	// A loopback listener answers only Host names of this machine and of
	// the public URL (DNS rebinding).
	hosts := append([]string{s.base.Host, s.base.Hostname()}, s.cfg.AllowedHosts...)
	srv := httpserve.NewServer(httpserve.HostCheck(s.handler, s.hostCheckAddr(ln.Addr()), hosts...), l)
	srv.TLSConfig = tc
	// Handshake failures and the like, without request data.
	srv.ErrorLog = slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)
	ln = httpserve.LimitListener(ln, l.MaxConns)
	done := make(chan struct{})
	shut := make(chan error, 1)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			shut <- nil
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
		defer cancel()
		shut <- srv.Shutdown(sctx)
	}()
	s.log.Info("secure form serving", slog.String("address", ln.Addr().String()), slog.String("public_url", s.base.String()),
		slog.String("tls", s.cfg.TLS.Mode))
	err := srv.Serve(tls.NewListener(ln, tc))
	close(done)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if serr := <-shut; err == nil && serr != nil {
		err = fmt.Errorf("secretsweb: shutdown: %w", serr)
	}
	return err
}

// hostCheckAddr is the listen address the Host check is built for. A
// self-signed listener on a wildcard address (SelfSignedListenAny) is
// reached through the host's loopback, so it is checked as the loopback
// listener on its port it stands in for: Host must be a loopback name or
// PublicURL's host, never a name that merely resolves to this machine.
func (s *Server) hostCheckAddr(addr net.Addr) string {
	a := addr.String()
	h, port, err := net.SplitHostPort(a)
	if s.cfg.TLS.Mode == TLSSelfSigned && (err != nil || !isLoopbackHost(h)) {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return a
}

// ListenAndServe listens on Config.Listen and calls Serve.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("secretsweb: listen %s: %w", s.cfg.Listen, err)
	}
	return s.Serve(ctx, ln)
}
