// Package webchat is the local web chat channel: a small HTML/CSS/JS page
// served by the gateway and a WebSocket carrying the protocol documented in
// docs/webchat-protocol.md. It implements core.Channel like every platform
// adapter, so the whole product can be tried without any platform token.
//
// Authentication: the gateway prints a one-time login secret; exchanging it
// at POST /login yields an HttpOnly, SameSite=Strict session cookie. The
// WebSocket requires that cookie and a same-origin Origin header. Turns carry
// evidence "webchat-session"; trust is decided by the core.
//
// History: the conversation a browser is shown on connect is read from the
// core's storage (HistoryReader: the stored turns and the outbox's messages
// in their newest state), never from this process's memory, so it survives
// restarts and includes edits made while nobody was connected.
package webchat

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/httpserve"
	"github.com/silas-gateway/silas/internal/lazyre"
)

//go:embed static
var staticFiles embed.FS

// OutputSource serves stored long outputs.
type OutputSource interface {
	GetOutput(ctx context.Context, ref string) (string, error)
}

// ConversationOutputSource is optionally implemented by an OutputSource that
// knows which conversation each output belongs to. When Config.Outputs
// implements it, GET /outputs/{ref} serves only outputs of the web chat's
// own conversation (404 otherwise), as docs/webchat-protocol.md §5 asks;
// a plain OutputSource relies on refs being unguessable.
type ConversationOutputSource interface {
	GetConversationOutput(ctx context.Context, conv core.ConversationID, ref string) (string, error)
}

// outputRefRe is the shape of a ref /outputs/ accepts (protocol §5).
var outputRefRe = lazyre.New(`^[A-Za-z0-9_-]{1,128}$`)

// Adapter is the web chat channel.
type Adapter struct {
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	conv   core.ConversationID
	static http.Handler
	// sess keeps logins and sessions: the database under serve
	// (Config.Sessions), else this process's memory.
	sess keeper
	// graphs draws a flow run's picture (SetFlowGraphs; nil: none).
	graphs atomic.Pointer[flowGraphs]

	mu      sync.Mutex
	inbox   core.Inbox
	clients map[*client]struct{}
	history []*entry
	byID    map[string]*entry
	ctx     context.Context

	loginLim, frameLim *httpserve.RateLimiter

	// queueSlack is how far beyond the replay a client may fall behind
	// (queueSlack by default; tests lower it).
	queueSlack int
}

type entry struct {
	frame messageFrame
}

var (
	_ core.Channel            = (*Adapter)(nil)
	_ core.CapabilityReporter = (*Adapter)(nil)
	_ core.KeyedSender        = (*Adapter)(nil)
	_ core.TapAnswerer        = (*Adapter)(nil)
	_ core.HealthReporter     = (*Adapter)(nil)
)

// Health reports the inbound state (core.HealthReporter): the web chat is
// served by this process, so it hears whenever it runs; the browsers
// connected now are its state. It has no platform to go deaf and is never
// judged deaf (no LastEvent).
func (a *Adapter) Health() core.ChannelHealth {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inbox == nil {
		return core.ChannelHealth{State: "not running"}
	}
	return core.ChannelHealth{Connected: true, State: fmt.Sprintf("serving; %d browser(s) connected", len(a.clients))}
}

// Capabilities implements core.CapabilityReporter: the page edits messages
// in place and shows cards with buttons; it has no fixed text limit
// (frames carry what fits in MaxFrameBytes and shorten the rest).
func (a *Adapter) Capabilities() core.Capabilities {
	return core.Capabilities{EditInPlace: true, Buttons: true}
}

