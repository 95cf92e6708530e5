// Package pgcluster runs a throwaway PostgreSQL cluster from the server
// binaries installed on the machine (initdb, pg_ctl, postgres), so that
// `make run` and `make test` work without any PostgreSQL set up by hand.
//
// It is for development and tests only. Production always connects to an
// existing server through DATABASE_URL; callers use this package only when
// that variable is unset.
//
// Layout: everything lives under Options.Dir. The cluster's data directory is
// Dir/pgdata, the server log is Dir/postgres.log, and the Unix socket is put in
// Dir itself, so nothing under /var/run is needed. Settings written by this
// package (listen address, port, socket directory, durability) are kept in
// Dir/pgdata/silas.conf, which is rewritten at every start; the port stored
// there is reused at the next start, so a persistent Dir keeps both its data
// and its address across restarts.
//
// Security: the cluster listens on 127.0.0.1 and on a Unix socket in Dir
// (or, when Dir is too long for a socket path, in a 0700 directory of its
// own under /tmp). Three roles are set up: the superuser "silas" (DSN,
// AdminDSN: creating databases and roles), "silas_owner", which owns the
// database "silas" and runs migrations (OwnerDSN), and "silas_app", the
// gateway's runtime role (AppDSN), which the migrations only allow to
// SELECT and INSERT the audit log. The owner and app roles authenticate
// with generated passwords kept in Dir/auth/<role>.password (mode 0600,
// directory 0700). The superuser, which can run programs as the server's
// OS user (COPY … FROM PROGRAM) — the gateway's own uid when not run as
// root, able to read the audit key — has no password: it logs in only on
// the socket, by peer authentication as the OS user that runs the gateway,
// and TCP refuses it (auth.go, hbaConf). A cluster made by an earlier
// version (trust, or a superuser password) is switched at its next start,
// its superuser's password dropped and its tables handed to silas_owner.
//
// Running as root: PostgreSQL refuses to run as root. When the process runs
// with effective uid 0, initdb and pg_ctl are run as the "postgres" system user
// (looked up with os/user; Start fails with a clear error if it does not
// exist), using SysProcAttr.Credential. Dir is created if needed, chowned
// (recursively) to that user and made mode 0700; every parent directory of Dir
// must be searchable by that user. Start checks this up front and names the
// directory to fix (typically with `chmod o+x`), rather than letting pg_ctl
// fail obscurely. Note that os.MkdirTemp creates mode 0700 directories, so
// the parent of a t.TempDir() is not traversable by the postgres user until
// it is chmod'ed (o+x); Dir itself may be such a directory, since Start
// hands it to the postgres user.
//
// The server is started in its own process group, so a Ctrl-C in the terminal
// reaches only the Silas process, which then stops the server with Stop. If the
// caller dies without calling Stop, the server keeps running; the next Start on
// the same Dir finds it (pg_ctl status) and reuses it on whatever port it
// listens on. A postmaster.pid left by a crashed server is handled by
// PostgreSQL itself.
package pgcluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// Superuser is the name of the cluster's superuser.
	Superuser = "silas"
	// OwnerRole owns the database "silas" and runs migrations.
	OwnerRole = "silas_owner"
	// AppRole is the gateway's runtime role.
	AppRole = "silas_app"
	// Database is the application database created at first start.
	Database = "silas"

	dataDirName = "pgdata"
	logFileName = "postgres.log"
	confName    = "silas.conf"
	authDirName = "auth"

	// maxSocketDir is the longest Dir for which a Unix socket is created:
	// sun_path holds 107 bytes plus NUL, and the socket file name
	// "/.s.PGSQL.NNNNN" takes 15 of them.
	maxSocketDir = 107 - 15

	pgCtlTimeout = 60 * time.Second
	pingTimeout  = 30 * time.Second
)

// ErrNoBinaries is returned (wrapped) when no PostgreSQL server binaries can
// be found.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found")

