package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/internal/storetest"
)

// TestWhatsAppCLI runs `silas whatsapp …` through the binary on a fresh
// database: no device is linked, so status and doctor say what to do,
// unlink refuses, and link refuses a phone number not in international
// form before it would reach WhatsApp. (Linking itself talks to
// WhatsApp's servers and is not run here.)
func TestWhatsAppCLI(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
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
	return silasInEnv(t, dsn, t.TempDir(), env, args...)
}

// TestServeWhatsAppWithoutDevice: `silas serve` with whatsapp.enabled and
// no linked device starts (the other channels keep working), prepares the
// device store, says what to do, and records it for `silas whatsapp
// status` / doctor. (With a device, TestServeWhatsAppThroughFake runs a
// test build of the binary against the fake server, and adapters/whatsapp's
// TestRealClientConformance the channel through the real whatsmeow client.)
func TestServeWhatsAppWithoutDevice(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	s := startServer(t, dsn, t.TempDir(), "SILAS_WHATSAPP_ENABLED=true")
	defer s.stop()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.logs.String(), "No WhatsApp device is linked") {
		if time.Now().After(deadline) {
			t.Fatalf("no word about the missing device:\n%s", s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := s.connect(t)
	c.say("/whoami")
	c.expect("the web chat still answers", func(f map[string]any) bool {
		return strings.Contains(fmt.Sprint(f["text"]), "You are webchat:local")
	})
	code, out, _ := silas(t, dsn, "whatsapp", "status")
	if code != 1 || !strings.Contains(out, "no device is linked") || !strings.Contains(out, "No WhatsApp device is linked") {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
}
