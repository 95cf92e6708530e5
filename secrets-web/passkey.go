package secretsweb

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"log/slog"
	"mime"
	"net/http"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/stepup"
)

// The passkey pages (core/stepup): GET /passkey/enroll/{ref}?t= registers
// a passkey, GET /passkey/stepup/{ref}?t= confirms an irreversible action
// with one. Unlike the secret form they need script (WebAuthn is a browser
// API): passkey.js from this origin only, posting the browser's answer as
// JSON to the page's own path. GET never uses a link up; a POST uses it
// whatever it finds, and the gateway verifies everything.

//go:embed templates/passkey.html static/passkey.js
var passkeyAssets embed.FS

var passkeyPage = template.Must(template.ParseFS(passkeyAssets, "templates/passkey.html"))

// passkeyCSP is contentSecurityPolicy plus this origin's script and
// fetches.
const passkeyCSP = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"base-uri 'none'; frame-ancestors 'none'"

// Passkeys answers the passkey pages (*stepup.Service).
type Passkeys interface {
	EnrollPage(ctx context.Context, ref, token string) (stepup.EnrollView, error)
	FinishEnroll(ctx context.Context, ref, token string, body []byte) error
	StepUpPage(ctx context.Context, ref, token string) (stepup.StepUpView, error)
	FinishStepUp(ctx context.Context, ref, token string, body []byte) error
}

// maxPasskeyBody bounds a posted WebAuthn answer (a few KiB in practice).
const maxPasskeyBody = 64 << 10

type passkeyData struct {
	Title, Kind, Button         string
	Ref, Token, CSRF, Expires   string
	Owner, Name                 string
	Approval, Intent, Command   string
	Risk, Rationale, HashPrefix string
	Options                     template.JS
}

func (s *Server) passkeyRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+stepup.EnrollPath+"{ref}", s.passkeyForm("enroll"))
	mux.HandleFunc("POST "+stepup.EnrollPath+"{ref}", s.passkeySubmit("enroll"))
	mux.HandleFunc("GET "+stepup.StepUpPath+"{ref}", s.passkeyForm("stepup"))
	mux.HandleFunc("POST "+stepup.StepUpPath+"{ref}", s.passkeySubmit("stepup"))
	mux.HandleFunc("GET /static/passkey.js", func(w http.ResponseWriter, _ *http.Request) {
		b, err := passkeyAssets.ReadFile("static/passkey.js")
		if err != nil {
			http.Error(w, "missing", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Write(b) //nolint:errcheck // the client went away
	})
}

// linkError answers a link that cannot be used (404/409/410), a request
// no longer open or altered; false when err is none of those.
func (s *Server) linkError(w http.ResponseWriter, err error) bool {
	switch {
	case errors.Is(err, stepup.ErrLinkNotFound), errors.Is(err, core.ErrNotFound):
		s.message(w, http.StatusNotFound, "Link not valid", "This link is not valid.")
	case errors.Is(err, stepup.ErrLinkUsed):
		s.message(w, http.StatusConflict, "Link already used", "This link was already used. Tap the card in the chat again for a new one.")
	case errors.Is(err, stepup.ErrLinkExpired):
		s.message(w, http.StatusGone, "Link expired", "This link has expired. Tap the card in the chat again for a new one.")
	case errors.Is(err, stepup.ErrClosed):
		s.message(w, http.StatusGone, "Already decided", "This request was decided or expired meanwhile: nothing more to confirm.")
	case errors.Is(err, stepup.ErrAltered):
		s.message(w, http.StatusConflict, "Request altered", "This request was changed after it was proposed and cannot be confirmed. Nothing was run.")
	default:
		return false
	}
	return true
}

func (s *Server) passkeyForm(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ref, ok := s.admit(w, r)
		if !ok {
			return
		}
		token := r.URL.Query().Get("t")
		if token == "" || len(token) > maxTokenLen {
			s.notFound(w)
			return
		}
		d := passkeyData{Kind: kind, Ref: ref, Token: token}
		var expires time.Time
		var opts []byte
		if kind == "enroll" {
			v, err := s.deps.Passkeys.EnrollPage(r.Context(), ref, token)
			if s.passkeyFailed(w, ref, err) {
				return
			}
			d.Title, d.Button, d.Owner, d.Name = "Register a passkey", "Register passkey", v.Owner, v.Name
			expires, opts = v.ExpiresAt, v.Options
		} else {
			v, err := s.deps.Passkeys.StepUpPage(r.Context(), ref, token)
			if s.passkeyFailed(w, ref, err) {
				return
			}
			d.Title, d.Button = "Confirm with passkey", "Confirm with passkey"
			d.Approval, d.Intent, d.Command, d.Risk, d.Rationale, d.HashPrefix = v.Approval, v.Intent, v.Command, v.Risk, v.Rationale, v.HashPrefix
			expires, opts = v.ExpiresAt, v.Options
		}
		nonce, err := newNonce()
		if err != nil {
			s.message(w, http.StatusInternalServerError, "Something went wrong", "Try again in a moment.")
			return
		}
		http.SetCookie(w, &http.Cookie{
			Name: csrfCookie(ref), Value: nonce, Path: "/", MaxAge: max(1, int(expires.Sub(s.now()).Seconds())),
			Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		})
		// json.Marshal escaped <, > and &: the block cannot end the script.
		d.CSRF, d.Expires, d.Options = s.csrfToken(ref, token, nonce), expires.UTC().Format("15:04 MST, 2 Jan"), template.JS(opts)
		s.log.Info("secure form: passkey page opened", slog.String("ref", ref), slog.String("kind", kind))
		w.Header().Set("Content-Security-Policy", passkeyCSP)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		if err := passkeyPage.Execute(w, d); err != nil {
			s.log.Error("secure form: render passkey page", slog.Any("error", err))
		}
	}
}

