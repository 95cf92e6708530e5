// Package pgtest gives PostgreSQL-backed tests a fresh, empty database each.
//
// Every test package that needs PostgreSQL calls Main from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// and each test calls NewDatabase to get the DSN of a database of its own.
//
// The server comes from TEST_DATABASE_URL, else DATABASE_URL; with either set,
// the databases are created and dropped there (the URL's user needs the
// CREATEDB privilege). With neither set, a throwaway cluster is started from
// the machine's PostgreSQL binaries (see package pgcluster) in a temporary
// directory, the first time a test asks for a database, and is stopped and
// removed when the test binary is done. If it cannot be started (for instance
// the binaries are missing), every test that calls NewDatabase fails with the
// reason: `make test` is meant to run everything, so nothing is skipped.
//
// The throwaway cluster is also cleaned up when the test binary dies without
// returning from Main (a panicking test, a -timeout, Ctrl-C, SIGKILL): a small
// watchdog process (the test binary itself, re-executed) holds a pipe from
// it, and on seeing that pipe close unexpectedly stops the server and
// removes the directory.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/silas-gateway/silas/internal/pgcluster"
)

const (
	// DBPrefix starts the name of every database NewDatabase creates.
	DBPrefix = "silas_test_"

	watchdogEnv = "SILAS_PGTEST_WATCHDOG_DIR"
	doneMsg     = "done"
)

var (
	mu       sync.Mutex
	inMain   bool
	adminDSN string // where CREATE/DROP DATABASE are issued
	setupErr error  // sticky failure to get a server
	cluster  *pgcluster.Cluster
	tmpDir   string
	watchdog *exec.Cmd
	wdPipe   io.WriteCloser
)

// Main starts (or reuses TEST_DATABASE_URL / DATABASE_URL) a server for the
// whole test binary, runs the tests and cleans up. Call it from TestMain:
// os.Exit(pgtest.Main(m)). The throwaway server is started lazily, so test
// runs that ask for no database do not pay for it.
func Main(m *testing.M) int {
	if dir := os.Getenv(watchdogEnv); dir != "" {
		return runWatchdog(dir)
	}
	mu.Lock()
	inMain = true
	mu.Unlock()
	defer cleanup()
	return m.Run()
}

// NewDatabase creates a fresh, empty database for one test, drops it (WITH
// (FORCE), so leftover connections do not matter) when the test and its
// subtests finish, and returns its DSN.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "")
}

// NewDatabaseFrom is NewDatabase for a database that starts as a copy of a
// template instead of empty. The first call with a given key in this test
// binary creates the template and runs prepare on it (for instance: apply
// the migrations); every call then gets its own copy of it (CREATE DATABASE
// … TEMPLATE, a file copy), which is much cheaper than running prepare again
// for each test. The copy is byte for byte what prepare left, so a test sees
// the same database it would have built itself. prepare must close its
// connections (a template with open connections cannot be copied). The
// templates are dropped when the test binary ends.
func NewDatabaseFrom(t testing.TB, key string, prepare func(ctx context.Context, dsn string) error) string {
	t.Helper()
	tmpl, err := template(key, prepare)
	if err != nil {
		t.Fatalf("pgtest: template %q: %v", key, err)
	}
	return newDatabase(t, tmpl)
}