// Options configures Start.
type Options struct {
	// Dir holds the cluster: its data lives in Dir/pgdata, which is created
	// (initdb) if missing and reused if already initialised. Required.
	Dir string
	// Port is the TCP port on 127.0.0.1. 0 means: the port stored by the
	// previous start of this Dir if it is still free, else a free port.
	Port int
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
	// BinDir holds initdb, pg_ctl and postgres. "" means discover: $PG_BIN,
	// then the directory of pg_ctl on PATH, then the highest version in
	// /usr/lib/postgresql/*/bin (and /usr/pgsql-*/bin).
	BinDir string
	// NoSync trades durability for speed: initdb --no-sync, and the server
	// runs with fsync, synchronous_commit and full_page_writes off. Data may
	// be lost if the machine (not just the server) crashes. Meant for tests.
	NoSync bool
	// MaxConnections sets max_connections; 0 keeps the server's default
	// (100). A cluster shared by several test binaries at once needs more.
	MaxConnections int
}

// Cluster is a running PostgreSQL server started (or found running) by Start.
type Cluster struct {
	// Dir is the absolute form of Options.Dir.
	Dir string
	// Port is the TCP port the server listens on at 127.0.0.1.
	Port int
	// BinDir is the directory of the binaries used.
	BinDir string
	// Reused is true when Start found the server already running (started
	// by another process); such a caller should leave it running.
	Reused bool

	env *env

	mu      sync.Mutex
	stopped bool
}

// DSN returns the URL of the application database "silas" as superuser.
func (c *Cluster) DSN() string { return c.env.dsn(c.Port, Superuser, Database) }

// AdminDSN returns the URL of the maintenance database "postgres" as superuser.
func (c *Cluster) AdminDSN() string { return c.env.dsn(c.Port, Superuser, "postgres") }

// OwnerDSN returns the URL of the database "silas" as its owner, the role
// that runs migrations.
func (c *Cluster) OwnerDSN() string { return c.env.dsn(c.Port, OwnerRole, Database) }

// AppDSN returns the URL of the database "silas" as the gateway's runtime
// role.
func (c *Cluster) AppDSN() string { return c.env.dsn(c.Port, AppRole, Database) }

// dsn is the URL for role on db, with the role's password when it has one.
// The superuser's goes through the cluster's Unix socket (peer
// authentication; hbaConf).
func (e *env) dsn(port int, role, db string) string {
	if role == Superuser {
		q := url.Values{"host": {e.socketDir}, "port": {strconv.Itoa(port)}, "sslmode": {"disable"}}
		return (&url.URL{Scheme: "postgres", User: url.User(role), Path: "/" + db, RawQuery: q.Encode()}).String()
	}
	user := url.User(role)
	if pw, err := e.password(role, false); err == nil && pw != "" {
		user = url.UserPassword(role, pw)
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     user,
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Start makes sure a server for opt.Dir is running and accepting connections,
// and that the database "silas" exists. It runs initdb the first time, starts
// the existing cluster on later calls, and reuses a server that is already
// running for that Dir (for example one left behind by a crashed process).
func Start(ctx context.Context, opt Options) (*Cluster, error) {
	e, err := newEnv(opt)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: e.dir, BinDir: e.bin, env: e}

	if err := e.prepareDir(); err != nil {
		return nil, err
	}
	if err := e.initdb(ctx); err != nil {
		return nil, err
	}

	running, err := e.running(ctx)
	if err != nil {
		return nil, err
	}
	if running {
		port, err := e.pidFilePort()
		if err != nil {
			return nil, err
		}
		e.log.Info("postgres: reusing running server", "dir", e.dir, "port", port)
		c.Port, c.Reused = port, true
		if err := c.secureAuth(ctx, true); err != nil {
			return nil, err
		}
	} else {
		if err := c.secureAuth(ctx, false); err != nil {
			return nil, err
		}
		if c.Port, err = e.start(ctx, opt.Port); err != nil {
			return nil, err
		}
	}

	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	if err := c.ensureDatabase(ctx); err != nil {
		return nil, err
	}
	if err := c.ensureRoles(ctx); err != nil {
		return nil, err
	}
	// Never the DSNs: they carry passwords.
	e.log.Info("postgres: ready", "address", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)), "database", Database,
		"passwords", filepath.Join(e.dir, authDirName), "log", e.logFile())
	return c, nil
}

