package mcpclient_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/adapters/mcpclient"
	"github.com/silas-gateway/silas/core/sandbox"
)

// copyTo copies the test binary (the fake server when envFake is set) to
// path, executable by the sandbox's unprivileged user.
func copyTo(t *testing.T, path string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// sysDir is a directory inside a system dir the sandbox shows (the
// fake server's binary must be visible in it), removed afterwards.
func sysDir(t *testing.T, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("/opt", prefix)
	if err != nil {
		t.Skipf("no directory inside /opt for the fake server: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// A stdio server runs inside the sandbox, spoken to through its pipes: its
// tools work, the data directory's keys are not there for it (readable
// by anyone outside the sandbox, so only the sandbox stops it), and each
// new session is a fresh process.
func TestStdioServerInTheSandbox(t *testing.T) {
	bin := sysDir(t, "silas-mcptest-")
	copyTo(t, filepath.Join(bin, "fake-mcp"))
	visible := filepath.Join(bin, "visible.txt")
	if err := os.WriteFile(visible, []byte("anyone may read this"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := sysDir(t, "silas-mcptest-data-")
	keys := filepath.Join(data, "keys")
	if err := os.Mkdir(keys, 0o755); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(keys, "gateway.key")
	if err := os.WriteFile(key, []byte("PRIVATE KEY BYTES"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: filepath.Join(t.TempDir(), "base"), HiddenPaths: []string{data}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	if err := sb.Available(); err != nil {
		t.Skipf("no sandbox here: %v", err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := mcpclient.New([]mcpclient.Server{{Name: "files", Command: filepath.Join(bin, "fake-mcp"), Env: map[string]string{envFake: "1"}}},
		mcpclient.Options{Sandbox: sb, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := t.Context()
	read := func(path string) (string, bool) {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"path": path})
		res, err := c.CallTool(ctx, "files", "read", args)
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		return res.Text, res.IsError
	}
	for i := range 4 { // a first session, then three reconnects
		defs, err := c.ListTools(ctx, "files")
		if err != nil || len(defs) != 2 {
			t.Fatalf("session %d: %d tools, %v", i+1, len(defs), err)
		}
		if text, isErr := read(visible); isErr || text != "anyone may read this" {
			t.Fatalf("session %d: reading a visible file: %q (error %v)", i+1, text, isErr)
		}
		text, isErr := read(key)
		if !isErr || strings.Contains(text, "PRIVATE") {
			t.Fatalf("session %d: the server read the data dir's key: %q", i+1, text)
		}
		c.Close() // ends the server's sandbox run; the next use starts a fresh one
	}
}
