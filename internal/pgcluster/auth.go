package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// Passwords and roles. The owner's and the app role's passwords are
// generated once and kept in Dir/auth/<role>.password (0600); the server
// only ever sees each over the connection that sets it, and stores its
// SCRAM verifier. The superuser has none (hbaConf).

func (e *env) passwordFile(role string) string {
	return filepath.Join(e.dir, authDirName, role+".password")
}

// password returns role's password, generating and storing it first when
// create is set and there is none yet.
func (e *env) password(role string, create bool) (string, error) {
	path := e.passwordFile(role)
	b, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, fs.ErrNotExist) || !create {
		return "", fmt.Errorf("pgcluster: password of %s: %w", role, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	// Hex: safe in a URL and in an SQL literal without escaping.
	pw := hex.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) { // another process was quicker
		return e.password(role, false)
	}
	if err != nil {
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	_, err = f.WriteString(pw + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && e.cred != nil {
		// initdb --pwfile reads it as the postgres user.
		for _, p := range []string{filepath.Dir(path), path} {
			if err = os.Chown(p, int(e.cred.Uid), int(e.cred.Gid)); err != nil {
				break
			}
		}
	}
	if err != nil {
		os.Remove(path)
		return "", fmt.Errorf("pgcluster: write %s: %w", path, err)
	}
	return pw, nil
}

// hbaConf is the cluster's pg_hba.conf. The superuser is the one role
// that can reach the machine as the server's OS user (COPY … FROM PROGRAM,
// pg_read_file): run as an ordinary user, that is the gateway's own uid,
// which can read the audit key. So nobody but the gateway may become it:
// it has no password, TCP refuses it, and the one way in is the Unix
// socket in the cluster's directory (mode 0700, the gateway's), by peer
// authentication as the OS user that runs the gateway (pg_ident.conf, map
// "gateway"). The other roles, which cannot run programs, log in with
// passwords over the socket or loopback. Nobody replicates.
const hbaConf = `# Written by silas internal/pgcluster at every start; edits are lost.
# The superuser: peer authentication on the cluster's own socket only
# (pg_ident.conf map "gateway"); no password, never over TCP.
local   all          ` + Superuser + `                peer map=gateway
host    all          ` + Superuser + `   all          reject
local   replication  all                 reject
host    replication  all   all           reject
# Everyone else: passwords (scram-sha-256), in ../auth/<role>.password.
local   all          all                 scram-sha-256
host    all          all   127.0.0.1/32  scram-sha-256
host    all          all   ::1/128       scram-sha-256
`

// identConf maps the OS user that runs the gateway (osUser) to the
// superuser, and nobody else.
func identConf(osUser string) string {
	return "# Written by silas internal/pgcluster at every start; edits are lost.\n" +
		"# Only the OS user that runs the gateway may log in as the superuser.\n" +
		"gateway  " + osUser + "  " + Superuser + "\n"
}

// authFilesCurrent reports whether pg_hba.conf and pg_ident.conf are what
// this version writes for osUser.
func (e *env) authFilesCurrent(osUser string) bool {
	hba, err1 := os.ReadFile(filepath.Join(e.data, "pg_hba.conf"))
	ident, err2 := os.ReadFile(filepath.Join(e.data, "pg_ident.conf"))
	return err1 == nil && err2 == nil && string(hba) == hbaConf && string(ident) == identConf(osUser)
}

// writeAuthFiles writes pg_hba.conf and pg_ident.conf (each replaced in
// one rename), owned by the server's user.
func (e *env) writeAuthFiles(osUser string) error {
	for name, content := range map[string]string{"pg_ident.conf": identConf(osUser), "pg_hba.conf": hbaConf} {
		path := filepath.Join(e.data, name)
		if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		if e.cred != nil {
			if err := os.Chown(path+".tmp", int(e.cred.Uid), int(e.cred.Gid)); err != nil {
				return fmt.Errorf("pgcluster: %w", err)
			}
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	return nil
}

// gatewayUser is the OS user name peer authentication sees for this
// process: the one pg_ident.conf lets in as the superuser.
func gatewayUser() (string, error) {
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("pgcluster: the superuser logs in by peer authentication as the OS user running this process, whose name cannot be looked up: %w", err)
	}
	return u.Username, nil
}

// secureAuth makes the superuser reachable only by the gateway (hbaConf)
// on a cluster this package made earlier with passwords or trust: if the
// server already runs under the old rules it is let in the old way
// (legacyDSN) once, to reload them. Called with the server stopped, it only
// writes the files.
func (c *Cluster) secureAuth(ctx context.Context, running bool) error {
	e := c.env
	osUser, err := gatewayUser()
	if err != nil {
		return err
	}
	if e.authFilesCurrent(osUser) {
		return nil
	}
	e.log.Info("postgres: the superuser now logs in only by peer authentication on the cluster's socket", "dir", e.data, "os_user", osUser)
	if !running {
		return e.writeAuthFiles(osUser)
	}
	conn, err := pgx.Connect(ctx, e.legacyDSN(c.Port))
	if err != nil {
		return c.env.errorf("connect as the superuser under the old authentication rules to reload them: %v", err)
	}
	defer conn.Close(context.Background())
	if err := e.writeAuthFiles(osUser); err != nil {
		return err
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_reload_conf()").Scan(&ok); err != nil || !ok {
		return fmt.Errorf("pgcluster: reload pg_hba.conf: %v", err)
	}
	return nil
}

// legacyDSN is how an earlier version of this package reached the
// superuser: over loopback, with the password it kept (or none, under
// trust).
func (e *env) legacyDSN(port int) string {
	u := url.User(Superuser)
	if b, err := os.ReadFile(e.passwordFile(Superuser)); err == nil {
		u = url.UserPassword(Superuser, strings.TrimSpace(string(b)))
	}
	return (&url.URL{Scheme: "postgres", User: u, Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/postgres", RawQuery: "sslmode=disable"}).String()
}

// dropSuperuserPassword removes a password an earlier version gave the
// superuser, in the server and on disk: nothing may log in with it again.
func (c *Cluster) dropSuperuserPassword(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "ALTER ROLE "+pgx.Identifier{Superuser}.Sanitize()+" PASSWORD NULL"); err != nil {
		return fmt.Errorf("pgcluster: drop the superuser's password: %w", err)
	}
	if err := os.Remove(c.env.passwordFile(Superuser)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return nil
}

// ensureRoles creates (or resets the passwords of) the owner and app
// roles, gives the database "silas" to the owner, and hands the owner any
// table, sequence or function a trust-era cluster created as superuser.
func (c *Cluster) ensureRoles(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.AdminDSN())
	if err != nil {
		return c.env.errorf("connect to %s: %v", Database, err)
	}
	defer conn.Close(context.Background())
	if err := c.dropSuperuserPassword(ctx, conn); err != nil {
		return err
	}
	for _, role := range []string{OwnerRole, AppRole} {
		pw, err := c.env.password(role, true)
		if err != nil {
			return err
		}
		id := pgx.Identifier{role}.Sanitize()
		for _, q := range []string{
			fmt.Sprintf(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%s') THEN CREATE ROLE %s; END IF; END $$`, role, id),
			fmt.Sprintf(`ALTER ROLE %s WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD '%s'`, id, pw),
		} {
			if _, err := conn.Exec(ctx, q); err != nil {
				return fmt.Errorf("pgcluster: role %s: %w", role, err)
			}
		}
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{Database}.Sanitize()+" OWNER TO "+pgx.Identifier{OwnerRole}.Sanitize()); err != nil {
		return fmt.Errorf("pgcluster: give database %s to %s: %w", Database, OwnerRole, err)
	}
	conn.Close(ctx)

	db, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		return c.env.errorf("connect to %s: %v", Database, err)
	}
	defer db.Close(context.Background())
	// Tables first: their owned sequences follow them.
	_, err = db.Exec(ctx, `REVOKE CREATE ON SCHEMA public FROM PUBLIC;
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS t FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relowner <> 'silas_owner'::regrole LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO silas_owner', r.t);
    END LOOP;
    FOR r IN SELECT c.oid::regclass AS t FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind = 'S' AND c.relowner <> 'silas_owner'::regrole LOOP
        EXECUTE format('ALTER SEQUENCE %s OWNER TO silas_owner', r.t);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS f FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'public' AND p.proowner <> 'silas_owner'::regrole LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO silas_owner', r.f);
    END LOOP;
END
$$`)
	if err != nil {
		return fmt.Errorf("pgcluster: hand the schema to %s: %w", OwnerRole, err)
	}
	return nil
}

// ServerUser names the OS user a cluster's server runs as: postgres when
// this process is root, else this process's own user.
func ServerUser() (name string, cred syscall.Credential, err error) {
	if os.Geteuid() == 0 {
		e := &env{}
		if err := e.setRunUser("postgres"); err != nil {
			return "", cred, err
		}
		return e.runUser, *e.cred, nil
	}
	u, err := user.Current()
	if err != nil {
		return "", cred, fmt.Errorf("pgcluster: %w", err)
	}
	cred = syscall.Credential{Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid())}
	if gs, err := os.Getgroups(); err == nil {
		for _, g := range gs {
			cred.Groups = append(cred.Groups, uint32(g))
		}
	}
	return u.Username, cred, nil
}

// SuperuserGatewayOnly reports whether the cluster in dir lets only this
// process's OS user in as the superuser (hbaConf and its pg_ident.conf,
// as Start writes them); ok false with a nil error when dir holds no
// cluster yet.
func SuperuserGatewayOnly(dir string) (ok bool, err error) {
	osUser, err := gatewayUser()
	if err != nil {
		return false, err
	}
	e := &env{dir: dir, data: filepath.Join(dir, dataDirName)}
	if _, err := os.Stat(filepath.Join(e.data, "PG_VERSION")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("pgcluster: %w", err)
	}
	if !e.authFilesCurrent(osUser) {
		return false, fmt.Errorf("pgcluster: %s's pg_hba.conf or pg_ident.conf is not what this version writes: the superuser may be reachable by others until the next start", e.data)
	}
	if _, err := os.Stat(e.passwordFile(Superuser)); err == nil {
		return false, fmt.Errorf("pgcluster: a superuser password is still stored in %s (the next start removes it)", e.passwordFile(Superuser))
	}
	return true, nil
}
