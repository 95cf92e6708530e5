package main

import (
	"debug/buildinfo"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHTTPSTrustsSSLCertFile: the real binary's HTTPS clients (here the
// Telegram check of `silas doctor`) verify a server against the CA given
// the documented way, SSL_CERT_FILE (docs/deploy.md), on a system with no
// other roots (SSL_CERT_DIR empty, as in an image without ca-certificates);
// without it the same call fails on the certificate. Everything stays on
// this host: the Bot API is a local TLS server.
func TestHTTPSTrustsSSLCertFile(t *testing.T) {
	t.Parallel()
	const token = "123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghi"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/bot" + token + "/getMe":
			w.Write([]byte(`{"ok":true,"result":{"id":42,"is_bot":true,"first_name":"Silas","username":"tls_fake_bot"}}`))
		case "/bot" + token + "/getWebhookInfo":
			w.Write([]byte(`{"ok":true,"result":{"url":"","pending_update_count":0}}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"ok":false,"error_code":404,"description":"Not Found"}`))
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	noRoots := filepath.Join(dir, "no-roots")
	if err := os.Mkdir(noRoots, 0o755); err != nil {
		t.Fatal(err)
	}
	doctor := func(certFile string) string {
		cmd := exec.Command(silasBin, "doctor", "--timeout", "10s")
		// Only what the check needs: no database configured (doctor
		// then opens none), Telegram pointed at the local server.
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "SILAS_DATA_DIR=" + filepath.Join(dir, "data"),
			"SILAS_TELEGRAM_ENABLED=true", "SILAS_TELEGRAM_TOKEN=" + token, "SILAS_TELEGRAM_BASE_URL=" + srv.URL,
			"SSL_CERT_FILE=" + certFile, "SSL_CERT_DIR=" + noRoots}
		out, _ := cmd.CombinedOutput() // exit status 1: no database is a problem too
		return string(out)
	}
	if out := doctor(ca); !strings.Contains(out, "✓ token        the token belongs to @tls_fake_bot") {
		t.Errorf("with SSL_CERT_FILE naming the CA, the HTTPS call did not succeed:\n%s", out)
	}
	if out := doctor(filepath.Join(dir, "absent.pem")); !strings.Contains(out, "could not reach the Bot API") || !strings.Contains(out, "certificate") {
		t.Errorf("without the CA the HTTPS call did not fail on the certificate:\n%s", out)
	}
}

// TestBinaryEmbedsFallbackRoots: the binary carries CA roots of its own for
// a system without any (internal/caroots; main installs them).
func TestBinaryEmbedsFallbackRoots(t *testing.T) {
	t.Parallel()
	bi, err := buildinfo.ReadFile(silasBin)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range bi.Deps {
		if d.Path == "golang.org/x/crypto/x509roots/fallback" {
			return
		}
	}
	t.Fatalf("the binary does not include golang.org/x/crypto/x509roots/fallback")
}
