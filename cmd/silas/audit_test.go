package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// auditDB is a fresh, migrated database holding n audit entries appended
// through the store, as serve would have; no server runs.
func auditDB(t *testing.T, n int) (string, *store.Store) {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	ctx := t.Context()
	st, err := store.Open(ctx, dsn, store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		err := st.Do(ctx, func(context.Context, *store.Tx) ([]audit.Entry, error) {
			return []audit.Entry{{Kind: "test.entry", Actor: "operator", Conversation: fmt.Sprintf("webchat:c%d", i%2),
				Data: map[string]any{"i": i}}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return dsn, st
}

// silas runs the binary against dsn and returns its exit code and output.
func silas(t *testing.T, dsn string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(silasBin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn, "SILAS_DATA_DIR="+t.TempDir(), "SILAS_CONFIG=")
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

func TestAuditVerifyCLI(t *testing.T) {
	cases := []struct {
		name    string
		tamper  string // SQL, as a user would type it in psql
		wantSeq int
	}{
		{"data edited", `UPDATE audit_log SET data = '{"i": 400}' WHERE seq = 4`, 4},
		{"actor edited", `UPDATE audit_log SET actor = 'someone else' WHERE seq = 9`, 9},
		{"row deleted", `DELETE FROM audit_log WHERE seq = 6`, 6},
		{"first row's hash replaced", `UPDATE audit_log SET hash = sha256('x') WHERE seq = 1`, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn, st := auditDB(t, 10)

			code, out, errOut := silas(t, dsn, "audit", "verify")
			if code != 0 || !strings.Contains(out, "audit chain intact: 10 entries") {
				t.Fatalf("intact chain: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
			}

			if _, err := st.Pool().Exec(t.Context(), tc.tamper); err != nil {
				t.Fatal(err)
			}
			code, out, errOut = silas(t, dsn, "audit", "verify")
			want := fmt.Sprintf("seq %d", tc.wantSeq)
			if code != 1 || !strings.Contains(errOut+out, want) || !strings.Contains(errOut, "BROKEN") {
				t.Fatalf("tampered chain: exit %d, want 1 naming %q\nstdout: %s\nstderr: %s", code, want, out, errOut)
			}
			if strings.Contains(out, "intact") {
				t.Fatalf("tampered chain reported intact: %s", out)
			}
		})
	}
}

func TestAuditTailCLI(t *testing.T) {
	dsn, _ := auditDB(t, 10)

	code, out, errOut := silas(t, dsn, "audit", "tail", "-n", "5")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if code != 0 || len(lines) != 5 {
		t.Fatalf("audit tail -n 5: exit %d, %d lines\nstdout: %s\nstderr: %s", code, len(lines), out, errOut)
	}
	for i, l := range lines {
		// Oldest first: seq 6..10.
		f := strings.Fields(l)
		if len(f) < 5 || f[0] != fmt.Sprint(6+i) || !strings.Contains(l, "test.entry") || !strings.Contains(l, fmt.Sprintf(`{"i": %d}`, 6+i)) {
			t.Errorf("line %d: %q", i, l)
		}
	}

	code, out, errOut = silas(t, dsn, "audit", "tail", "-n", "3", "--json", "--conversation", "webchat:c0")
	lines = strings.Split(strings.TrimRight(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("audit tail --json: exit %d, %d lines\nstdout: %s\nstderr: %s", code, len(lines), out, errOut)
	}
	for i, l := range lines {
		var e struct {
			Seq          int64          `json:"seq"`
			Conversation string         `json:"conversation"`
			Data         map[string]any `json:"data"`
			Hash         string         `json:"hash"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		// Entries 6, 8 and 10 are in webchat:c0.
		if e.Seq != int64(6+2*i) || e.Conversation != "webchat:c0" || e.Data["i"] != float64(6+2*i) || len(e.Hash) != 64 {
			t.Errorf("line %d: %+v", i, e)
		}
	}

	if code, _, errOut := silas(t, dsn, "audit", "tail", "-n", "0"); code != 1 || !strings.Contains(errOut, "-n must be") {
		t.Errorf("audit tail -n 0: exit %d, stderr %s", code, errOut)
	}
}

// silas doctor lists what intake quarantined.
func TestDoctorListsDeadLetters(t *testing.T) {
	dsn, st := auditDB(t, 0)
	code, out, errOut := silas(t, dsn, "doctor")
	if code != 0 || !strings.Contains(out, "dead letters  none") {
		t.Fatalf("empty: exit %d\n%s\n%s", code, out, errOut)
	}
	for i := range 7 {
		err := st.Do(t.Context(), func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			_, err := tx.InsertDeadLetter(ctx, core.DeadLetter{Channel: "telegram", EventID: fmt.Sprintf("u%d", i),
				Payload: []byte(`{"text":"hi\u0000"}`), Error: "permanent: invalid byte sequence\x00", Attempts: 1})
			return nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut = silas(t, dsn, "doctor")
	if code != 0 || !strings.Contains(out, "7 inbound event(s) quarantined") || !strings.Contains(out, `telegram "u6"`) ||
		strings.Count(out, "permanent: invalid byte sequence") != 5 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// silas webchat revoke records the revocation a running gateway acts on.
func TestWebchatRevokeCLI(t *testing.T) {
	dsn, st := auditDB(t, 0)
	code, out, errOut := silas(t, dsn, "webchat", "revoke")
	if code != 0 || !strings.Contains(out, "Every web chat session ends") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	v, ok, err := st.GetState(t.Context(), "webchat", "sessions_revoked_at")
	if err != nil || !ok || v == "" {
		t.Fatalf("state = %q, %v, %v", v, ok, err)
	}
	if n := queryCount(t, st, `SELECT count(*) FROM audit_log WHERE kind = 'webchat.sessions_revoked'`); n != 1 {
		t.Fatalf("%d audit entries", n)
	}
}

func queryCount(t *testing.T, st *store.Store, q string) int {
	t.Helper()
	var n int
	if err := st.Pool().QueryRow(t.Context(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