// passkeyFailed answers a page that cannot be shown; false when err is nil.
func (s *Server) passkeyFailed(w http.ResponseWriter, ref string, err error) bool {
	if err == nil {
		return false
	}
	if !s.linkError(w, err) {
		var rf *stepup.Refusal
		if errors.As(err, &rf) {
			s.message(w, http.StatusConflict, "Cannot confirm", rf.Message)
			return true
		}
		s.log.Error("secure form: passkey page", slog.String("ref", ref), slog.Any("error", err))
		s.message(w, http.StatusInternalServerError, "Something went wrong", "Silas could not read this link. Try again in a moment.")
	}
	return true
}

type passkeyPost struct {
	Token      string          `json:"t"`
	CSRF       string          `json:"csrf"`
	Credential json.RawMessage `json:"credential"`
}

type passkeyAnswer struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
}

func (s *Server) passkeyJSON(w http.ResponseWriter, status int, ok bool, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(passkeyAnswer{OK: ok, Message: msg}) //nolint:errcheck // the client went away
}

func (s *Server) passkeySubmit(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ref, ok := s.admit(w, r)
		if !ok {
			return
		}
		if err := s.origin.Check(r); err != nil {
			s.log.Warn("secure form: cross-origin passkey post refused", slog.String("ref", ref), slog.String("remote", clientKey(r.RemoteAddr)))
			s.passkeyJSON(w, http.StatusForbidden, false, "This answer must be sent from its own page.")
			return
		}
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			s.passkeyJSON(w, http.StatusUnsupportedMediaType, false, "Send the answer from its page.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxPasskeyBody)
		var p passkeyPost
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Token == "" || len(p.Token) > maxTokenLen || len(p.Credential) == 0 {
			s.passkeyJSON(w, http.StatusBadRequest, false, "The answer could not be read. Open the link again.")
			return
		}
		cookie, err := r.Cookie(csrfCookie(ref))
		if err != nil || !s.csrfValid(ref, p.Token, cookie.Value, p.CSRF) {
			s.log.Warn("secure form: missing or bad csrf token", slog.String("ref", ref), slog.String("remote", clientKey(r.RemoteAddr)))
			s.passkeyJSON(w, http.StatusForbidden, false, "This page expired in your browser. Open the link from the chat again.")
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 15*time.Second)
		defer cancel()
		done := "Passkey registered. You can close this page."
		if kind == "enroll" {
			err = s.deps.Passkeys.FinishEnroll(ctx, ref, p.Token, p.Credential)
		} else {
			err = s.deps.Passkeys.FinishStepUp(ctx, ref, p.Token, p.Credential)
			done = "Confirmed: it runs now. The card in the chat shows the result; you can close this page."
		}
		var rf *stepup.Refusal
		switch {
		case err == nil:
			s.passkeyJSON(w, http.StatusOK, true, done)
		case errors.As(err, &rf):
			status := http.StatusForbidden
			switch rf.Reason {
			case "link_not_found":
				status = http.StatusNotFound
			case "link_used":
				status = http.StatusConflict
			case "link_expired":
				status = http.StatusGone
			}
			s.passkeyJSON(w, status, false, rf.Message)
		case errors.Is(err, stepup.ErrBadResponse):
			s.passkeyJSON(w, http.StatusBadRequest, false, "Your browser's answer could not be read. Nothing was "+map[string]string{"enroll": "registered", "stepup": "run"}[kind]+".")
		default:
			s.log.Error("secure form: passkey", slog.String("ref", ref), slog.String("kind", kind), slog.Any("error", err))
			s.passkeyJSON(w, http.StatusInternalServerError, false, "Something went wrong. Try again in a moment.")
		}
	}
}