// Stop shuts the server down (pg_ctl stop -m fast) and waits for it to exit.
// Calling it again, or on a server that is no longer running, returns nil.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	stopped, err := c.env.stop(ctx)
	if err != nil {
		return err
	}
	c.stopped = true
	if stopped {
		c.env.log.Info("postgres: stopped", "dir", c.Dir)
	}
	return nil
}

// StopDir stops the server of the cluster in opt.Dir if one is running (only
// opt.Dir, opt.BinDir and opt.Logger are used). It does nothing if there is no
// cluster there or it is not running. It is meant for cleanup by a process
// other than the one that called Start.
func StopDir(ctx context.Context, opt Options) error {
	e, err := newEnv(opt)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(e.data, "PG_VERSION")); err != nil {
		return nil
	}
	_, err = e.stop(ctx)
	return err
}

func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	var last error
	for {
		conn, err := pgx.Connect(ctx, c.AdminDSN())
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(context.Background())
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return c.env.errorf("server in %s does not accept connections on port %d: %v", c.Dir, c.Port, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) ensureDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.AdminDSN())
	if err != nil {
		return c.env.errorf("connect to the maintenance database on port %d: %v", c.Port, err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", Database).Scan(&exists); err != nil {
		return fmt.Errorf("pgcluster: look up database %q: %w", Database, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{Database}.Sanitize()); err != nil {
		return fmt.Errorf("pgcluster: create database %q: %w", Database, err)
	}
	c.env.log.Info("postgres: created database", "name", Database)
	return nil
}

// env is what every step needs: paths, binaries and the user to run as.
type env struct {
	dir, data, bin string
	// socketDir holds the server's Unix socket: Dir itself, or a
	// directory of the run user's own under /tmp when Dir is too long.
	socketDir string
	noSync    bool
	maxConns  int
	log       *slog.Logger
	// cred is non-nil when running as root: commands run as postgres.
	cred    *syscall.Credential
	runUser string
}

func newEnv(opt Options) (*env, error) {
	if opt.Dir == "" {
		return nil, errors.New("pgcluster: Options.Dir is required")
	}
	dir, err := filepath.Abs(opt.Dir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	bin, err := findBinDir(opt.BinDir)
	if err != nil {
		return nil, err
	}
	e := &env{
		dir:      dir,
		data:     filepath.Join(dir, dataDirName),
		bin:      bin,
		noSync:   opt.NoSync,
		maxConns: opt.MaxConnections,
		log:      opt.Logger,
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.socketDir = dir
	if len(dir) > maxSocketDir {
		h := sha256.Sum256([]byte(dir))
		e.socketDir = filepath.Join("/tmp", "silas-pg-"+hex.EncodeToString(h[:8]))
	}
	if os.Geteuid() == 0 {
		if err := e.setRunUser("postgres"); err != nil {
			return nil, err
		}
	} else if u, err := user.Current(); err == nil {
		e.runUser = u.Username
	}
	return e, nil
}

func (e *env) setRunUser(name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("pgcluster: running as root, and PostgreSQL refuses to run as root, so the server must run as the %q system user, but it cannot be found (%v); create it (e.g. `useradd --system --user-group --home-dir /var/lib/postgresql postgres`; Debian's postgresql packages create it), or set DATABASE_URL to use an existing server", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("pgcluster: user %q has non-numeric uid/gid %q/%q", name, u.Uid, u.Gid)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(g))
			}
		}
	}
	e.cred = cred
	e.runUser = name
	return nil
}

func (e *env) logFile() string  { return filepath.Join(e.dir, logFileName) }
func (e *env) confFile() string { return filepath.Join(e.data, confName) }

// prepareDir creates Dir and, when running as root, hands it to the postgres
// user and checks that user can reach it.
func (e *env) prepareDir() error {
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		return fmt.Errorf("pgcluster: create %s: %w", e.dir, err)
	}
	if err := e.prepareSocketDir(); err != nil {
		return err
	}
	if e.cred == nil {
		return nil
	}
	uid, gid := int(e.cred.Uid), int(e.cred.Gid)
	err := filepath.WalkDir(e.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
			return nil
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("pgcluster: chown %s to %s: %w", e.dir, e.runUser, err)
	}
	if err := os.Chmod(e.dir, 0o700); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if err := e.checkReachable(e.dir); err != nil {
		return err
	}
	return e.checkReachable(e.bin)
}

