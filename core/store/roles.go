package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Least privilege: migrations run as an owner role; the gateway runs as an
// app role that may read and write its tables but only SELECT and INSERT
// the audit tables (docs/operations.md). The grants live here, not only in
// a migration, so that tables added by later migrations are covered the
// next time migrations run.

// CurrentUser returns the database role this store connects as.
func (s *Store) CurrentUser(ctx context.Context) (string, error) {
	var u string
	if err := s.pool.QueryRow(ctx, `SELECT current_user`).Scan(&u); err != nil {
		return "", fmt.Errorf("store: current user: %w", err)
	}
	return u, nil
}

// GrantApp gives role what the gateway needs at run time and nothing more
// on the audit tables: SELECT, INSERT, UPDATE, DELETE on every table in
// schema public, sequences, but only SELECT and INSERT on audit_log and
// audit_checkpoints and only SELECT on goose_db_version and River's
// river_migration. Run it as the owner of the tables, after migrating. It
// is idempotent.
func (s *Store) GrantApp(ctx context.Context, role string) error {
	id := pgx.Identifier{role}.Sanitize()
	stmts := []string{
		`GRANT USAGE ON SCHEMA public TO ` + id,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ` + id,
		`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO ` + id,
		`REVOKE UPDATE, DELETE, TRUNCATE, TRIGGER, REFERENCES ON audit_log, audit_checkpoints FROM ` + id,
		`REVOKE INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER, REFERENCES ON goose_db_version FROM ` + id,
		// River's tables (core/background) are covered by the grant on
		// all tables: its clients insert, fetch, complete and clean up
		// jobs, elect a leader and record queues. Its migrations are the
		// owner's, like ours.
		`REVOKE INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER, REFERENCES ON river_migration FROM ` + id,
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: grant the app role %s: %w", role, err)
	}
	return nil
}

// RoleReport says what the connected role could do to the audit log.
type RoleReport struct {
	User      string
	Superuser bool
	// OwnsAudit: the role owns audit_log (or is a member of its owner), so
	// it could drop the append-only trigger or grant itself anything.
	OwnsAudit bool
	// CanModifyAudit lists the privileges among UPDATE, DELETE and TRUNCATE
	// the role holds on audit_log.
	CanModifyAudit []string
	// TriggerEnabled: the append-only trigger is installed and enabled.
	TriggerEnabled bool
}

// AuditRole reports the connected role's powers over the audit log (for
// `silas doctor`).
func (s *Store) AuditRole(ctx context.Context) (RoleReport, error) {
	var r RoleReport
	var upd, del, trunc bool
	err := s.pool.QueryRow(ctx, `SELECT current_user, r.rolsuper,
			has_table_privilege('audit_log', 'UPDATE'), has_table_privilege('audit_log', 'DELETE'), has_table_privilege('audit_log', 'TRUNCATE'),
			pg_has_role(current_user, c.relowner, 'MEMBER'),
			EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgname = 'audit_log_append_only' AND t.tgenabled <> 'D')
		FROM pg_roles r, pg_class c
		WHERE r.rolname = current_user AND c.oid = 'audit_log'::regclass`).Scan(&r.User, &r.Superuser, &upd, &del, &trunc, &r.OwnsAudit, &r.TriggerEnabled)
	if err != nil {
		return r, fmt.Errorf("store: audit role check: %w", err)
	}
	for _, p := range []struct {
		ok   bool
		name string
	}{{upd, "UPDATE"}, {del, "DELETE"}, {trunc, "TRUNCATE"}} {
		if p.ok {
			r.CanModifyAudit = append(r.CanModifyAudit, p.name)
		}
	}
	return r, nil
}
