package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgcluster"
	"github.com/silas-gateway/silas/internal/storetest"
)

// auditDB is a fresh, migrated database holding n audit entries appended
// through the store, as serve would have; no server runs.
func auditDB(t *testing.T, n int) (string, *store.Store) {
	t.Helper()
	dsn := storetest.NewDatabase(t)
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
	return silasIn(t, dsn, t.TempDir(), args...)
}

// silasIn is silas with a given data_dir.
func silasIn(t *testing.T, dsn, dataDir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return silasInEnv(t, dsn, dataDir, nil, args...)
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

			// As a superuser who switched the append-only trigger off.
			if _, err := st.Pool().Exec(t.Context(), "BEGIN; SET LOCAL session_replication_role = replica; "+tc.tamper+"; COMMIT"); err != nil {
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
	t.Parallel() // a database of its own
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

// verifyReport is `silas audit verify --json`'s output.
type verifyReport struct {
	OK               bool  `json:"ok"`
	Entries          int64 `json:"entries"`
	LastSeq          int64 `json:"last_seq"`
	Checkpoints      int   `json:"checkpoints"`
	NewestCheckpoint int64 `json:"newest_checkpoint"`
	HeadSeq          int64 `json:"head_seq"`
	Problems         []struct {
		Kind    string `json:"kind"`
		Seq     int64  `json:"seq"`
		Message string `json:"message"`
	} `json:"problems"`
	Warnings []string `json:"warnings"`
}

func verifyJSON(t *testing.T, dsn, dataDir string) (int, verifyReport) {
	t.Helper()
	code, out, errOut := silasIn(t, dsn, dataDir, "audit", "verify", "--json")
	var r verifyReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("audit verify --json: exit %d, %v\nstdout: %s\nstderr: %s", code, err, out, errOut)
	}
	return code, r
}

// The audit key, public key and head file where serve keeps them, and
// what verify makes of a truncated or re-chained log.
func TestAuditVerifyCheckpointsCLI(t *testing.T) {
	cases := []struct {
		name   string
		tamper string
		kind   string
		want   string
	}{
		{"truncated", `DELETE FROM audit_log WHERE seq > 6`, "truncated", "checkpoint at seq 10; the log ends at 6 < 10"},
		{"re-chained", `UPDATE audit_log SET data = '{"i": 400}' WHERE seq = 4`, "rechained", "chain hashes valid but checkpoint at seq 10 was signed over a different hash"},
		{"checkpoints deleted and truncated", `DELETE FROM audit_checkpoints; DELETE FROM audit_log WHERE seq > 6`, "checkpoints_deleted", "head file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn, st := auditDB(t, 10)
			dataDir := t.TempDir()
			key, _, err := audit.LoadOrCreateKey(filepath.Join(dataDir, "audit", "audit.key"), filepath.Join(dataDir, "audit", "audit.pub"))
			if err != nil {
				t.Fatal(err)
			}
			cp, err := audit.NewCheckpointer(t.Context(), st, audit.CheckpointOptions{Key: key, HeadFile: filepath.Join(dataDir, "audit", "head.log")})
			if err != nil {
				t.Fatal(err)
			}
			if c, err := cp.Checkpoint(t.Context()); err != nil || c == nil || c.Seq != 10 {
				t.Fatalf("checkpoint = %v, %v", c, err)
			}
			code, out, errOut := silasIn(t, dsn, dataDir, "audit", "verify")
			if code != 0 || !strings.Contains(out, "audit chain intact: 10 entries verified; 1 signed checkpoint(s), the newest at seq 10") {
				t.Fatalf("intact: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
			}

			if strings.Contains(tc.tamper, "UPDATE") {
				// Edit, then recompute every hash after it, as an attacker
				// with the database (but not the audit key) would.
				tamperSQL(t, st, tc.tamper)
				rechainFrom(t, st, 4)
				if code, out, errOut := silasIn(t, dsn, dataDir, "audit", "verify"); code != 1 || !strings.Contains(errOut, tc.want) {
					t.Fatalf("text: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
				}
			} else {
				tamperSQL(t, st, tc.tamper)
			}
			code, r := verifyJSON(t, dsn, dataDir)
			if code != 1 || r.OK || len(r.Problems) == 0 || r.Problems[0].Kind != tc.kind || !strings.Contains(r.Problems[0].Message, tc.want) {
				t.Fatalf("exit %d, report %+v; want %s: %q", code, r, tc.kind, tc.want)
			}
		})
	}
}

func tamperSQL(t *testing.T, st *store.Store, sql string) {
	t.Helper()
	if _, err := st.Pool().Exec(t.Context(), "BEGIN; SET LOCAL session_replication_role = replica; "+sql+"; COMMIT"); err != nil {
		t.Fatal(err)
	}
}

// rechainFrom recomputes prev_hash and hash from seq from on.
func rechainFrom(t *testing.T, st *store.Store, from int64) {
	t.Helper()
	ctx := t.Context()
	var prev []byte
	if err := st.Pool().QueryRow(ctx, `SELECT hash FROM audit_log WHERE seq = $1`, from-1).Scan(&prev); err != nil {
		t.Fatal(err)
	}
	rows, err := st.Pool().Query(ctx, `SELECT seq, at, kind, actor, conversation, data::text FROM audit_log WHERE seq >= $1 ORDER BY seq`, from)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		seq                        int64
		at                         time.Time
		kind, actor, conv, dataTxt string
	}
	var all []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.seq, &r.at, &r.kind, &r.actor, &r.conv, &r.dataTxt); err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
	}
	rows.Close()
	for _, r := range all {
		c, err := audit.Canonical(r.seq, r.at, audit.Kind(r.kind), r.actor, r.conv, []byte(r.dataTxt))
		if err != nil {
			t.Fatal(err)
		}
		h := audit.Chain(prev, c)
		_, err = st.Pool().Exec(ctx, fmt.Sprintf("BEGIN; SET LOCAL session_replication_role = replica; UPDATE audit_log SET prev_hash = '\\x%x', hash = '\\x%x' WHERE seq = %d; COMMIT", prev, h, r.seq))
		if err != nil {
			t.Fatal(err)
		}
		prev = h
	}
}