// newDatabase creates a database for t, a copy of tmpl ("" for template1).
func newDatabase(t testing.TB, tmpl string) string {
	t.Helper()
	admin, err := server()
	if err != nil {
		t.Fatalf("pgtest: no PostgreSQL server for this test: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := DBPrefix + randomSuffix()
	if err := createDatabase(ctx, admin, name, tmpl); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	dsn, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// server returns the admin DSN, starting the throwaway cluster on first use.
func server() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if adminDSN != "" || setupErr != nil {
		return adminDSN, setupErr
	}
	if !inMain {
		setupErr = errors.New("pgtest.Main was not called: add `func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }` to the package's tests")
		return "", setupErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, v := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if u := os.Getenv(v); u != "" {
			if err := ping(ctx, u); err != nil {
				setupErr = fmt.Errorf("%s is set but its server cannot be reached: %w", v, err)
				return "", setupErr
			}
			adminDSN = u
			return adminDSN, nil
		}
	}

	adminDSN, setupErr = startCluster(ctx)
	if setupErr != nil {
		setupErr = fmt.Errorf("TEST_DATABASE_URL and DATABASE_URL are unset, and a throwaway PostgreSQL cluster could not be started: %w", setupErr)
	}
	return adminDSN, setupErr
}

// templates are the databases made by NewDatabaseFrom, by key.
var (
	tmplMu sync.Mutex
	tmpls  = map[string]*tmplEntry{}
)

type tmplEntry struct {
	once sync.Once
	name string
	err  error
}

// template returns the name of the template database for key, creating and
// preparing it on first use. Concurrent first callers wait for one prepare.
func template(key string, prepare func(ctx context.Context, dsn string) error) (string, error) {
	tmplMu.Lock()
	e := tmpls[key]
	if e == nil {
		e = &tmplEntry{}
		tmpls[key] = e
	}
	tmplMu.Unlock()
	e.once.Do(func() {
		admin, err := server()
		if err != nil {
			e.err = fmt.Errorf("no PostgreSQL server: %w", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		name := DBPrefix + "tmpl_" + randomSuffix()
		if err := createDatabase(ctx, admin, name, ""); err != nil {
			e.err = fmt.Errorf("create database %s: %w", name, err)
			return
		}
		dsn, err := withDatabase(admin, name)
		if err == nil {
			err = prepare(ctx, dsn)
		}
		if err != nil {
			adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			e.err = fmt.Errorf("prepare: %w", err)
			return
		}
		e.name = name
	})
	return e.name, e.err
}

// dropTemplates drops the templates; the server is reachable.
func dropTemplates(ctx context.Context, admin string) {
	tmplMu.Lock()
	defer tmplMu.Unlock()
	for key, e := range tmpls {
		if e.name != "" {
			if err := adminExec(ctx, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{e.name}.Sanitize()+" WITH (FORCE)"); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: drop template %s: %v\n", e.name, err)
			}
		}
		delete(tmpls, key)
	}
}

// fileCopy is whether CREATE DATABASE takes STRATEGY (PostgreSQL 15+).
// FILE_COPY copies the template's files and is about twice as fast for
// these small databases as the default WAL_LOG, which writes every page of
// the copy to the WAL; crash safety of the copy does not matter in tests.
var (
	strategyOnce sync.Once
	fileCopy     bool
)

func createDatabase(ctx context.Context, admin, name, tmpl string) error {
	strategyOnce.Do(func() {
		pool, err := adminPool(admin)
		if err != nil {
			return
		}
		var v int
		if pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&v) == nil {
			fileCopy = v >= 150000
		}
	})
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if tmpl != "" {
		sql += " TEMPLATE " + pgx.Identifier{tmpl}.Sanitize()
	}
	if fileCopy {
		sql += " STRATEGY FILE_COPY"
	}
	return adminExec(ctx, admin, sql)
}

// RunShared runs the command args with one throwaway cluster for all of it,
// passed on as TEST_DATABASE_URL, and returns the command's exit code. It is
// what `make test` wraps `go test ./...` in (see cmd pgtestrun): instead of
// each test binary starting (initdb, start, stop) a cluster of its own,
// they all create their databases on one. A lone `go test ./pkg` still gets
// its own cluster from Main. With TEST_DATABASE_URL or DATABASE_URL already
// set, the command just runs against that server. The cluster is stopped
// and removed when the command ends, and by the watchdog if this process
// dies first.
func RunShared(args []string) int {
	if dir := os.Getenv(watchdogEnv); dir != "" {
		return runWatchdog(dir)
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "pgtest: usage: pgtestrun COMMAND [ARG...]")
		return 2
	}
	env := os.Environ()
	if os.Getenv("TEST_DATABASE_URL") == "" && os.Getenv("DATABASE_URL") == "" {
		mu.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		dsn, err := startCluster(ctx)
		cancel()
		mu.Unlock()
		defer cleanup()
		if err != nil {
			// Each test binary tries again on its own and reports why.
			fmt.Fprintf(os.Stderr, "pgtest: no shared PostgreSQL cluster, each test binary starts its own: %v\n", err)
		} else {
			env = append(env, "TEST_DATABASE_URL="+dsn)
		}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// A Ctrl-C reaches the command too (same process group); this process
	// outlives it to stop the cluster.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			if code := exit.ExitCode(); code > 0 {
				return code
			}
			return 1
		}
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	return 0
}

