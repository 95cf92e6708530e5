package secretsweb

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/secrets"
)

//go:embed static/secrets.css templates/page.html
var assets embed.FS

var page = template.Must(template.ParseFS(assets, "templates/page.html"))

// contentSecurityPolicy allows no script at all, styles and images from
// this origin only, form posts to this origin only, and no framing.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"base-uri 'none'; frame-ancestors 'none'"

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /secrets/{ref}", s.form)
	mux.HandleFunc("POST /secrets/{ref}", s.submit)
	mux.HandleFunc("GET /static/secrets.css", s.css)
	mux.HandleFunc("GET /qr/{token}", s.qrHTML)
	mux.HandleFunc("GET /qr/{token}/code.png", s.qrPNG)
	if s.deps.Passkeys != nil {
		s.passkeyRoutes(mux)
	}
	if s.deps.Previews != nil {
		mux.HandleFunc("GET /preview/{id}", s.preview)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.message(w, http.StatusNotFound, "Not found", "This page does not exist.")
	})
	return s.guard(mux)
}

// guard runs first on every request: strict headers, TLS only, per-client
// rate limit.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("Strict-Transport-Security", "max-age=63072000; includeSubDomains")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), interest-cohort=()")
		if r.TLS == nil {
			s.log.Warn("secure form: refused a request without TLS", slog.String("remote", clientKey(r.RemoteAddr)))
			http.Error(w, "The secure form is only served over HTTPS.", http.StatusForbidden)
			return
		}
		if ok, wait := s.perClient.allow(clientKey(r.RemoteAddr), s.now()); !ok {
			s.tooMany(w, r, wait, "client")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) tooMany(w http.ResponseWriter, r *http.Request, wait time.Duration, scope string) {
	s.log.Warn("secure form: rate limited", slog.String("scope", scope), slog.String("remote", clientKey(r.RemoteAddr)))
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(wait.Round(time.Second)/time.Second))))
	s.message(w, http.StatusTooManyRequests, "Too many requests", "Too many attempts. Wait a little and try again.")
}

