package secretsweb

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core/secrets"
)

// TestSelfSignedListenAny: self-signed mode listens on a wildcard address
// only with the explicit opt-in (a container whose port is published on
// the host's loopback), never on a particular non-loopback address and
// never for a non-loopback public URL.
func TestSelfSignedListenAny(t *testing.T) {
	t.Parallel()
	k, _ := secrets.GenerateKey()
	sealer, _ := secrets.NewSealer(k)
	deps := Deps{Requests: newMemStore(time.Now), Sealer: sealer}
	dir := t.TempDir()
	cases := []struct {
		name   string
		listen string
		public string
		any    bool
		want   string // "" = accepted
	}{
		{"0.0.0.0 without opt-in", "0.0.0.0:8443", "https://127.0.0.1:8443", false, "set secrets_web.tls.self_signed_listen_any"},
		{"[::] without opt-in", "[::]:8443", "https://127.0.0.1:8443", false, "must listen on a loopback"},
		{"0.0.0.0 with opt-in", "0.0.0.0:8443", "https://127.0.0.1:8443", true, ""},
		{"[::] with opt-in", "[::]:8443", "https://127.0.0.1:8443", true, ""},
		{":8443 with opt-in", ":8443", "https://localhost:8443", true, ""},
		{"loopback with opt-in", "127.0.0.1:8443", "https://127.0.0.1:8443", true, ""},
		{"one interface with opt-in", "192.0.2.1:8443", "https://127.0.0.1:8443", true, "loopback or a wildcard address"},
		{"public url with opt-in", "0.0.0.0:8443", "https://secrets.example.com", true, "loopback development only"},
		{"public ip url with opt-in", "0.0.0.0:8443", "https://192.0.2.1:8443", true, "loopback development only"},
	}
	for _, c := range cases {
		cfg := Config{Listen: c.listen, PublicURL: c.public,
			TLS: TLSConfig{Mode: TLSSelfSigned, Dir: filepath.Join(dir, strings.NewReplacer(" ", "-", ":", "", "[", "", "]", "").Replace(c.name)), SelfSignedListenAny: c.any}}
		s, err := New(cfg, deps)
		switch {
		case c.want == "" && (err != nil || s.Fingerprint() == ""):
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestSelfSignedListenAnyHostCheck: on a wildcard listener the Host check
// stays as strict as on loopback: PublicURL's host and loopback names are
// served, any other name (DNS rebinding, or a name of this machine on the
// network) is answered 421.
func TestSelfSignedListenAnyHostCheck(t *testing.T) {
	t.Parallel()
	k, _ := secrets.GenerateKey()
	sealer, _ := secrets.NewSealer(k)
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skipf("cannot listen on 0.0.0.0: %v", err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	cfg := Config{Listen: ln.Addr().String(), PublicURL: "https://127.0.0.1:" + port,
		TLS: TLSConfig{Mode: TLSSelfSigned, Dir: t.TempDir(), SelfSignedListenAny: true}}
	s, err := New(cfg, Deps{Requests: newMemStore(time.Now), Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	roots := x509.NewCertPool()
	roots.AddCert(s.tlsConfig.Certificates[0].Leaf)
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	for _, tc := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:" + port, http.StatusOK},
		{"localhost:" + port, http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
		{"evil.example:" + port, http.StatusMisdirectedRequest},
		{"evil.example", http.StatusMisdirectedRequest},
		{"192.0.2.1:" + port, http.StatusMisdirectedRequest},
	} {
		req, err := http.NewRequest(http.MethodGet, "https://127.0.0.1:"+port+"/static/secrets.css", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Host %s: %d, want %d", tc.host, resp.StatusCode, tc.want)
		}
	}
}