// startCluster starts the throwaway cluster; mu is held.
func startCluster(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "silas-pgtest-")
	if err != nil {
		return "", err
	}
	tmpDir = dir
	if err := startWatchdog(dir); err != nil {
		return "", err
	}
	level := slog.LevelWarn
	if inMain && testing.Verbose() { // testing.Verbose panics outside tests (RunShared)
		level = slog.LevelInfo
	}
	c, err := pgcluster.Start(ctx, pgcluster.Options{
		Dir:    dir,
		NoSync: true,
		// Under RunShared, two test binaries at a time use it, each
		// with several pools and `silas serve` subprocesses.
		MaxConnections: 300,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		return "", err
	}
	cluster = c
	return c.AdminDSN(), nil
}

// cleanup stops and removes the throwaway cluster, then releases the
// watchdog.
func cleanup() {
	mu.Lock()
	defer mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ok := true
	if adminDSN != "" && cluster == nil {
		// A server we do not own: leave it as we found it. (A throwaway
		// cluster goes as a whole.)
		dropTemplates(ctx, adminDSN)
	}
	closeAdminPools()
	if cluster != nil {
		if err := cluster.Stop(ctx); err != nil {
			ok = false
			fmt.Fprintf(os.Stderr, "pgtest: stop throwaway cluster: %v\n", err)
		}
	}
	if tmpDir != "" && ok {
		if err := os.RemoveAll(tmpDir); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	}
	if wdPipe != nil {
		if ok {
			io.WriteString(wdPipe, doneMsg)
		}
		// Without "done", the watchdog tries again to stop and remove.
		wdPipe.Close()
		watchdog.Wait()
	}
}

// startWatchdog re-executes the test binary as a watchdog for dir.
func startWatchdog(dir string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("start watchdog: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), watchdogEnv+"="+dir)
	// Own process group: a Ctrl-C must not kill the watchdog with the tests.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// No stdout/stderr: `go test` waits for its pipes to close.
	pipe, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("start watchdog: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start watchdog: %w", err)
	}
	watchdog, wdPipe = cmd, pipe
	return nil
}

// runWatchdog waits for its parent's pipe to close; unless the parent said
// it cleaned up, it stops the cluster in dir and removes dir.
func runWatchdog(dir string) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGQUIT)
	b, _ := io.ReadAll(os.Stdin)
	if string(b) == doneMsg {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pgcluster.StopDir(ctx, pgcluster.Options{Dir: dir}); err != nil {
		return 1
	}
	os.RemoveAll(dir)
	return 0
}

func ping(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// adminPools keeps a few admin connections per server open for the test
// binary's life. A new PostgreSQL backend costs tens of milliseconds of CPU
// on a small VM (fork, then page faults: BENCHMARKS.md), and every test
// issues a CREATE and a DROP DATABASE; a connection each made the admin
// connections about a third of all the server's backends.
var (
	adminMu    sync.Mutex
	adminPools = map[string]*pgxpool.Pool{}
)

// adminPool returns the admin connections for dsn, opening them on first use.
func adminPool(dsn string) (*pgxpool.Pool, error) {
	adminMu.Lock()
	defer adminMu.Unlock()
	if pool := adminPools[dsn]; pool != nil {
		return pool, nil
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 2
	// Idle admin connections only hold a backend; a long run does not need
	// them between a package's bursts.
	cfg.MaxConnIdleTime = 30 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	adminPools[dsn] = pool
	return pool, nil
}

func adminExec(ctx context.Context, dsn, sql string) error {
	pool, err := adminPool(dsn)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, sql)
	return err
}

// closeAdminPools closes the admin connections (before the server stops).
func closeAdminPools() {
	adminMu.Lock()
	defer adminMu.Unlock()
	for dsn, p := range adminPools {
		p.Close()
		delete(adminPools, dsn)
	}
}

func randomSuffix() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// withDatabase returns dsn with its database replaced by name. It accepts
// URLs (postgres://...) and keyword/value strings (host=... dbname=...).
func withDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("parse database URL: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil
}
