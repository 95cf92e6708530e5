package secretsweb

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"rsc.io/qr"

	"github.com/silas-gateway/silas/core/secrets"
)

// QR pages: a one-time page of the secure form that shows a QR code which
// changes while the page is open — WhatsApp's device-link codes rotate
// every 20 s or so (`silas whatsapp link`). The page lives at
// /qr/<token>, where token is 32 random bytes that only the terminal of
// whoever started the link ever sees (only its SHA-256 is kept); anything
// else, and the page once closed, is 404. Scanning the code links a device
// to a WhatsApp account, so it is as sensitive as a credential: the page is
// served over TLS like the form, never cached (no-store), and carries no
// script (it reloads itself with a meta refresh, allowed by the CSP).

// QRRefresh is how often an open QR page reloads itself (seconds).
const QRRefresh = 3

// QRPage is one QR page. Its methods are safe for concurrent use.
type QRPage struct {
	s     *Server
	key   [32]byte
	title string
	steps string

	mu   sync.Mutex
	png  []byte
	seq  int
	done string
}

type qrPages struct {
	mu    sync.Mutex
	pages map[[32]byte]*QRPage
}

// NewQRPage opens a QR page titled title with steps telling what to do
// with the code, and returns it with its one-time URL (print it to the
// terminal only). Until SetCode it says the code is coming.
func (s *Server) NewQRPage(title, steps string) (*QRPage, string, error) {
	token, hash, err := secrets.NewToken()
	if err != nil {
		return nil, "", fmt.Errorf("secretsweb: qr page: %w", err)
	}
	p := &QRPage{s: s, key: [32]byte(hash), title: title, steps: steps}
	s.qr.mu.Lock()
	if s.qr.pages == nil {
		s.qr.pages = map[[32]byte]*QRPage{}
	}
	s.qr.pages[p.key] = p
	s.qr.mu.Unlock()
	return p, s.base.String() + "/qr/" + token, nil
}

// SetCode shows code (the text a QR code encodes) instead of the last one.
func (p *QRPage) SetCode(code string) error {
	c, err := qr.Encode(code, qr.L)
	if err != nil {
		return fmt.Errorf("secretsweb: qr code: %w", err)
	}
	c.Scale = 6
	png := c.PNG()
	p.mu.Lock()
	p.png, p.seq = png, p.seq+1
	p.mu.Unlock()
	return nil
}

// Done replaces the code with msg ("linked as +… ✓"): the page stops
// reloading and the image is gone.
func (p *QRPage) Done(msg string) {
	p.mu.Lock()
	p.done, p.png = msg, nil
	p.mu.Unlock()
}

// Close ends the page: its URL answers 404 from now on.
func (p *QRPage) Close() {
	p.s.qr.mu.Lock()
	delete(p.s.qr.pages, p.key)
	p.s.qr.mu.Unlock()
}

// qrPage finds the open page of the request's token (the token is looked
// up by its SHA-256, so its value never decides a comparison's timing).
func (s *Server) qrPage(r *http.Request) (*QRPage, bool) {
	token := r.PathValue("token")
	if token == "" || len(token) > maxTokenLen {
		return nil, false
	}
	key := sha256.Sum256([]byte(token))
	s.qr.mu.Lock()
	defer s.qr.mu.Unlock()
	p, ok := s.qr.pages[key]
	return p, ok
}

type qrData struct {
	Steps string
	Src   string
}

// GET /qr/{token}: the page.
func (s *Server) qrHTML(w http.ResponseWriter, r *http.Request) {
	p, ok := s.qrPage(r)
	if !ok {
		s.notFound(w)
		return
	}
	p.mu.Lock()
	done, seq, has := p.done, p.seq, p.png != nil
	p.mu.Unlock()
	switch {
	case done != "":
		s.render(w, http.StatusOK, pageData{Title: p.title, Message: done})
	case !has:
		s.render(w, http.StatusOK, pageData{Title: p.title, Message: "The code is on its way; this page reloads by itself.", Refresh: QRRefresh})
	default:
		s.render(w, http.StatusOK, pageData{Title: p.title, Refresh: QRRefresh,
			QR: &qrData{Steps: p.steps, Src: "/qr/" + r.PathValue("token") + "/code.png?n=" + strconv.Itoa(seq)}})
	}
}

// GET /qr/{token}/code.png: the current code.
func (s *Server) qrPNG(w http.ResponseWriter, r *http.Request) {
	p, ok := s.qrPage(r)
	if !ok {
		s.notFound(w)
		return
	}
	p.mu.Lock()
	png := p.png
	p.mu.Unlock()
	if png == nil {
		s.notFound(w)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(len(png)))
	w.Write(png) //nolint:errcheck // the client went away
}
