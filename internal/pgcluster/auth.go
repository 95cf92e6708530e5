package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Passwords and roles. Each role's password is generated once and kept in
// Dir/auth/<role>.password (0600); the server only ever sees it over the
// loopback connection that sets it, and stores its SCRAM verifier.

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

const hbaConf = `# Written by silas internal/pgcluster: passwords (scram-sha-256) only,
# loopback only. The passwords are in ../auth/<role>.password.
local   all          all                 scram-sha-256
host    all          all   127.0.0.1/32  scram-sha-256
host    all          all   ::1/128       scram-sha-256
local   replication  all                 scram-sha-256
host    replication  all   127.0.0.1/32  scram-sha-256
host    replication  all   ::1/128       scram-sha-256
`

// requirePasswords switches a cluster made with trust authentication (by
// an earlier version of this package) to passwords: it sets the
// superuser's password while trust still lets it in, then replaces
// pg_hba.conf and reloads.
func (c *Cluster) requirePasswords(ctx context.Context) error {
	e := c.env
	hba := filepath.Join(e.data, "pg_hba.conf")
	b, err := os.ReadFile(hba)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	trust := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && !strings.HasPrefix(f[0], "#") && f[len(f)-1] == "trust" {
			trust = true
		}
	}
	if !trust {
		return nil
	}
	e.log.Warn("postgres: switching the local cluster from trust to password authentication", "dir", e.data)
	pw, err := e.password(Superuser, true)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, c.AdminDSN())
	if err != nil {
		return c.env.errorf("connect to set the superuser's password: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "ALTER ROLE "+pgx.Identifier{Superuser}.Sanitize()+" PASSWORD '"+pw+"'"); err != nil {
		return fmt.Errorf("pgcluster: set the superuser's password: %w", err)
	}
	if err := os.WriteFile(hba+".tmp", []byte(hbaConf), 0o600); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if e.cred != nil {
		if err := os.Chown(hba+".tmp", int(e.cred.Uid), int(e.cred.Gid)); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	if err := os.Rename(hba+".tmp", hba); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_reload_conf()").Scan(&ok); err != nil || !ok {
		return fmt.Errorf("pgcluster: reload pg_hba.conf: %v", err)
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
