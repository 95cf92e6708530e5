package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/doctor"
	"github.com/silas-gateway/silas/internal/testenv"
)

// The database and audit block without a database: the database is
// skipped, and an audit key that cannot be read is a problem doctor's exit
// status counts, not only a ✗ on the screen.
func TestDoctorDatabaseBlock(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	fs := doctorDatabase(context.Background(), cfg)
	if len(fs) != 2 || fs[0].Check != "database" || fs[0].Severity != doctor.Info || fs[1].Check != "audit key" || fs[1].Severity != doctor.Info {
		t.Fatalf("no database, no key yet: %+v", fs)
	}
	if err := os.MkdirAll(filepath.Dir(auditKeyPath(cfg)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(auditKeyPath(cfg), []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if n := doctor.Print(&out, doctorDatabase(context.Background(), cfg)); n != 1 || !strings.Contains(out.String(), "✗ audit key") {
		t.Fatalf("unreadable audit key: %d problem(s)\n%s", n, out.String())
	}
}

// A check added to sandboxChecks (the network helper's) is printed in the
// sandbox block after the isolation.
func TestDoctorSandboxChecks(t *testing.T) { // not parallel: it changes sandboxChecks
	saved := sandboxChecks
	t.Cleanup(func() { sandboxChecks = saved })
	sandboxChecks = append(sandboxChecks[:len(sandboxChecks):len(sandboxChecks)],
		func(_ *config.Config, sc sandbox.Config, _ *sandbox.Subprocess) []doctor.Finding {
			return []doctor.Finding{{Severity: doctor.Warn, Check: "extra", Message: "base " + sc.BaseDir}}
		})
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	fs := doctorSandbox(cfg, "")
	if len(fs) == 1 && (fs[0].Check == "setup" || fs[0].Check == "config") {
		testenv.Missing(t, "the sandbox cannot be built here: %s", fs[0].Message)
	}
	last := fs[len(fs)-1]
	if len(fs) < 2 || last.Check != "extra" || last.Message != "base "+filepath.Join(cfg.DataDir, "sandbox") {
		t.Fatalf("findings: %+v", fs)
	}
}

// TestDoctorSecureFormListenAny: doctor warns (without failing) when the
// self-signed form may listen on a wildcard address, and says nothing
// otherwise.
func TestDoctorSecureFormListenAny(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	if f := doctorSecureForm(cfg); f != nil {
		t.Fatalf("default config: %+v", f)
	}
	cfg.SecretsWeb.Listen, cfg.SecretsWeb.TLS.SelfSignedListenAny = "0.0.0.0:8443", true
	f := doctorSecureForm(cfg)
	if len(f) != 1 || f[0].Severity != doctor.Warn || !strings.Contains(f[0].Message, "127.0.0.1:8443:8443") {
		t.Fatalf("listen any: %+v", f)
	}
}
