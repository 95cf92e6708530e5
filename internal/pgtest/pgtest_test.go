package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func dbExists(t *testing.T, name string) bool {
	t.Helper()
	admin, err := server()
	if err != nil {
		t.Fatal(err)
	}
	var exists bool
	err = connect(t, admin).QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	if err != nil {
		t.Fatal(err)
	}
	return exists
}

func TestNewDatabaseIsolated(t *testing.T) {
	ctx := context.Background()
	a, b := NewDatabase(t), NewDatabase(t)
	if a == b {
		t.Fatalf("two calls returned the same DSN %s", a)
	}
	ca, cb := connect(t, a), connect(t, b)

	var nameA, nameB string
	if err := ca.QueryRow(ctx, "select current_database()").Scan(&nameA); err != nil {
		t.Fatal(err)
	}
	if err := cb.QueryRow(ctx, "select current_database()").Scan(&nameB); err != nil {
		t.Fatal(err)
	}
	if nameA == nameB || !strings.HasPrefix(nameA, DBPrefix) || !strings.HasPrefix(nameB, DBPrefix) {
		t.Fatalf("database names %q, %q", nameA, nameB)
	}

	if _, err := ca.Exec(ctx, "create table only_in_a (id int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := cb.QueryRow(ctx, "select count(*) from pg_tables where tablename = 'only_in_a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("table created in database A is visible in database B")
	}
	if err := cb.QueryRow(ctx, "select count(*) from pg_tables where schemaname = 'public'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("fresh database has %d tables in public", n)
	}
}

// The database is dropped when its test ends, even with a connection open.
func TestNewDatabaseDropped(t *testing.T) {
	var name string
	var conn *pgx.Conn
	t.Run("inner", func(t *testing.T) {
		var err error
		conn, err = pgx.Connect(context.Background(), NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(context.Background(), "select current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		// conn stays open while the inner test's cleanup drops the
		// database: WITH (FORCE) must cope.
	})
	if conn != nil {
		if err := conn.Ping(context.Background()); err == nil {
			t.Error("connection to the dropped database still works")
		}
		conn.Close(context.Background())
	}
	if name == "" {
		t.Fatal("no database name")
	}
	if dbExists(t, name) {
		t.Fatalf("database %s still exists after its test ended", name)
	}
}

// NewDatabaseFrom prepares its template once and gives each caller its own
// copy of what prepare left.
func TestNewDatabaseFrom(t *testing.T) {
	ctx := context.Background()
	prepares := 0
	prepare := func(ctx context.Context, dsn string) error {
		prepares++
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, "create table prepared (id int); insert into prepared values (1)")
		return err
	}
	a, b := NewDatabaseFrom(t, "test-from", prepare), NewDatabaseFrom(t, "test-from", prepare)
	if prepares != 1 {
		t.Fatalf("prepare ran %d times, want 1", prepares)
	}
	if a == b {
		t.Fatalf("two calls returned the same DSN %s", a)
	}
	ca, cb := connect(t, a), connect(t, b)
	if _, err := ca.Exec(ctx, "insert into prepared values (2)"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		conn *pgx.Conn
		want int
	}{{"a", ca, 2}, {"b", cb, 1}} {
		var n int
		if err := c.conn.QueryRow(ctx, "select count(*) from prepared").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != c.want {
			t.Errorf("database %s has %d rows, want %d (copies must be independent)", c.name, n, c.want)
		}
	}
	if e := NewDatabase(t); e != "" {
		var n int
		if err := connect(t, e).QueryRow(ctx, "select count(*) from pg_tables where tablename = 'prepared'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Error("NewDatabase returned a copy of the template")
		}
	}

	failing := func(context.Context, string) error { return errors.New("boom") }
	ok := t.Run("failing prepare", func(t *testing.T) {
		ft := &fatalRecorder{TB: t}
		func() {
			defer func() { recover() }()
			NewDatabaseFrom(ft, "test-failing", failing)
		}()
		if !strings.Contains(ft.msg, "boom") {
			t.Errorf("failing prepare reported %q", ft.msg)
		}
	})
	if !ok {
		t.Fatal("failing prepare")
	}
}

// fatalRecorder records Fatalf instead of failing the test; it panics to
// stop the caller as Fatalf would.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}

func TestWithDatabase(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@h:5/db?sslmode=disable": "postgres://u:p@h:5/x?sslmode=disable",
		"postgresql://h/":                       "postgresql://h/x",
		"host=h dbname=db":                      "host=h dbname=db dbname=x",
	} {
		got, err := withDatabase(in, "x")
		if err != nil || got != want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// A test binary killed outright (SIGKILL; a panic or -timeout is no worse)
// leaves no server and no directory behind: the watchdog cleans up.
func TestWatchdogCleansUpAfterCrash(t *testing.T) {
	if os.Getenv(crashHelperEnv) == "1" {
		NewDatabase(t)
		fmt.Println("DIR=" + tmpDir)
		os.Stdout.Sync()
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchdogCleansUpAfterCrash$")
	// The watchdog guards the throwaway cluster: the helper must start one
	// even when this binary runs against a given (or make test's shared)
	// server.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TEST_DATABASE_URL=") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, crashHelperEnv+"=1")
	out, err := cmd.Output()
	if err == nil {
		t.Fatalf("helper did not die: %s", out)
	}
	var dir string
	for _, line := range strings.Split(string(out), "\n") {
		if d, ok := strings.CutPrefix(line, "DIR="); ok {
			dir = d
		}
	}
	if dir == "" {
		t.Fatalf("helper printed no DIR: %v\n%s", err, out)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := os.Stat(dir)
		if os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists a minute after the test binary died", dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const crashHelperEnv = "SILAS_PGTEST_CRASH_HELPER"
