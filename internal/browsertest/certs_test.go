package browsertest_test

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/silas-gateway/silas/internal/browsertest"
)

// tlsPage is an HTTPS server with httptest's self-signed certificate.
func tlsPage(t *testing.T) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(`<!doctype html><title>tls</title><link rel="icon" href="data:,"><p id="p">over tls</p>`))
	}))
	// The refused handshake of the default case is expected: keep it out
	// of the test output.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

// TestIgnoreCertificateErrors: with the option, a self-signed certificate
// loads; without it (New), the same page is refused.
func TestIgnoreCertificateErrors(t *testing.T) {
	t.Run("option", func(t *testing.T) {
		ctx := browsertest.NewWith(t, browsertest.IgnoreCertificateErrors())
		u := tlsPage(t)
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		resp, err := chromedp.Run(tctx, chromedp.NavigateResponse(u))
		if err != nil || resp.Status != http.StatusOK {
			t.Fatalf("navigate with IgnoreCertificateErrors: %v %v", err, resp)
		}
		if txt, err := chromedp.Run(tctx, chromedp.Text(chromedp.ID("p"))); err != nil || txt != "over tls" {
			t.Fatalf("text = %q, %v", txt, err)
		}
	})
	t.Run("default", func(t *testing.T) {
		ctx := browsertest.New(t)
		u := tlsPage(t)
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if resp, err := chromedp.Run(tctx, chromedp.NavigateResponse(u)); err == nil {
			t.Fatalf("New accepted a self-signed certificate: %v", resp.Status)
		}
	})
}
