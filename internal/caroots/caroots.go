// Package caroots gives the binary CA roots to verify HTTPS with on a host
// or image that has none: Mozilla's roots (golang.org/x/crypto/x509roots),
// used only when the system offers none. The system's roots win when it has
// any (the ca-certificates package, which the container image installs), and
// SSL_CERT_FILE / SSL_CERT_DIR replace the system's (crypto/x509), which is
// how an operator adds a private CA (a proxy, an internal model server):
// docs/deploy.md. GODEBUG=x509usefallbackroots=1 forces the embedded set.
//
// It must never add roots of its own or turn verification off.
package caroots

import (
	"crypto/x509"
	"encoding/pem"
	"sync"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

var once sync.Once

// Install makes the embedded roots crypto/x509's fallback. main calls it,
// not an init function: parsing the roots costs milliseconds, which the
// sandbox's init (the same binary, re-executed for every run, which never
// reaches main) should not pay. Calls after the first do nothing.
func Install() {
	once.Do(func() { x509.SetFallbackRoots(pool()) })
}

// pool holds the embedded roots the way crypto/x509 holds the system's:
// as DER, parsed again only when a verification needs that root. Parsed
// certificates kept 437 kB of heap for as long as the process made no TLS
// connection (crypto/x509 keeps the fallback until its first
// verification), three times that in the collector's goal; this way 195
// kB (BENCHMARKS.md "Issue 26 — RSS"). A root with a constraint the
// certificate cannot carry (a distrust date) is added parsed, with it.
func pool() *x509.CertPool {
	p := x509.NewCertPool()
	for c := range bundle.Roots() {
		if c.Constraint == nil {
			p.AppendCertsFromPEM(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate}))
			continue
		}
		cert, err := x509.ParseCertificate(c.Certificate)
		if err != nil {
			continue // the bundle is generated from parsed certificates; skip rather than stop the gateway
		}
		p.AddCertWithConstraint(cert, c.Constraint)
	}
	return p
}
