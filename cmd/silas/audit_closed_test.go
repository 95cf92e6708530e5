package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/internal/pgcluster"
)

// silasInEnv is silasIn with extra environment variables.
func silasInEnv(t *testing.T, dsn, dataDir string, extra []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(silasBin, args...)
	cmd.Env = append(append(os.Environ(), "DATABASE_URL="+dsn, "SILAS_DATA_DIR="+dataDir, "SILAS_CONFIG="), extra...)
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

// Once the audit public key exists, verify fails closed on missing
// anchors: no head file, an empty one, or a log past the checkpoint
// threshold with no checkpoint at all (each of which a superuser who
// rewrote the log would otherwise leave behind with "intact").
//
// Checked to fail: without Report.FailClosed, every case exits 0.
func TestAuditVerifyFailsClosed(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, head string)
		env   []string
		kind  string
		want  string
	}{
		{"head file missing", func(t *testing.T, head string) { os.Remove(head) }, nil,
			audit.ProblemNoHeadFile, "no head file at"},
		{"head file empty", func(t *testing.T, head string) { os.WriteFile(head, nil, 0o600) }, nil,
			audit.ProblemEmptyHead, "holds no checkpoint"},
		{"no checkpoint past the threshold", func(t *testing.T, head string) {}, []string{"SILAS_AUDIT_CHECKPOINT_ENTRIES=5"},
			audit.ProblemNoCheckpoints, "10 entries and no signed checkpoint"},
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
			head := filepath.Join(dataDir, "audit", "head.log")
			if tc.kind != audit.ProblemNoCheckpoints {
				cp, err := audit.NewCheckpointer(t.Context(), st, audit.CheckpointOptions{Key: key, HeadFile: head})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cp.Checkpoint(t.Context()); err != nil {
					t.Fatal(err)
				}
				if code, out, errOut := silasInEnv(t, dsn, dataDir, tc.env, "audit", "verify"); code != 0 {
					t.Fatalf("before: exit %d\n%s\n%s", code, out, errOut)
				}
			}
			tc.setup(t, head)
			code, out, errOut := silasInEnv(t, dsn, dataDir, tc.env, "audit", "verify")
			if code != 1 || !strings.Contains(errOut, tc.want) || strings.Contains(out, "intact") {
				t.Fatalf("exit %d, want 1 saying %q\nstdout: %s\nstderr: %s", code, tc.want, out, errOut)
			}
			code, out, _ = silasInEnv(t, dsn, dataDir, tc.env, "audit", "verify", "--json")
			if code != 1 || !strings.Contains(out, `"kind":"`+tc.kind+`"`) {
				t.Fatalf("--json: exit %d: %s", code, out)
			}
		})
	}
}

// Every command that starts the local cluster for itself stops it when it
// is done; a cluster it found running (serve's) it leaves running.
//
// Checked to fail: with openDatabase's Close not stopping a cluster it
// started (as migrate, pair, doctor and the audit commands had it),
// postmaster.pid stays after migrate.
func TestCommandsStopTheClusterTheyStart(t *testing.T) {
	t.Parallel() // a cluster of its own in a directory of its own
	dataDir := clusterDataDir(t)
	pgDir := filepath.Join(dataDir, "pg")
	pid := filepath.Join(pgDir, "pgdata", "postmaster.pid")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pgcluster.StopDir(ctx, pgcluster.Options{Dir: pgDir}); err != nil {
			t.Error(err)
		}
	})
	for _, args := range [][]string{
		{"migrate"},
		{"audit", "verify"},
		{"audit", "tail"},
		{"pair"},
		{"doctor"},
		{"webchat", "revoke"},
	} {
		if args[0] == "doctor" {
			// An audit key (as serve makes), so that doctor says who can
			// reach it.
			if _, _, err := audit.LoadOrCreateKey(filepath.Join(dataDir, "audit", "audit.key"), filepath.Join(dataDir, "audit", "audit.pub")); err != nil {
				t.Fatal(err)
			}
		}
		code, out, errOut := silasIn(t, "", dataDir, args...)
		if code != 0 {
			t.Fatalf("silas %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
		}
		if _, err := os.Stat(pid); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("silas %v left the local cluster running (%s: %v)\nstderr: %s", args, pid, err, errOut)
		}
		// The audit key is out of the cluster's reach, and doctor says why
		// (as root: the server's user cannot read it; else: only this
		// gateway can become the superuser).
		if args[0] == "doctor" && !strings.Contains(out, "✓ key reach") {
			t.Errorf("doctor does not say the audit key is out of the cluster's reach:\n%s", out)
		}
	}
	// A cluster that was running before (serve's) stays running.
	c, err := pgcluster.Start(t.Context(), pgcluster.Options{Dir: pgDir})
	if err != nil {
		t.Fatal(err)
	}
	// (No public key: serve never ran here, no checkpoint is expected.)
	if code, out, errOut := silasIn(t, "", dataDir, "audit", "verify", "--pubkey", filepath.Join(filepath.Dir(dataDir), "none.pub")); code != 0 {
		t.Fatalf("verify on a running cluster: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if _, err := os.Stat(pid); err != nil {
		t.Fatalf("verify stopped a cluster it did not start: %v", err)
	}
	if err := c.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
}