// prepareSocketDir makes the socket directory when it is not Dir: mode
// 0700 and the run user's, or Start fails (someone else made it first).
func (e *env) prepareSocketDir() error {
	if e.socketDir == e.dir {
		return nil
	}
	if err := os.Mkdir(e.socketDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("pgcluster: create socket directory %s: %w", e.socketDir, err)
	}
	uid := os.Geteuid()
	if e.cred != nil {
		if err := os.Lchown(e.socketDir, int(e.cred.Uid), int(e.cred.Gid)); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		uid = int(e.cred.Uid)
	}
	info, err := os.Lstat(e.socketDir)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !info.IsDir() || !ok || int(st.Uid) != uid || info.Mode().Perm() != 0o700 {
		return fmt.Errorf("pgcluster: socket directory %s (Dir %s is too long for a socket path) is not a directory of mode 0700 owned by uid %d; remove it or use a shorter data_dir", e.socketDir, e.dir, uid)
	}
	return nil
}

// checkReachable reports a clear error if the run user cannot search every
// directory from / down to dir. (POSIX ACLs are not considered.)
func (e *env) checkReachable(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	groups := map[uint32]bool{e.cred.Gid: true}
	for _, g := range e.cred.Groups {
		groups[g] = true
	}
	var parts []string
	for p := real; ; p = filepath.Dir(p) {
		parts = append(parts, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	for i := len(parts) - 1; i >= 0; i-- {
		p := parts[i]
		info, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		var bit os.FileMode = 0o001
		switch {
		case st.Uid == e.cred.Uid:
			bit = 0o100
		case groups[st.Gid]:
			bit = 0o010
		}
		if info.Mode().Perm()&bit == 0 {
			return fmt.Errorf("pgcluster: running as root, so PostgreSQL runs as user %q (uid %d), which cannot reach %s: %s is mode %s, owner uid %d, gid %d; fix it with `chmod o+x %s`, use a directory the %s user can reach, or set DATABASE_URL",
				e.runUser, e.cred.Uid, dir, p, info.Mode().Perm(), st.Uid, st.Gid, p, e.runUser)
		}
	}
	return nil
}

// command builds a command that runs bin/name as the run user, in Dir, in
// its own process group, with PG* variables removed from the environment.
func (e *env) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(e.bin, name), args...)
	cmd.Dir = e.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: e.cred}
	// The postmaster inherits no pipe (pg_ctl redirects its output to the
	// log file), but guard against hanging on one anyway.
	cmd.WaitDelay = 5 * time.Second
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	if e.cred != nil {
		cmd.Env = append(cmd.Env, "USER="+e.runUser, "LOGNAME="+e.runUser)
	}
	return cmd
}

