// Package store is the PostgreSQL storage layer: every SQL statement in
// Silas lives here. Writes go through one group-commit writer (Do) that runs
// many small operations in one transaction and appends their audit entries to
// the hash chain in that same transaction, so a state change and its audit
// record commit together or not at all.
//
// pgx.ErrNoRows becomes core.ErrNotFound at this boundary.
//
// The files go by noun: turns.go, approvals.go, executions.go, outbox.go,
// access.go (access requests, pairing codes, bindings), tasks.go,
// secrets.go, audit.go, deadletter.go, history.go (transcripts), owners.go;
// tx.go (the Tx type and its queueing) and writer.go (the group-commit
// loop) are the machinery. The records these files read and write are
// package core's (core/records.go, core/task.go): the store must define no
// domain record of its own, so that a room which only reads or renders a
// record (core/render, core/trust) need not import the store.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/riverqueue/river/rivertype"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/migrations"
)

// Options configure a Store.
type Options struct {
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// MaxBatch bounds how many operations share one transaction.
	MaxBatch int
	// MaxConns sizes the pool (0 = pgx default).
	MaxConns int32
	// Writers is how many group-commit transactions may be open at once
	// (default 1: batches strictly sequential; see defaultWriters).
	Writers int
	// BackgroundDelay is how long an operation given to DoBackground may
	// wait for others to share its transaction (default 3ms).
	BackgroundDelay time.Duration
	// LazyDelay is how long an operation given to DoLazy may wait for
	// others to share its transaction (default 200ms).
	LazyDelay time.Duration
	// EntryKeyFile is the audit entry key (core/audit/mac.go): when set,
	// every appended row carries its MAC, and the first append creates the
	// key if there is none (MACing from the head at that moment on). ""
	// writes rows without a MAC (tests and tools that own no audit key).
	EntryKeyFile string
	// QueryTracer traces every query (internal/telemetry); nil: none.
	QueryTracer pgx.QueryTracer
	// RiverMiddleware is handed to the River client Tx.QueueJob inserts
	// with (otelriver: the job carries its trace); nil: none.
	RiverMiddleware []rivertype.Middleware
}

// Store is the PostgreSQL store.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	now  func() time.Time
	w    *writer
	// jobs inserts River jobs queued with Tx.QueueJob.
	jobs jobInserter
	// migrateLockRetry is the wait between tries for the migrations lock
	// (tests shorten it).
	migrateLockRetry time.Duration
	// entryKeyFile and entryKey: see Options.EntryKeyFile; entryKey is
	// loaded (or made) once, under the chain lock.
	entryKeyFile string
	entryKeyMu   sync.Mutex
	entryKey     *audit.EntryKey
	// fanOut: see OnFanOut.
	fanOut atomic.Pointer[func(core.ConversationID)]
	// instance is this process's instance id (SetInstance, instances.go).
	instance string
	// leaseTTL and leaseRenew: see SetLeaseTiming.
	leaseTTL, leaseRenew time.Duration
}

// Open connects and starts the writer. It does not migrate.
func Open(ctx context.Context, dsn string, opt Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: parse database url: %w", err)
	}
	if opt.MaxConns > 0 {
		cfg.MaxConns = opt.MaxConns
	}
	// A process paused mid-transaction (a frozen VM, SIGSTOP) must not
	// hold its locks — the audit chain's among them — for the other
	// instances on the database: PostgreSQL ends such a session after a
	// few seconds idle in a transaction, well inside the heartbeat's TTL
	// after which the others take over its work. The gateway's
	// transactions never wait on anything but the database.
	if _, set := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "5000"
	}
	if opt.QueryTracer != nil {
		cfg.ConnConfig.Tracer = opt.QueryTracer
	}
	noDescriptionCache(cfg.ConnConfig, dsn)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: connect: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: ping database: %w", err)
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = 256
	}
	s := &Store{pool: pool, log: opt.Logger, now: opt.Now, migrateLockRetry: defaultMigrateLockRetry, entryKeyFile: opt.EntryKeyFile}
	if s.jobs, err = s.newJobInserter(opt.RiverMiddleware); err != nil {
		pool.Close()
		return nil, err
	}
	if opt.Writers <= 0 {
		opt.Writers = defaultWriters
	}
	if opt.BackgroundDelay <= 0 {
		opt.BackgroundDelay = 3 * time.Millisecond
	}
	if opt.LazyDelay <= 0 {
		opt.LazyDelay = defaultLazyDelay
	}
	s.w = newWriter(s, opt.MaxBatch, opt.Writers)
	s.w.bgDelay, s.w.lazyDelay = opt.BackgroundDelay, opt.LazyDelay
	return s, nil
}

// Close stops the writer (after the operations already queued) and the pool.
func (s *Store) Close() {
	s.w.close()
	s.pool.Close()
}

// Pool exposes the pool: to the background room, whose River client works
// jobs on the same database, and to tests and benchmarks in this module.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

func (s *Store) provider() (*goose.Provider, *sql.DB, error) {
	db := stdlib.OpenDBFromPool(s.pool)
	sub, err := fs.Sub(migrations.FS(), ".")
	if err != nil {
		return nil, nil, err
	}
	// A session lock serialises concurrent migrators (two serves, or serve
	// and `silas migrate`) instead of letting them collide.
	locker := migrateLocker{id: lock.DefaultLockID, every: s.migrateLockRetry, limit: 5 * time.Minute}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker),
		// Migrations from parallel branches may land in any order.
		goose.WithAllowOutofOrder(true))
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("store: migrations: %w", err)
	}
	return p, db, nil
}

// Migrate applies pending migrations, then River's, and returns how many
// of ours ran.
func (s *Store) Migrate(ctx context.Context) (int, error) {
	p, db, err := s.provider()
	if err != nil {
		return 0, err
	}
	defer db.Close()
	res, err := p.Up(ctx)
	if err != nil {
		return len(res), fmt.Errorf("store: migrate: %w", err)
	}
	// River's tables (core/background) come after ours; its count is
	// logged, not returned: the result counts this schema's versions.
	if _, err := s.migrateRiver(ctx); err != nil {
		return len(res), err
	}
	return len(res), nil
}

// SchemaStatus reports the current and latest schema versions.
func (s *Store) SchemaStatus(ctx context.Context) (current, latest int64, err error) {
	p, db, err := s.provider()
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	current, latest, err = func() (int64, int64, error) {
		c, err := p.GetDBVersion(ctx)
		if err != nil {
			return 0, 0, err
		}
		srcs := p.ListSources()
		var l int64
		if len(srcs) > 0 {
			l = srcs[len(srcs)-1].Version
		}
		return c, l, nil
	}()
	if err != nil {
		return 0, 0, fmt.Errorf("store: schema version: %w", err)
	}
	return current, latest, nil
}

// Ready checks the database answers (for /readyz).
func (s *Store) Ready(ctx context.Context) error {
	var one int
	return s.pool.QueryRow(ctx, "SELECT 1").Scan(&one)
}

func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return core.ErrNotFound
	}
	return err
}
