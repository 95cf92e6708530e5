package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/internal/pgtest"
)

// TestWhatsAppCLI runs `silas whatsapp …` through the binary on a fresh
// database: no device is linked, so status and doctor say what to do,
// unlink refuses, and link refuses a phone number not in international
// form before it would reach WhatsApp. (Linking itself talks to
// WhatsApp's servers and is not run here.)
func TestWhatsAppCLI(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		out, err string
	}{
		{"usage", []string{"whatsapp"}, 2, "", "whatsapp link"},
		{"status unlinked", []string{"whatsapp", "status"}, 1, "no device is linked: run `silas whatsapp link`", "1 problem"},
		{"unlink without a device", []string{"whatsapp", "unlink", "--forget"}, 1, "", "no device is linked"},
		{"link with a national number", []string{"whatsapp", "link", "--phone", "0151 2345678"}, 1, "", "international form"},
	}
	for _, tc := range tests {
		code, out, errOut := silas(t, dsn, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errOut, tc.err) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.name, code, out, errOut, tc.code, tc.out, tc.err)
		}
	}
	// doctor reports the missing link once whatsapp.enabled is set.
	if code, out, errOut := silas(t, dsn, "migrate"); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errOut)
	}
	code, out, _ := silasEnv(t, dsn, []string{"SILAS_WHATSAPP_ENABLED=true"}, "doctor")
	if code != 1 || !strings.Contains(out, "WhatsApp") || !strings.Contains(out, "no device is linked") {
		t.Errorf("doctor: exit %d\n%s", code, out)
	}
}

// silasEnv is silas with extra environment variables.
func silasEnv(t *testing.T, dsn string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(silasBin, args...)
	cmd.Env = append(append(os.Environ(), "DATABASE_URL="+dsn, "SILAS_DATA_DIR="+t.TempDir(), "SILAS_CONFIG="), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("silas %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}
