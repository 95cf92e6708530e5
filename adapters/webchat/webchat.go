// Package webchat is the local web chat channel: a small HTML/CSS/JS page
// served by the gateway and a WebSocket carrying the protocol documented in
// docs/webchat-protocol.md. It implements core.Channel like every platform
// adapter, so the whole product can be tried without any platform token.
//
// Authentication: the gateway prints a one-time login secret; exchanging it
// at POST /login yields an HttpOnly, SameSite=Strict session cookie. The
// WebSocket requires that cookie and a same-origin Origin header. Turns carry
// evidence "webchat-session"; trust is decided by the core.
package webchat

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/silas-gateway/silas/core"
)

//go:embed static
var staticFiles embed.FS

// OutputSource serves stored long outputs.
type OutputSource interface {
	GetOutput(ctx context.Context, ref string) (string, error)
}

// Config configures the adapter.
type Config struct {
	// Name is the channel name (default "webchat").
	Name core.ChannelName
	// Identity is who a logged-in browser speaks as (default
	// "webchat:local"); the owner list in config decides its trust.
	Identity core.IdentityID
	// SessionTTL bounds a login (default 30 days).
	SessionTTL time.Duration
	// History is how many recent messages are replayed on connect (200).
	History int
	Outputs OutputSource
	Logger  *slog.Logger
	Now     func() time.Time
}

// Adapter is the web chat channel.
type Adapter struct {
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	conv   core.ConversationID
	static http.Handler

	mu       sync.Mutex
	inbox    core.Inbox
	secrets  map[[32]byte]time.Time // login secret hash → expiry (one-time)
	sessions map[[32]byte]time.Time // session token hash → expiry
	clients  map[*client]struct{}
	history  []*entry
	byID     map[string]*entry
	ctx      context.Context
}

type entry struct {
	frame messageFrame
}

var _ core.Channel = (*Adapter)(nil)