// New builds the adapter.
func New(cfg Config) (*Adapter, error) {
	if cfg.Name == "" {
		cfg.Name = "webchat"
	}
	if cfg.Identity == "" {
		cfg.Identity = "webchat:local"
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.RevokePoll <= 0 {
		cfg.RevokePoll = 2 * time.Second
	}
	if cfg.LoginLimit.Burst <= 0 || cfg.LoginLimit.Every <= 0 {
		cfg.LoginLimit = RateLimit{Burst: 5, Every: 12 * time.Second}
	}
	if cfg.FrameLimit.Burst <= 0 || cfg.FrameLimit.Every <= 0 {
		cfg.FrameLimit = RateLimit{Burst: 30, Every: 100 * time.Millisecond}
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
	var sess keeper = newMemKeeper()
	if cfg.Sessions != nil {
		sess = dbKeeper{st: cfg.Sessions, ch: cfg.Name}
	}
	a := &Adapter{
		cfg: cfg, log: cfg.Logger.With(slog.String("channel", string(cfg.Name))), now: cfg.Now,
		conv:    core.ConversationID(string(cfg.Name) + ":" + user),
		static:  http.FileServerFS(sub),
		sess:    sess,
		clients: map[*client]struct{}{},
		byID:    map[string]*entry{},

		queueSlack: queueSlack,
		loginLim:   &httpserve.RateLimiter{Burst: cfg.LoginLimit.Burst, Every: cfg.LoginLimit.Every, MaxKeys: 10000},
		frameLim:   &httpserve.RateLimiter{Burst: cfg.FrameLimit.Burst, Every: cfg.FrameLimit.Every, MaxKeys: 10000},
	}
	if cfg.Peers != nil {
		cfg.Peers.Subscribe(cfg.Name, a.fromPeer)
	}
	return a, nil
}

// RateLimit is a token bucket: Burst at once, then one more every Every.
type RateLimit struct {
	Burst int
	Every time.Duration
}

// StateRevokedAt is the channel_state key `silas webchat revoke` sets.
const StateRevokedAt = "sessions_revoked_at"

// Name implements core.Channel.
func (a *Adapter) Name() core.ChannelName { return a.cfg.Name }

// Conversation is the conversation the logged-in identity talks in.
func (a *Adapter) Conversation() core.ConversationID { return a.conv }

// NewLoginSecret mints a one-time login secret valid for ttl. Only its hash
// is kept (with Config.Sessions, in the database: the link then works on
// every instance, once); print it once and forget it. A secret that could
// not be stored is logged and refused at login.
func (a *Adapter) NewLoginSecret(ttl time.Duration) string {
	s := randomToken()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.sess.addLogin(ctx, sha256.Sum256([]byte(s)), a.now().Add(ttl)); err != nil {
		a.log.Error("web chat: could not store the login secret; the printed link will not work (restart for a new one)", slog.Any("err", err))
	}
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
	go a.watchRevocations(ctx)
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

// Send implements core.Channel: the message is pushed to every connected
// browser. A browser that is not connected gets it in the replay when it
// connects, so nothing is lost while it is away: from Config.Transcript
// (the outbox job being delivered is already stored there), or, without
// one, from the in-memory transcript Send adds it to. The engine's outbox
// calls SendKeyed instead.
func (a *Adapter) Send(_ context.Context, m core.OutMessage) (core.MessageRef, error) {
	return a.send("m-"+core.NewID()[:16], m)
}

// SendKeyed implements core.KeyedSender: Send with the core's name of the
// message, so the live message has the id the replay gives it
// (botMessageID).
func (a *Adapter) SendKeyed(_ context.Context, key string, m core.OutMessage) (core.MessageRef, error) {
	return a.send(botMessageID(key), m)
}

func (a *Adapter) send(id string, m core.OutMessage) (core.MessageRef, error) {
	if m.Card != nil {
		if err := m.Card.Validate(); err != nil {
			return "", &core.PermanentError{Err: fmt.Errorf("webchat: %w", err)}
		}
	}
	e := &entry{frame: messageFrame{Type: "message", MessageID: id, From: fromBot, Text: m.Text, Card: m.Card, At: a.now().UTC().Format(time.RFC3339)}}
	a.mu.Lock()
	if a.cfg.Transcript == nil {
		a.history = append(a.history, e)
		a.byID[id] = e
		if len(a.history) > a.cfg.History {
			old := a.history[0]
			a.history = a.history[1:]
			delete(a.byID, old.frame.MessageID)
		}
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
	f := messageFrame{Type: "update", MessageID: string(ref), From: fromBot, Text: m.Text, Card: m.Card}
	if e, ok := a.byID[string(ref)]; ok {
		e.frame.Text, e.frame.Card = m.Text, m.Card
	}
	// Pushed even when the message left the transcript: the page shows an
	// update for an unknown message as a new one. Nobody connected is not
	// a failure: the edit is in the transcript the next connect replays
	// (with Config.Transcript it was stored before this call).
	a.broadcastLocked(f)
	return nil
}

func (a *Adapter) broadcastLocked(f messageFrame) {
	if len(a.clients) == 0 {
		return
	}
	b, err := encodeMessageFrame(f)
	if err != nil {
		a.log.Error("marshal frame", slog.Any("err", err))
		return
	}
	a.broadcastBytesLocked(b)
}

func (a *Adapter) broadcastBytesLocked(b []byte) {
	for c := range a.clients {
		c.push(b)
	}
	// The other instances' pages too: in order (one publisher), never
	// blocking the delivery that produced the frame.
	if a.cfg.Peers != nil {
		a.cfg.Peers.Publish(a.cfg.Name, b)
	}
}

// fromPeer pushes a frame another instance produced to this instance's
// sockets (not published again).
func (a *Adapter) fromPeer(b []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for c := range a.clients {
		c.push(b)
	}
}

// Security headers on every response (protocol §1). base-uri and
// form-action go beyond the documented minimum; the page needs neither.
const pageCSP = "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// outputCSP replaces pageCSP on /outputs/: stored output is hostile data and
// must never run, even if a browser were talked into rendering it as HTML.
const outputCSP = "default-src 'none'; sandbox"

// ServeHTTP routes the page, login, session, outputs and the WebSocket.
// Anything else is 404.
func (a *Adapter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	switch p := r.URL.Path; {
	case p == "/ws":
		a.serveWS(w, r)
	case p == "/login":
		a.serveLogin(w, r)
	case p == "/logout":
		a.serveLogout(w, r)
	case p == "/session":
		a.serveSession(w, r)
	case strings.HasPrefix(p, "/outputs/"):
		a.serveOutput(w, r)
	case strings.HasPrefix(p, "/flows/"):
		a.serveFlowGraph(w, r)
	case p == "/" || p == "/index.html" || strings.HasPrefix(p, "/static/"):
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, "GET, HEAD")
			return
		}
		h.Set("Cache-Control", "no-cache")
		r2 := r.Clone(r.Context())
		r2.URL.Path = strings.TrimPrefix(p, "/static")
		a.static.ServeHTTP(w, r2)
	default:
		httpError(w, http.StatusNotFound, "not found")
	}
}

func (a *Adapter) serveSession(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	if _, _, ok := a.authorize(w, r); !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"identity": string(a.cfg.Identity), "conversation": string(a.conv)})
}