// serve creates the audit key (0600, apart from data_dir/keys), signs a
// checkpoint of the newest entry at a graceful stop and appends it to the
// head file; verify then finds every entry covered.
func TestServeSignsCheckpointAtStop(t *testing.T) {
	t.Parallel() // a server of its own on a database of its own
	dsn := storetest.NewDatabase(t)
	dataDir := t.TempDir()
	s := startServer(t, dsn, dataDir)
	c := s.connect(t)
	c.say("/whoami")
	c.textContaining("owner trust")
	s.stop()

	st, err := os.Stat(filepath.Join(dataDir, "audit", "audit.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("audit key: %v, %v", st, err)
	}
	if !strings.Contains(s.logs.String(), "created the audit signing key") {
		t.Errorf("serve did not say it created the audit key:\n%s", s.logs.String())
	}
	code, r := verifyJSON(t, dsn, dataDir)
	if code != 0 || !r.OK || r.LastSeq == 0 || r.NewestCheckpoint != r.LastSeq || r.HeadSeq != r.LastSeq || r.Checkpoints == 0 {
		t.Fatalf("after a graceful stop: exit %d, %+v", code, r)
	}
}

// clusterDataDir is a fresh data_dir for a test that starts a local
// cluster of its own: as root the cluster runs as the postgres user, which
// must reach it.
func clusterDataDir(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	if os.Geteuid() == 0 {
		for _, d := range []string{filepath.Dir(base), base} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
	}
	return filepath.Join(base, "data")
}

// `make run`: without DATABASE_URL, serve starts the local cluster with
// password authentication, migrates as silas_owner and runs as silas_app,
// which doctor then finds unable to change the audit log.
func TestLocalClusterLeastPrivilege(t *testing.T) {
	t.Parallel() // a cluster of its own in a directory of its own
	dataDir := clusterDataDir(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pgcluster.StopDir(ctx, pgcluster.Options{Dir: filepath.Join(dataDir, "pg")}); err != nil {
			t.Error(err)
		}
	})
	s := startServer(t, "", dataDir)
	c := s.connect(t)
	c.say("/whoami")
	c.textContaining("owner trust")
	s.stop()

	for _, role := range []string{"silas_owner", "silas_app"} {
		st, err := os.Stat(filepath.Join(dataDir, "pg", "auth", role+".password"))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s's password file: %v, %v", role, st, err)
		}
	}
	// The superuser has none: only the gateway's peer login on the
	// cluster's socket reaches it (issue 22).
	if _, err := os.Stat(filepath.Join(dataDir, "pg", "auth", "silas.password")); !os.IsNotExist(err) {
		t.Errorf("the superuser has a password file: %v", err)
	}
	code, out, errOut := silasIn(t, "", dataDir, "doctor")
	if code != 0 || !strings.Contains(out, "✓ database     the gateway's role silas_app can only read and append the audit log") {
		t.Fatalf("doctor: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// The background room ran on River as silas_app: its queue is
	// recorded, and no job failed (a missing grant would fail them).
	if !strings.Contains(out, "✓ jobs queue   maintenance: ") || !strings.Contains(out, "✓ jobs stuck   no job running over 5 minutes or failed in the last day") {
		t.Fatalf("doctor's River state:\n%s", out)
	}
	code, r := verifyJSON(t, "", dataDir)
	if code != 0 || !r.OK || r.LastSeq == 0 || r.NewestCheckpoint != r.LastSeq {
		t.Fatalf("audit verify: exit %d, %+v", code, r)
	}
}

// silas doctor lists what intake quarantined.
func TestDoctorListsDeadLetters(t *testing.T) {
	t.Parallel() // a database of its own
	dsn, st := auditDB(t, 0)
	code, out, errOut := silas(t, dsn, "doctor")
	if code != 0 || !strings.Contains(out, "dead letters  none") {
		t.Fatalf("empty: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "· jobs leader  none elected") || !strings.Contains(out, "· jobs queues  none yet") {
		t.Fatalf("doctor's River state with no serve:\n%s", out)
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
	t.Parallel() // a database of its own
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
