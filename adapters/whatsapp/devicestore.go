package whatsapp

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/store/sqlstore"
	waLog "go.mau.fi/whatsmeow/util/log"
)

// Schema is the PostgreSQL schema that holds whatsmeow's own tables
// (whatsmeow_device, whatsmeow_sessions, whatsmeow_lid_map, …) and its
// version table. They are whatsmeow's, migrated by whatsmeow's own upgrade
// mechanism at start, so they stay out of schema public and out of the
// gateway's goose migrations: a whatsmeow update can never collide with a
// Silas table, and `DROP SCHEMA whatsmeow CASCADE` forgets the device.
const Schema = "whatsmeow"

// DeviceStore is whatsmeow's sqlstore on Silas's PostgreSQL, in Schema.
// The device's keys (noise, identity, Signal sessions) live there, never
// in a file.
type DeviceStore struct {
	db        *sql.DB
	container *sqlstore.Container
}

// OpenDeviceStore connects to dsn with pgx's database/sql driver, with
// search_path set to Schema only, creates the schema when missing and runs
// whatsmeow's upgrades. The role needs CREATE on the database the first
// time (or an existing schema it owns).
func OpenDeviceStore(ctx context.Context, dsn string, log *slog.Logger) (*DeviceStore, error) {
	if log == nil {
		log = slog.Default()
	}
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("whatsapp: device store: parse database url: %w", err)
	}
	// Every statement of whatsmeow's resolves its unqualified table names
	// here, and only here: nothing it creates can land in public.
	cc.RuntimeParams["search_path"] = Schema
	db := stdlib.OpenDB(*cc)
	db.SetMaxOpenConns(4)
	// Create the schema only when missing: the gateway's runtime role may
	// not have CREATE on the database (PrepareDeviceStore, run as the
	// owner, made it then).
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, Schema).Scan(&exists); err != nil {
		db.Close()
		return nil, fmt.Errorf("whatsapp: device store: %w", err)
	}
	if !exists {
		if _, err := db.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{Schema}.Sanitize()); err != nil {
			db.Close()
			return nil, fmt.Errorf("whatsapp: device store: create schema %s (or run `silas whatsapp link` with database.migrate_url set): %w", Schema, err)
		}
	}
	c := sqlstore.NewWithDB(db, "pgx", waLogger(log.With(slog.String("component", "whatsmeow-store"))))
	if err := c.Upgrade(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("whatsapp: device store: whatsmeow upgrade: %w", err)
	}
	return &DeviceStore{db: db, container: c}, nil
}

// PrepareDeviceStore creates Schema and runs whatsmeow's upgrades as the
// schema owner (ownerDSN: database.migrate_url's role), then lets appRole
// — the gateway's runtime role, when it is another — use the tables and
// sequences there (no DDL). Idempotent.
func PrepareDeviceStore(ctx context.Context, ownerDSN, appRole string, log *slog.Logger) error {
	s, err := OpenDeviceStore(ctx, ownerDSN, log)
	if err != nil {
		return err
	}
	defer s.Close()
	if appRole == "" {
		return nil
	}
	id, sch := pgx.Identifier{appRole}.Sanitize(), pgx.Identifier{Schema}.Sanitize()
	for _, q := range []string{
		`GRANT USAGE ON SCHEMA ` + sch + ` TO ` + id,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + sch + ` TO ` + id,
		`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA ` + sch + ` TO ` + id,
	} {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("whatsapp: device store: grant %s: %w", appRole, err)
		}
	}
	return nil
}

// Device returns the linked device, or a new unlinked one (its ID is nil
// until pairing succeeds; whatsmeow saves it then).
// Device is a WhatsApp device's keys and identity in the store.
type Device = store.Device

func (s *DeviceStore) Device(ctx context.Context) (*store.Device, error) {
	d, err := s.container.GetFirstDevice(ctx)
	if err != nil {
		return nil, fmt.Errorf("whatsapp: device store: load device: %w", err)
	}
	return d, nil
}

// Close closes the store's connections.
func (s *DeviceStore) Close() error { return s.container.Close() }

// waLogger adapts slog to whatsmeow's logger. whatsmeow logs at debug what
// the gateway keeps at debug; its Info lines (connect, pairing) stay info.
func waLogger(l *slog.Logger) waLog.Logger { return slogWA{l} }

type slogWA struct{ l *slog.Logger }

func (s slogWA) Errorf(m string, a ...any) { s.l.Error(fmt.Sprintf(m, a...)) }
func (s slogWA) Warnf(m string, a ...any)  { s.l.Warn(fmt.Sprintf(m, a...)) }
func (s slogWA) Infof(m string, a ...any)  { s.l.Info(fmt.Sprintf(m, a...)) }
func (s slogWA) Debugf(m string, a ...any) { s.l.Debug(fmt.Sprintf(m, a...)) }
func (s slogWA) Sub(module string) waLog.Logger {
	return slogWA{s.l.With(slog.String("module", module))}
}
