package pgcluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// tempDir returns a fresh directory for a cluster. As root the cluster runs
// as the postgres user, which must be able to traverse t.TempDir's parent
// (created 0700 by os.MkdirTemp).
func tempDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cluster")
	if os.Geteuid() == 0 {
		if err := os.Chmod(filepath.Dir(filepath.Dir(dir)), 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t *testing.T }

// lockedLog keeps what a logger wrote, for a test to read while the
// cluster may still log.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func start(t *testing.T, ctx context.Context, dir string) *Cluster {
	t.Helper()
	c, err := Start(ctx, Options{Dir: dir, NoSync: true, MaxConnections: 150, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("cleanup Stop: %v", err)
		}
	})
	return c
}

func connect(t *testing.T, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestStartRestartPersists(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDir(t)

	c := start(t, ctx, dir)
	// The superuser's DSN: the cluster's socket, no password (peer).
	if want := "postgres://silas@/silas?host=" + url.QueryEscape(dir) + "&port=" + strconv.Itoa(c.Port) + "&sslmode=disable"; c.DSN() != want {
		t.Errorf("DSN = %q, want %q", c.DSN(), want)
	}
	conn := connect(t, ctx, c.DSN())
	var one int
	if err := conn.QueryRow(ctx, "select 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("select 1: %v, %d", err, one)
	}
	var maxConns string
	if err := conn.QueryRow(ctx, "show max_connections").Scan(&maxConns); err != nil || maxConns != "150" {
		t.Errorf("max_connections = %q, %v; want the 150 of Options.MaxConnections", maxConns, err)
	}
	if _, err := conn.Exec(ctx, "create table kept (v text); insert into kept values ('hello')"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := pgx.Connect(ctx, c.DSN()); err == nil {
		t.Fatal("server still accepts connections after Stop")
	}

	c2 := start(t, ctx, dir)
	if c2.Port != c.Port {
		t.Errorf("restart port = %d, want the stored %d", c2.Port, c.Port)
	}
	conn = connect(t, ctx, c2.DSN())
	var v string
	if err := conn.QueryRow(ctx, "select v from kept").Scan(&v); err != nil || v != "hello" {
		t.Fatalf("after restart: %v, %q", err, v)
	}
	var db string
	if err := connect(t, ctx, c2.AdminDSN()).QueryRow(ctx, "select current_database()").Scan(&db); err != nil || db != "postgres" {
		t.Fatalf("AdminDSN database: %v, %q", err, db)
	}
	if err := c2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := StopDir(ctx, Options{Dir: dir}); err != nil {
		t.Fatalf("StopDir on stopped cluster: %v", err)
	}
}

// A server left running (e.g. by a process that died) is found and reused,
// even when a different port is asked for.
func TestReuseRunning(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDir(t)
	c := start(t, ctx, dir)

	c2, err := Start(ctx, Options{Dir: dir, Port: c.Port + 1, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if c2.Port != c.Port {
		t.Errorf("reused port = %d, want %d", c2.Port, c.Port)
	}
	if err := StopDir(ctx, Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if err := c2.Stop(ctx); err != nil {
		t.Fatalf("Stop after StopDir: %v", err)
	}
}

// A server killed with SIGKILL leaves a stale postmaster.pid; Start copes.
func TestStalePidFile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDir(t)
	c := start(t, ctx, dir)

	pidFile := filepath.Join(dir, "pgdata", "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		t.Fatal(err)
	}
	if pgid == syscall.Getpgrp() {
		t.Fatal("server runs in the test's process group")
	}
	// Kill the whole server process group, as a crash would.
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(-pgid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(pidFile); err != nil {
		t.Fatalf("expected a stale postmaster.pid: %v", err)
	}

	// The stored port is reused unless it is taken at the restart: under
	// make test's parallel packages another test's outgoing connection can
	// be given the freed port as its ephemeral one (it is in that range),
	// and then Start picks another and says so — the documented fallback,
	// not a failure.
	var logged lockedLog
	c2, err := Start(ctx, Options{Dir: dir, NoSync: true, MaxConnections: 150,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(tWriter{t}, &logged), &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c2.Stop(context.Background()); err != nil {
			t.Errorf("cleanup Stop: %v", err)
		}
	})
	if c2.Port != c.Port && !strings.Contains(logged.String(), "stored port is taken") {
		t.Errorf("port = %d, want %d (the stored port, not reported taken)", c2.Port, c.Port)
	}
	var one int
	if err := connect(t, ctx, c2.DSN()).QueryRow(ctx, "select 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
}

func TestUnreachableDirAsRoot(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("only meaningful as root")
	}
	dir := filepath.Join(t.TempDir(), "cluster") // parent is 0700 root
	_, err := Start(context.Background(), Options{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "cannot reach") || !strings.Contains(err.Error(), "chmod o+x") {
		t.Fatalf("want a clear 'cannot reach' error, got %v", err)
	}
}

func TestMissingBinaries(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Options{Dir: t.TempDir(), BinDir: t.TempDir()})
	if !errors.Is(err, ErrNoBinaries) {
		t.Fatalf("want ErrNoBinaries, got %v", err)
	}
}

// Every role needs its password; the owner owns the database and the app
// role is neither superuser nor owner.
func TestPasswordAuthAndRoles(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDir(t)
	c := start(t, ctx, dir)
	checkPasswordsAndRoles(t, ctx, c, dir)
}

func checkPasswordsAndRoles(t *testing.T, ctx context.Context, c *Cluster, dir string) {
	t.Helper()
	for _, role := range []string{Superuser, OwnerRole, AppRole} {
		p := filepath.Join(dir, "auth", role+".password")
		st, err := os.Stat(p)
		if role == Superuser {
			// No password to steal: it logs in by peer authentication
			// on the cluster's socket only (TestSuperuserOnlyForTheGateway).
			if !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: the superuser has a password file (%v)", p, err)
			}
		} else if err != nil {
			t.Fatal(err)
		} else if st.Mode().Perm() != 0o600 || st.Size() < 32 {
			t.Errorf("%s: mode %v, %d bytes", p, st.Mode().Perm(), st.Size())
		}
		for _, bad := range []string{
			"postgres://" + role + "@127.0.0.1:" + strconv.Itoa(c.Port) + "/silas?sslmode=disable",
			"postgres://" + role + ":wrong@127.0.0.1:" + strconv.Itoa(c.Port) + "/silas?sslmode=disable",
		} {
			if conn, err := pgx.Connect(ctx, bad); err == nil {
				conn.Close(ctx)
				t.Errorf("%s connected without its password", role)
			}
		}
	}
	for _, tc := range []struct {
		name      string
		dsn       string
		user      string
		superuser bool
		owner     bool
	}{
		{"superuser", c.DSN(), Superuser, true, false},
		{"owner", c.OwnerDSN(), OwnerRole, false, true},
		{"app", c.AppDSN(), AppRole, false, false},
	} {
		var user, dbOwner string
		var super bool
		err := connect(t, ctx, tc.dsn).QueryRow(ctx, `SELECT current_user, rolsuper, pg_get_userbyid(d.datdba)
			FROM pg_roles, pg_database d WHERE rolname = current_user AND d.datname = current_database()`).Scan(&user, &super, &dbOwner)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if user != tc.user || super != tc.superuser || (dbOwner == user) != tc.owner {
			t.Errorf("%s: user %s, superuser %v, database owner %s", tc.name, user, super, dbOwner)
		}
	}
}

// A cluster made with trust authentication (as this package once did) is
// switched to passwords, and its tables are handed to the owner role.
func TestUpgradeFromTrust(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDir(t)
	c := start(t, ctx, dir)
	if _, err := connect(t, ctx, c.DSN()).Exec(ctx, "CREATE TABLE old (id bigserial PRIMARY KEY); ALTER DATABASE silas OWNER TO silas"); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	trust := "local all all trust\nhost all all 127.0.0.1/32 trust\n"
	if err := os.WriteFile(filepath.Join(dir, "pgdata", "pg_hba.conf"), []byte(trust), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "auth")); err != nil {
		t.Fatal(err)
	}

	c2 := start(t, ctx, dir)
	checkPasswordsAndRoles(t, ctx, c2, dir)
	var owner, seqOwner string
	err := connect(t, ctx, c2.DSN()).QueryRow(ctx, `SELECT pg_get_userbyid(relowner), (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'old_id_seq')
		FROM pg_class WHERE relname = 'old'`).Scan(&owner, &seqOwner)
	if err != nil || owner != OwnerRole || seqOwner != OwnerRole {
		t.Fatalf("table owner %q, sequence owner %q, %v; want %s", owner, seqOwner, err, OwnerRole)
	}
}
