package caroots

import (
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// TestFallbackWithoutSystemRoots: on a system without CA roots (what
// SSL_CERT_FILE and SSL_CERT_DIR pointing nowhere look like to crypto/x509,
// and what a slim image without ca-certificates is) the pool HTTPS verifies
// against is the embedded set, not empty. It runs in a child process:
// crypto/x509 loads the system roots once per process.
func TestFallbackWithoutSystemRoots(t *testing.T) {
	if os.Getenv("CAROOTS_PROBE") == "1" {
		Install()
		Install() // a second call is harmless
		pool, err := x509.SystemCertPool()
		fmt.Printf("empty=%v err=%v\n", err != nil || pool.Equal(x509.NewCertPool()), err)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFallbackWithoutSystemRoots$", "-test.count=1", "-test.v")
	missing := t.TempDir() + "/none"
	cmd.Env = append(os.Environ(), "CAROOTS_PROBE=1", "SSL_CERT_FILE="+missing, "SSL_CERT_DIR="+missing, "GODEBUG=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "empty=false err=<nil>") {
		t.Fatalf("without system roots the pool is empty or fails:\n%s", out)
	}
}

// TestPoolHoldsTheBundle: the lazily parsed pool holds every root of the
// bundle, the constrained ones included — the same set as parsing each.
func TestPoolHoldsTheBundle(t *testing.T) {
	want := x509.NewCertPool()
	n := 0
	for c := range bundle.Roots() {
		cert, err := x509.ParseCertificate(c.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		want.AddCertWithConstraint(cert, c.Constraint)
		n++
	}
	if n == 0 {
		t.Fatal("the bundle is empty")
	}
	if !pool().Equal(want) {
		t.Fatal("the pool does not hold the bundle's roots")
	}
}