func (s *Server) css(w http.ResponseWriter, _ *http.Request) {
	b, err := assets.ReadFile("static/secrets.css")
	if err != nil {
		http.Error(w, "missing", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Write(b) //nolint:errcheck // the client went away
}

// validRef: refs are core.NewID values (26 lower-case base32 characters).
// Anything else is answered 404 without touching the store.
func validRef(ref string) bool {
	if len(ref) != 26 {
		return false
	}
	for i := 0; i < len(ref); i++ {
		c := ref[i]
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// maxTokenLen bounds a link token read from a request (NewToken makes 43).
const maxTokenLen = 128

type formData struct {
	Ref, Name, Label, Hint string
	Token, CSRF            string
	Expires                string
	Error                  string
	MaxLen                 int
}

type pageData struct {
	Title   string
	Message string
	Form    *formData
	// QR is a QR page's code; Refresh reloads the page every so many
	// seconds (0: never).
	QR      *qrData
	Refresh int
	// Preview is an approval request's whole preview (preview.go).
	Preview *previewData
}

func (s *Server) render(w http.ResponseWriter, status int, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := page.Execute(w, d); err != nil {
		s.log.Error("secure form: render", slog.Any("error", err))
	}
}

func (s *Server) message(w http.ResponseWriter, status int, title, msg string) {
	s.render(w, status, pageData{Title: title, Message: msg})
}

// The answers that depend on a request's state. Unknown refs and wrong
// tokens get the same 404, so a ref alone reveals nothing.
func (s *Server) notFound(w http.ResponseWriter) {
	s.message(w, http.StatusNotFound, "Link not valid", "This link is not valid. Ask Silas for a new one.")
}

func (s *Server) used(w http.ResponseWriter) {
	s.message(w, http.StatusConflict, "Link already used",
		"This link was already used. If that was not you, tell Silas: ask for a new link and the new value replaces the stored one.")
}

func (s *Server) expired(w http.ResponseWriter) {
	s.message(w, http.StatusGone, "Link expired", "This link has expired. Ask Silas for a new one.")
}

// lookup finds the request for ref and checks the token. It answers the
// request itself (404/409/410/500) and returns ok=false unless the request
// is pending.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, ref, token string) (secrets.Request, bool) {
	req, err := s.deps.Requests.GetSecretRequest(r.Context(), ref)
	if errors.Is(err, core.ErrNotFound) {
		s.log.Info("secure form: unknown request", slog.String("ref", ref), slog.String("remote", clientKey(r.RemoteAddr)))
		s.notFound(w)
		return req, false
	}
	if err != nil {
		s.log.Error("secure form: read request", slog.String("ref", ref), slog.Any("error", err))
		s.message(w, http.StatusInternalServerError, "Something went wrong", "Silas could not read this request. Try again in a moment.")
		return req, false
	}
	if !secrets.TokenMatches(req.TokenHash, token) {
		s.log.Warn("secure form: wrong link token", slog.String("ref", ref), slog.String("remote", clientKey(r.RemoteAddr)))
		s.notFound(w)
		return req, false
	}
	switch req.StateAt(s.now()) {
	case secrets.StatusPending:
		return req, true
	case secrets.StatusFulfilled:
		s.log.Info("secure form: link already used", slog.String("ref", ref), slog.String("name", req.Name))
		s.used(w)
	default:
		s.log.Info("secure form: link expired", slog.String("ref", ref), slog.String("name", req.Name))
		s.expired(w)
	}
	return req, false
}

// admit checks the request's ref and its per-request rate limit; when it
// reports false the answer was written.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (ref string, ok bool) {
	ref = r.PathValue("ref")
	if !validRef(ref) {
		s.notFound(w)
		return "", false
	}
	if ok, wait := s.perRequest.allow(ref, s.now()); !ok {
		s.tooMany(w, r, wait, "request")
		return "", false
	}
	return ref, true
}

// GET /secrets/{ref}?t=<token>: the form. It changes nothing but a CSRF
// cookie, so a link preview fetching it does not use the link up.
func (s *Server) form(w http.ResponseWriter, r *http.Request) {
	ref, ok := s.admit(w, r)
	if !ok {
		return
	}
	token := r.URL.Query().Get("t")
	if token == "" || len(token) > maxTokenLen {
		s.notFound(w)
		return
	}
	req, ok := s.lookup(w, r, ref, token)
	if !ok {
		return
	}
	nonce, err := newNonce()
	if err != nil {
		s.log.Error("secure form: csrf nonce", slog.Any("error", err))
		s.message(w, http.StatusInternalServerError, "Something went wrong", "Try again in a moment.")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: csrfCookie(ref), Value: nonce, Path: "/", MaxAge: max(1, int(req.ExpiresAt.Sub(s.now()).Seconds())),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
	s.log.Info("secure form: opened", slog.String("ref", ref), slog.String("name", req.Name))
	s.render(w, http.StatusOK, pageData{Title: "Enter " + req.Label, Form: s.formData(req, token, s.csrfToken(ref, token, nonce), "")})
}

func (s *Server) formData(req secrets.Request, token, csrf, errMsg string) *formData {
	return &formData{Ref: req.Ref, Name: req.Name, Label: req.Label, Hint: req.Hint, Token: token, CSRF: csrf,
		Expires: req.ExpiresAt.UTC().Format("15:04 MST, 2 Jan"), Error: errMsg, MaxLen: s.cfg.MaxValueBytes}
}

// POST /secrets/{ref}: t (link token), csrf, value.
func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	ref, ok := s.admit(w, r)
	if !ok {
		return
	}
	if err := s.origin.Check(r); err != nil {
		s.log.Warn("secure form: cross-origin post refused", slog.String("ref", ref), slog.String("remote", clientKey(r.RemoteAddr)))
		s.message(w, http.StatusForbidden, "Refused", "This form must be sent from its own page.")
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		s.message(w, http.StatusUnsupportedMediaType, "Unsupported", "Send the form from its page.")
		return
	}
	// URL-encoding can triple a value; the other fields are small.
	limit := int64(3*s.cfg.MaxValueBytes + 1024)
	if r.ContentLength > limit {
		s.tooLarge(w, ref)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			s.tooLarge(w, ref)
			return
		}
		s.message(w, http.StatusBadRequest, "Bad request", "The form could not be read. Open the link again.")
		return
	}
	token, csrf := r.PostForm.Get("t"), r.PostForm.Get("csrf")
	value := strings.TrimSpace(r.PostForm.Get("value"))
	r.PostForm, r.Form = nil, nil // nothing downstream reaches the value through r
	if len(value) > s.cfg.MaxValueBytes {
		s.tooLarge(w, ref)
		return
	}
	if token == "" || len(token) > maxTokenLen {
		s.notFound(w)
		return
	}
	cookie, err := r.Cookie(csrfCookie(ref))
	if err != nil || !s.csrfValid(ref, token, cookie.Value, csrf) {
		s.log.Warn("secure form: missing or bad csrf token", slog.String("ref", ref), slog.String("remote", clientKey(r.RemoteAddr)))
		s.message(w, http.StatusForbidden, "Refused", "This form expired in your browser. Open the link from the chat again.")
		return
	}
	req, ok := s.lookup(w, r, ref, token)
	if !ok {
		return
	}
	if value == "" {
		s.render(w, http.StatusBadRequest, pageData{Title: "Enter " + req.Label, Form: s.formData(req, token, csrf, "Enter a value.")})
		return
	}
	sealed, err := s.deps.Sealer.Seal(req.Name, []byte(value))
	if err != nil {
		s.log.Error("secure form: seal", slog.String("ref", ref), slog.String("name", req.Name), slog.Any("error", err))
		s.message(w, http.StatusInternalServerError, "Something went wrong", "Silas could not store the value. Nothing was saved.")
		return
	}
	out, stored, err := s.deps.Requests.FulfillSecret(r.Context(), ref, secrets.HashToken(token), sealed)
	if err != nil {
		s.log.Error("secure form: store", slog.String("ref", ref), slog.String("name", req.Name), slog.Any("error", err))
		s.message(w, http.StatusInternalServerError, "Something went wrong", "Silas could not store the value. Try again in a moment.")
		return
	}
	switch out {
	case secrets.OutcomeStored:
	case secrets.OutcomeAlreadyFulfilled:
		s.used(w)
		return
	case secrets.OutcomeExpired:
		s.expired(w)
		return
	default:
		s.notFound(w)
		return
	}
	s.log.Info("secure form: secret stored", slog.String("ref", ref), slog.String("name", stored.Name))
	if s.deps.OnStored != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		s.deps.OnStored(ctx, stored)
		cancel()
	}
	s.message(w, http.StatusOK, "Stored", "Saved securely as "+stored.Name+". You can close this page and go back to the chat.")
}

