//go:build whatsappfake

package whatsapp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"go.mau.fi/whatsmeow"
)

// Test builds only (`go build -tags whatsappfake`; never a release):
// WHATSAPPTEST_FAKE_SERVER="<addr> <root key> <certificate>" (base64 of
// the 32-byte root key and of the DER certificate) points NewClient's
// clients at adapters/whatsapp/whatsapptest's fake server — its noise
// certificate root instead of WhatsApp's, its TLS certificate, its
// address — so cmd/silas tests run the real binary against it. A binary
// built without the tag has no such variable and pins WhatsApp's keys.
func init() {
	v := os.Getenv("WHATSAPPTEST_FAKE_SERVER")
	if v == "" {
		return
	}
	f := strings.Fields(v)
	if len(f) != 3 {
		panic("WHATSAPPTEST_FAKE_SERVER: want <addr> <root key> <certificate>")
	}
	root, err1 := base64.StdEncoding.DecodeString(f[1])
	der, err2 := base64.StdEncoding.DecodeString(f[2])
	cert, err3 := x509.ParseCertificate(der)
	if err1 != nil || err2 != nil || err3 != nil || len(root) != 32 {
		panic(fmt.Sprintf("WHATSAPPTEST_FAKE_SERVER: %v %v %v", err1, err2, err3))
	}
	whatsmeow.WACertPubKey = [32]byte(root)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	addr := f[0]
	hc := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com", MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	testHTTPClient = hc
}
