package pgcluster

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func start(t *testing.T, ctx context.Context, dir string) *Cluster {
	t.Helper()
	c, err := Start(ctx, Options{Dir: dir, NoSync: true, Logger: testLogger(t)})
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
	if want := "postgres://silas@127.0.0.1:" + strconv.Itoa(c.Port) + "/silas?sslmode=disable"; c.DSN() != want {
		t.Errorf("DSN = %q, want %q", c.DSN(), want)
	}
	conn := connect(t, ctx, c.DSN())
	var one int
	if err := conn.QueryRow(ctx, "select 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("select 1: %v, %d", err, one)
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

	c2 := start(t, ctx, dir)
	if c2.Port != c.Port {
		t.Errorf("port = %d, want %d", c2.Port, c.Port)
	}
	var one int
	if err := connect(t, ctx, c2.DSN()).QueryRow(ctx, "select 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
}

func TestUnreachableDirAsRoot(t *testing.T) {
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
	_, err := Start(context.Background(), Options{Dir: t.TempDir(), BinDir: t.TempDir()})
	if !errors.Is(err, ErrNoBinaries) {
		t.Fatalf("want ErrNoBinaries, got %v", err)
	}
}