// sameOrigin reports whether r's Origin header, when present, names the
// host r was sent to (the check coder/websocket's Accept does for /ws).
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, r.Host)
}

const cookieName = "silas_session"

func (a *Adapter) serveLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, "POST")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		// A JSON content type cannot be sent cross-site without a CORS
		// preflight, which this server never grants.
		httpError(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		return
	}
	if !sameOrigin(r) {
		httpError(w, http.StatusForbidden, "cross-origin login refused")
		return
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if !a.loginLim.Allow(host, a.now()) {
		w.Header().Set("Retry-After", strconv.Itoa(int(a.cfg.LoginLimit.Every.Seconds()+0.5)))
		httpError(w, http.StatusTooManyRequests, "too many login attempts; wait and retry")
		return
	}
	var body struct {
		Secret string `json:"secret"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil || body.Secret == "" {
		httpError(w, http.StatusBadRequest, "body must be {\"secret\": \"…\"}")
		return
	}
	now := a.now()
	token := randomToken()
	ok, err := a.sess.login(r.Context(), sha256.Sum256([]byte(body.Secret)), sha256.Sum256([]byte(token)), now, now.Add(a.cfg.SessionTTL))
	if err != nil {
		a.log.Error("web chat login: could not store the session", slog.Any("err", err))
		httpError(w, http.StatusServiceUnavailable, "the gateway could not store the session; retry")
		return
	}
	if !ok {
		a.log.Warn("web chat login refused", slog.String("remote", r.RemoteAddr))
		httpError(w, http.StatusUnauthorized, "unknown, used or expired login secret")
		return
	}
	a.log.Info("web chat login", slog.String("remote", r.RemoteAddr))
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, Expires: now.Add(a.cfg.SessionTTL)})
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// authorize returns the hash and expiry of r's valid session cookie, or
// answers 401 (no valid session) or 503 (the sessions cannot be read now:
// the page retries rather than asking to sign in again) and returns false.
func (a *Adapter) authorize(w http.ResponseWriter, r *http.Request) (hash [32]byte, exp time.Time, ok bool) {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		httpError(w, http.StatusUnauthorized, "not logged in")
		return hash, exp, false
	}
	hash = sha256.Sum256([]byte(c.Value))
	exp, ok, err = a.sess.session(r.Context(), hash, a.now())
	if err != nil {
		a.log.Error("web chat: could not read the session", slog.Any("err", err))
		httpError(w, http.StatusServiceUnavailable, "the gateway could not check the session; retry")
		return hash, exp, false
	}
	if !ok {
		httpError(w, http.StatusUnauthorized, "not logged in")
	}
	return hash, exp, ok
}

func (a *Adapter) serveOutput(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", outputCSP)
	w.Header().Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	if _, _, ok := a.authorize(w, r); !ok {
		return
	}
	ref := strings.TrimPrefix(r.URL.Path, "/outputs/")
	if a.cfg.Outputs == nil || !outputRefRe.MatchString(ref) {
		httpError(w, http.StatusNotFound, "no such output")
		return
	}
	var out string
	var err error
	if src, ok := a.cfg.Outputs.(ConversationOutputSource); ok {
		out, err = src.GetConversationOutput(r.Context(), a.conv, ref)
	} else {
		out, err = a.cfg.Outputs.GetOutput(r.Context(), ref)
	}
	if errors.Is(err, core.ErrNotFound) {
		httpError(w, http.StatusNotFound, "no such output")
		return
	}
	if errors.Is(err, core.ErrWithheld) {
		// The output of a run that received a secret: only the owner's tap
		// on the card /output sends shows it (then this page does too).
		httpError(w, http.StatusForbidden, "this is the output of a run that received a secret and may contain it in some encoding: "+
			"send /output "+ref+" in the chat, and the owner's tap on its card shows it")
		return
	}
	if err != nil {
		a.log.Error("read stored output", slog.String("ref", ref), slog.Any("err", err))
		httpError(w, http.StatusInternalServerError, "could not read the output")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", "inline")
	io.WriteString(w, out) //nolint:errcheck // client went away
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	httpError(w, http.StatusMethodNotAllowed, "method not allowed; use "+allow)
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