func (s *Server) tooLarge(w http.ResponseWriter, ref string) {
	s.log.Warn("secure form: value too large", slog.String("ref", ref))
	s.message(w, http.StatusRequestEntityTooLarge, "Too large",
		"That value is longer than "+strconv.Itoa(s.cfg.MaxValueBytes/1024)+" KiB. Nothing was saved.")
}

// CSRF. The form carries csrf = HMAC-SHA256(key, ref ‖ sha256(token) ‖
// nonce), where nonce is a random value the GET put in a __Host- cookie
// (Secure, HttpOnly, SameSite=Strict, scoped to this ref). A POST must
// bring the cookie and the matching field: a page on another site can
// neither read the field nor set a __Host- cookie, and a field lifted from
// one form does not fit another request, token or browser. The cookie
// name carries the ref so forms for two requests can be open at once.

func csrfCookie(ref string) string { return "__Host-silas-csrf-" + ref }

func newNonce() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func (s *Server) csrfToken(ref, token, nonce string) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte("silas/secrets-web/csrf/v1\x00"))
	m.Write([]byte(ref))
	m.Write([]byte{0})
	m.Write(secrets.HashToken(token))
	m.Write([]byte(nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s *Server) csrfValid(ref, token, nonce, csrf string) bool {
	if len(nonce) != 43 || csrf == "" {
		return false
	}
	return hmac.Equal([]byte(csrf), []byte(s.csrfToken(ref, token, nonce)))
}