// New builds the adapter.
func New(cfg Config) (*Adapter, error) {
	if cfg.Name == "" {
		cfg.Name = "webchat"
	}
	if cfg.Identity == "" {
		cfg.Identity = "webchat:local"
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 30 * 24 * time.Hour
	}
	if cfg.History <= 0 {
		cfg.History = 200
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	_, user, _ := strings.Cut(string(cfg.Identity), ":")
	return &Adapter{
		cfg: cfg, log: cfg.Logger.With(slog.String("channel", string(cfg.Name))), now: cfg.Now,
		conv:     core.ConversationID(string(cfg.Name) + ":" + user),
		static:   http.FileServerFS(sub),
		secrets:  map[[32]byte]time.Time{},
		sessions: map[[32]byte]time.Time{},
		clients:  map[*client]struct{}{},
		byID:     map[string]*entry{},
	}, nil
}

// Name implements core.Channel.
func (a *Adapter) Name() core.ChannelName { return a.cfg.Name }

// Conversation is the conversation the logged-in identity talks in.
func (a *Adapter) Conversation() core.ConversationID { return a.conv }

// NewLoginSecret mints a one-time login secret valid for ttl. Only its hash
// is kept; print it once and forget it.
func (a *Adapter) NewLoginSecret(ttl time.Duration) string {
	s := randomToken()
	a.mu.Lock()
	a.secrets[sha256.Sum256([]byte(s))] = a.now().Add(ttl)
	a.mu.Unlock()
	return s
}

func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("webchat: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Run implements core.Channel: it accepts WebSocket turns until ctx ends,
// then closes every connection.
func (a *Adapter) Run(ctx context.Context, in core.Inbox) error {
	a.mu.Lock()
	a.inbox, a.ctx = in, ctx
	a.mu.Unlock()
	<-ctx.Done()
	a.mu.Lock()
	a.inbox = nil
	cl := make([]*client, 0, len(a.clients))
	for c := range a.clients {
		cl = append(cl, c)
	}
	a.mu.Unlock()
	for _, c := range cl {
		c.close(websocket.StatusGoingAway, "gateway shutting down")
	}
	return nil
}

// Send implements core.Channel: the message joins the transcript and is
// pushed to every connected browser. A browser that is not connected gets
// it in the replay when it connects, so nothing is lost while it is away.
func (a *Adapter) Send(_ context.Context, m core.OutMessage) (core.MessageRef, error) {
	if m.Card != nil {
		if err := m.Card.Validate(); err != nil {
			return "", &core.PermanentError{Err: fmt.Errorf("webchat: %w", err)}
		}
	}
	id := "m-" + core.NewID()[:16]
	e := &entry{frame: messageFrame{Type: "message", MessageID: id, Text: m.Text, Card: m.Card, At: a.now().UTC().Format(time.RFC3339)}}
	a.mu.Lock()
	a.history = append(a.history, e)
	a.byID[id] = e
	if len(a.history) > a.cfg.History {
		old := a.history[0]
		a.history = a.history[1:]
		delete(a.byID, old.frame.MessageID)
	}
	a.broadcastLocked(e.frame)
	a.mu.Unlock()
	return core.MessageRef(id), nil
}

// Update implements core.Channel: replace a message in place.
func (a *Adapter) Update(_ context.Context, ref core.MessageRef, m core.OutMessage) error {
	if m.Card != nil {
		if err := m.Card.Validate(); err != nil {
			return &core.PermanentError{Err: fmt.Errorf("webchat: %w", err)}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	f := messageFrame{Type: "update", MessageID: string(ref), Text: m.Text, Card: m.Card}
	if e, ok := a.byID[string(ref)]; ok {
		e.frame.Text, e.frame.Card = m.Text, m.Card
	}
	// Pushed even when the message left the transcript: the page shows an
	// update for an unknown message as a new one.
	a.broadcastLocked(f)
	return nil
}

func (a *Adapter) broadcastLocked(f messageFrame) {
	b, err := json.Marshal(f)
	if err != nil {
		a.log.Error("marshal frame", slog.Any("err", err))
		return
	}
	for c := range a.clients {
		c.push(b)
	}
}

// ServeHTTP routes the page, login, session, outputs and the WebSocket.
func (a *Adapter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	switch {
	case r.URL.Path == "/ws":
		a.serveWS(w, r)
	case r.URL.Path == "/login":
		a.serveLogin(w, r)
	case r.URL.Path == "/session":
		if r.Method != http.MethodGet {
			httpError(w, http.StatusMethodNotAllowed, "use GET")
			return
		}
		if !a.authorized(r) {
			httpError(w, http.StatusUnauthorized, "not logged in")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"identity": string(a.cfg.Identity), "conversation": string(a.conv)})
	case strings.HasPrefix(r.URL.Path, "/outputs/"):
		a.serveOutput(w, r)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		if r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/static/") || r.URL.Path == "/index.html" {
			h.Set("Cache-Control", "no-cache")
			p := strings.TrimPrefix(r.URL.Path, "/static")
			r2 := r.Clone(r.Context())
			r2.URL.Path = p
			a.static.ServeHTTP(w, r2)
			return
		}
		http.NotFound(w, r)
	default:
		httpError(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

const cookieName = "silas_session"

func (a *Adapter) serveLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		httpError(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		// A JSON content type cannot be sent cross-site without a CORS
		// preflight, which this server never grants.
		httpError(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		return
	}
	var body struct {
		Secret string `json:"secret"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&body); err != nil || body.Secret == "" {
		httpError(w, http.StatusBadRequest, "body must be {\"secret\": \"…\"}")
		return
	}
	h := sha256.Sum256([]byte(body.Secret))
	now := a.now()
	a.mu.Lock()
	var ok bool
	for k, exp := range a.secrets {
		if subtle.ConstantTimeCompare(k[:], h[:]) == 1 && now.Before(exp) {
			ok = true
		}
		if !now.Before(exp) {
			delete(a.secrets, k)
		}
	}
	if ok {
		delete(a.secrets, h) // one-time
	}
	var token string
	if ok {
		token = randomToken()
		a.sessions[sha256.Sum256([]byte(token))] = now.Add(a.cfg.SessionTTL)
	}
	a.mu.Unlock()
	if !ok {
		a.log.Warn("web chat login refused", slog.String("remote", r.RemoteAddr))
		httpError(w, http.StatusUnauthorized, "unknown, used or expired login secret")
		return
	}
	a.log.Info("web chat login", slog.String("remote", r.RemoteAddr))
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, Expires: now.Add(a.cfg.SessionTTL)})
	w.WriteHeader(http.StatusNoContent)
}

func (a *Adapter) authorized(r *http.Request) bool {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return false
	}
	h := sha256.Sum256([]byte(c.Value))
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.sessions[h]
	if ok && !a.now().Before(exp) {
		delete(a.sessions, h)
		return false
	}
	return ok
}

func (a *Adapter) serveOutput(w http.ResponseWriter, r *http.Request) {
	if !a.authorized(r) {
		httpError(w, http.StatusUnauthorized, "not logged in")
		return
	}
	ref := strings.TrimPrefix(r.URL.Path, "/outputs/")
	if a.cfg.Outputs == nil || !clientIDRe.MatchString(ref) {
		http.NotFound(w, r)
		return
	}
	out, err := a.cfg.Outputs.GetOutput(r.Context(), ref)
	if errors.Is(err, core.ErrNotFound) {
		http.NotFound(w, r)
		return
	}
	if err != nil {
		a.log.Error("read stored output", slog.String("ref", ref), slog.Any("err", err))
		httpError(w, http.StatusInternalServerError, "could not read the output")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	io.WriteString(w, out) //nolint:errcheck // client went away
}

func httpError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // client went away
}
