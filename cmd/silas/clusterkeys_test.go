package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/internal/storetest"
)

// refusedServe runs serve expecting it to refuse to start; it returns what
// it wrote to stderr.
func refusedServe(t *testing.T, dsn, dataDir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, silasBin, "serve")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn, "SILAS_DATA_DIR="+dataDir, "SILAS_CONFIG=", "SILAS_HTTP_LISTEN=127.0.0.1:0",
		"SILAS_SECRETS_WEB_ENABLED=false")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("serve did not refuse to start:\n%s", out)
	}
	if err == nil {
		t.Fatalf("serve exited 0:\n%s", out)
	}
	return string(out)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// One identity for the cluster: the first serve records its keys'
// fingerprints; an instance with other keys refuses to start and names
// each key that differs and what to do; with the cluster's files it
// starts; `silas keys forget` accepts a key replaced on purpose.
func TestServeRefusesKeysOtherThanTheClusters(t *testing.T) {
	t.Parallel() // servers of their own on a database of their own
	dsn := storetest.NewDatabase(t)
	first := t.TempDir()
	startServer(t, dsn, first).stop()
	// The audit key rotated as docs/operations.md says (stop, move the
	// key away, start; audit.pub keeps the old public key): accepted, and
	// the new key is the cluster's from then on.
	if err := os.Rename(filepath.Join(first, "audit", "audit.key"), filepath.Join(t.TempDir(), "old-audit.key")); err != nil {
		t.Fatal(err)
	}
	startServer(t, dsn, first).stop()

	other := t.TempDir()
	out := refusedServe(t, dsn, other)
	for _, want := range []string{"gateway signing key (" + filepath.Join(other, "keys", "gateway.key"), "secrets data key", "audit signing key",
		"silas keys forget signing", "Give this instance the cluster's files"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the refusal does not say %q:\n%s", want, out)
		}
	}

	// The cluster's secrets and audit keys, its own signing key: only the
	// signing key is named.
	copyFile(t, filepath.Join(first, "keys", "secrets.key"), filepath.Join(other, "keys", "secrets.key"))
	for _, f := range []string{"audit.key", "audit.pub", "entry.key"} {
		copyFile(t, filepath.Join(first, "audit", f), filepath.Join(other, "audit", f))
	}
	out = refusedServe(t, dsn, other)
	if !strings.Contains(out, "gateway signing key") || strings.Contains(out, "secrets data key") || strings.Contains(out, "audit signing key") ||
		strings.Contains(out, "audit entry key") {
		t.Fatalf("the refusal should name the signing key only:\n%s", out)
	}

	// With the cluster's signing key too, it starts.
	copyFile(t, filepath.Join(first, "keys", "gateway.key"), filepath.Join(other, "keys", "gateway.key"))
	startServer(t, dsn, other).stop()

	// A signing key replaced on purpose: forgotten, then the next start
	// records it, and the old key is the one refused.
	replaced := t.TempDir()
	for _, f := range []string{"keys/secrets.key", "audit/audit.key", "audit/audit.pub", "audit/entry.key"} {
		copyFile(t, filepath.Join(first, f), filepath.Join(replaced, f))
	}
	if code, out, errOut := silasIn(t, dsn, replaced, "keys", "forget", "signing"); code != 0 || !strings.Contains(out, "forgot") {
		t.Fatalf("keys forget: %d\n%s\n%s", code, out, errOut)
	}
	startServer(t, dsn, replaced).stop()
	if out := refusedServe(t, dsn, first); !strings.Contains(out, "gateway signing key") {
		t.Fatalf("the replaced key was accepted:\n%s", out)
	}
}