// run runs a command and returns its combined output.
func (e *env) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := e.command(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if err != nil && e.cred != nil && errors.Is(err, syscall.EPERM) {
		err = fmt.Errorf("%w (could not switch to user %s: is the process allowed to change uid?)", err, e.runUser)
	}
	return out.Bytes(), err
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// initdb initialises Dir/pgdata unless it already holds a cluster, in which
// case it checks the cluster's major version matches the binaries.
func (e *env) initdb(ctx context.Context) error {
	out, err := e.run(ctx, "pg_ctl", "--version")
	if err != nil {
		return fmt.Errorf("pgcluster: %s --version: %v: %s", filepath.Join(e.bin, "pg_ctl"), err, bytes.TrimSpace(out))
	}
	binMajor := ""
	if m := versionRE.FindSubmatch(out); m != nil {
		binMajor = string(m[1])
	}

	if v, err := os.ReadFile(filepath.Join(e.data, "PG_VERSION")); err == nil {
		dataMajor := strings.TrimSpace(string(v))
		if binMajor != "" && dataMajor != binMajor {
			return fmt.Errorf("pgcluster: %s was created by PostgreSQL %s but the binaries in %s are PostgreSQL %s; remove %s to start afresh (its data is lost), or set PG_BIN to PostgreSQL %s binaries",
				e.data, dataMajor, e.bin, binMajor, e.dir, dataMajor)
		}
		return nil
	}
	if ents, err := os.ReadDir(e.data); err == nil && len(ents) > 0 {
		return fmt.Errorf("pgcluster: %s is not empty but holds no PostgreSQL cluster (no PG_VERSION; perhaps an interrupted initdb); remove it and try again", e.data)
	}

	e.log.Info("postgres: initialising cluster", "dir", e.data, "bin", e.bin)
	// No superuser password: secureAuth writes the real pg_hba.conf
	// (hbaConf) before the first start.
	args := []string{
		"-D", e.data,
		"-U", Superuser,
		"--auth-local=peer", "--auth-host=reject",
		"-E", "UTF8",
		"--locale=C",
	}
	if e.noSync {
		args = append(args, "--no-sync")
	}
	out, err = e.run(ctx, "initdb", args...)
	if err != nil {
		os.RemoveAll(e.data) // so the next attempt is not blocked by a half-made directory
		return fmt.Errorf("pgcluster: initdb %s failed: %v\n%s", e.data, err, tail(out, 30))
	}
	f, err := os.OpenFile(filepath.Join(e.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	_, err = fmt.Fprintf(f, "\n# Added by silas internal/pgcluster: its settings win.\ninclude_if_exists = '%s'\n", confName)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return nil
}

// running reports whether a server is running on Dir/pgdata.
func (e *env) running(ctx context.Context) (bool, error) {
	if _, err := os.Stat(filepath.Join(e.data, "postmaster.pid")); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	out, err := e.run(ctx, "pg_ctl", "status", "-D", e.data)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && (exit.ExitCode() == 3 || exit.ExitCode() == 4):
		// 3: not running (a stale postmaster.pid is fine: the server
		// removes it itself at start); 4: no accessible data directory.
		return false, nil
	default:
		return false, fmt.Errorf("pgcluster: pg_ctl status -D %s: %v: %s", e.data, err, bytes.TrimSpace(out))
	}
}

// pidFilePort reads the port of the running server from postmaster.pid.
func (e *env) pidFilePort() (int, error) {
	b, err := os.ReadFile(filepath.Join(e.data, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgcluster: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) >= 4 {
		if p, err := strconv.Atoi(strings.TrimSpace(lines[3])); err == nil && p > 0 {
			return p, nil
		}
	}
	return 0, fmt.Errorf("pgcluster: no port in %s", filepath.Join(e.data, "postmaster.pid"))
}

var portRE = regexp.MustCompile(`(?m)^\s*port\s*=\s*(\d+)`)

// storedPort returns the port written by the previous start, or 0.
func (e *env) storedPort() int {
	b, err := os.ReadFile(e.confFile())
	if err != nil {
		return 0
	}
	m := portRE.FindSubmatch(b)
	if m == nil {
		return 0
	}
	p, _ := strconv.Atoi(string(m[1]))
	return p
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// writeConf writes Dir/pgdata/silas.conf for the given port.
func (e *env) writeConf(port int) error {
	var b strings.Builder
	b.WriteString("# Written by silas internal/pgcluster at every start; edits are lost.\n")
	b.WriteString("listen_addresses = '127.0.0.1'\n")
	fmt.Fprintf(&b, "port = %d\n", port)
	fmt.Fprintf(&b, "unix_socket_directories = '%s'\n", strings.ReplaceAll(e.socketDir, "'", "''"))
	// Nobody else may even connect to the socket (the directory is 0700 too).
	b.WriteString("unix_socket_permissions = 0700\n")
	if e.noSync {
		b.WriteString("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
	} else {
		b.WriteString("fsync = on\nsynchronous_commit = on\nfull_page_writes = on\n")
	}
	if e.maxConns > 0 {
		fmt.Fprintf(&b, "max_connections = %d\n", e.maxConns)
	}
	if err := os.WriteFile(e.confFile(), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if e.cred != nil {
		if err := os.Chown(e.confFile(), int(e.cred.Uid), int(e.cred.Gid)); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	return nil
}

// start starts the stopped cluster and returns its port.
func (e *env) start(ctx context.Context, want int) (int, error) {
	port := want
	if port == 0 {
		if p := e.storedPort(); p != 0 {
			if portFree(p) {
				port = p
			} else {
				e.log.Warn("postgres: stored port is taken, picking another", "port", p)
			}
		}
	}
	for attempt := 1; ; attempt++ {
		if port == 0 {
			p, err := freePort()
			if err != nil {
				return 0, err
			}
			port = p
		}
		if err := e.writeConf(port); err != nil {
			return 0, err
		}
		e.log.Info("postgres: starting server", "dir", e.data, "port", port)
		out, err := e.run(ctx, "pg_ctl", "start",
			"-D", e.data,
			"-l", e.logFile(),
			"-w", "-t", strconv.Itoa(int(pgCtlTimeout/time.Second)),
		)
		if err == nil {
			return port, nil
		}
		logTail := e.logTail()
		if want == 0 && attempt < 3 && strings.Contains(logTail, "could not bind") {
			e.log.Warn("postgres: port taken meanwhile, retrying", "port", port)
			port = 0
			continue
		}
		return 0, fmt.Errorf("pgcluster: pg_ctl start -D %s failed: %v\n%s\n--- tail of %s ---\n%s",
			e.data, err, bytes.TrimSpace(out), e.logFile(), logTail)
	}
}

// stop stops the server if it runs, and reports whether it did.
func (e *env) stop(ctx context.Context) (bool, error) {
	running, err := e.running(ctx)
	if err != nil || !running {
		return false, err
	}
	out, err := e.run(ctx, "pg_ctl", "stop",
		"-D", e.data,
		"-m", "fast",
		"-w", "-t", strconv.Itoa(int(pgCtlTimeout/time.Second)),
	)
	if err == nil {
		return true, nil
	}
	if r, rerr := e.running(ctx); rerr == nil && !r {
		return false, nil // stopped by someone else meanwhile
	}
	return false, e.errorf("pg_ctl stop -D %s failed: %v: %s", e.data, err, bytes.TrimSpace(out))
}

// errorf returns an error that ends with the tail of the server log.
func (e *env) errorf(format string, args ...any) error {
	return fmt.Errorf("pgcluster: %s\n--- tail of %s ---\n%s", fmt.Sprintf(format, args...), e.logFile(), e.logTail())
}

func (e *env) logTail() string {
	f, err := os.Open(e.logFile())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	const max = 8 << 10
	if info, err := f.Stat(); err == nil && info.Size() > max {
		f.Seek(info.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return tail(b, 30)
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// findBinDir locates the PostgreSQL server binaries.
func findBinDir(explicit string) (string, error) {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
			info, err := os.Stat(filepath.Join(dir, name))
			if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if explicit != "" {
		if !has(explicit) {
			return "", fmt.Errorf("pgcluster: %w in BinDir %s", ErrNoBinaries, explicit)
		}
		return explicit, nil
	}
	if d := os.Getenv("PG_BIN"); d != "" {
		if !has(d) {
			return "", fmt.Errorf("pgcluster: %w in PG_BIN=%s", ErrNoBinaries, d)
		}
		return d, nil
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if d := filepath.Dir(p); has(d) {
			return d, nil
		}
	}
	var cands []string
	for _, pat := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"} {
		m, _ := filepath.Glob(pat)
		cands = append(cands, m...)
	}
	version := func(dir string) float64 {
		base := filepath.Base(filepath.Dir(dir))
		base = strings.TrimPrefix(base, "pgsql-")
		v, _ := strconv.ParseFloat(base, 64)
		return v
	}
	sort.SliceStable(cands, func(i, j int) bool { return version(cands[i]) > version(cands[j]) })
	for _, d := range cands {
		if has(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgcluster: %w (looked in $PG_BIN, PATH and /usr/lib/postgresql/*/bin); install the PostgreSQL server (e.g. `apt-get install postgresql`), set PG_BIN to its bin directory, or set DATABASE_URL to an existing server", ErrNoBinaries)
}
