// Package background is the gateway's one room for work nobody is waiting
// on: card expiry, audit checkpoints, the task sweep and the outbox's
// recovery scan run here as River periodic jobs, and other rooms register
// their own job workers (task steps) on the same client. It is started and
// stopped by one caller (cmd/silas), on the store's pgx pool.
//
// River (github.com/riverqueue/river) is the durable job engine: jobs are
// rows in PostgreSQL, one elected leader inserts the periodic jobs, and any
// process on the database may work them — so maintenance runs once across
// every `silas serve` sharing a database, not once per process.
//
// What this package must never do: hold a guarantee. Every job here is
// safe to run twice or not at all (the once-only guarantees stay in SQL
// compare-and-swap in core/store); it never runs SQL of its own (River's
// tables are River's, the rest is core/store's); and it never delivers a
// message — the outbox's per-conversation lanes do that, apart from River
// (docs/architecture.md, "Background work").
package background

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// QueueMaintenance is the queue the periodic jobs run in.
const QueueMaintenance = "maintenance"

// Periodic is one piece of maintenance on a fixed interval.
type Periodic struct {
	// Name identifies the job (snake_case); its River kind is
	// "silas_" + Name, which doctor shows.
	Name string
	// Every is the interval between runs. River's leader inserts one job
	// per interval (unique per interval, so a change of leader adds none).
	Every time.Duration
	// Run does the work once. An error is logged and kept on the job row
	// (doctor lists it); the next interval runs it again.
	Run func(ctx context.Context) error
	// Timeout bounds one run (default 1 minute).
	Timeout time.Duration
}

// Config configures a Room. Every field but Pool is optional.
type Config struct {
	// Pool is the store's pool (store.Pool()): River's jobs are rows in the
	// same database, and a job inserted with a state change
	// (store.Tx.QueueJob) commits or rolls back with it.
	Pool *pgxpool.Pool
	// Periodic is the maintenance to run.
	Periodic []Periodic
	// Workers holds other rooms' job workers (river.AddWorker), registered
	// on the same client; the room adds the periodic workers to it.
	Workers *river.Workers
	// Queues are other rooms' queues and their concurrency.
	Queues map[string]river.QueueConfig
	// AtStop runs after River stopped, in order, on a graceful Stop (the
	// final audit checkpoint: nothing appends any more by then).
	AtStop []func(ctx context.Context)
	// PollInterval is River's fallback fetch poll (default 1s; new jobs
	// arrive by LISTEN/NOTIFY at once). Tests shorten it.
	PollInterval time.Duration
	// Testing turns off River's start-up stagger of its own maintenance
	// services (river.Config.TestOnly). Tests only.
	Testing bool
	Logger  *slog.Logger
	// Middleware wraps every job inserted and worked (internal/telemetry's
	// otelriver); nil: none.
	Middleware []rivertype.Middleware
}

// Room runs the background work on one River client.
type Room struct {
	cfg    Config
	client *river.Client[pgx.Tx]
	log    *slog.Logger
	works  bool // the client has queues (else it only inserts)
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// New builds the room's River client; nothing runs before Start.
func New(cfg Config) (*Room, error) {
	if cfg.Pool == nil {
		return nil, errors.New("background: Pool is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Workers == nil {
		cfg.Workers = river.NewWorkers()
	}
	queues := map[string]river.QueueConfig{}
	for q, c := range cfg.Queues {
		queues[q] = c
	}
	var periodic []*river.PeriodicJob
	seen := map[string]bool{}
	for _, p := range cfg.Periodic {
		if !nameRE.MatchString(p.Name) || seen[p.Name] {
			return nil, fmt.Errorf("background: periodic job name %q: empty, not snake_case or given twice", p.Name)
		}
		if p.Every <= 0 || p.Run == nil {
			return nil, fmt.Errorf("background: periodic job %s: needs Every and Run", p.Name)
		}
		seen[p.Name] = true
		args, opts := periodicArgs{kind: kindPrefix + p.Name}, insertOpts(p)
		river.AddWorkerArgs(cfg.Workers, args, &periodicWorker{p: p, log: cfg.Logger})
		periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(p.Every),
			func() (river.JobArgs, *river.InsertOpts) { return args, opts }, &river.PeriodicJobOpts{ID: p.Name, RunOnStart: true}))
	}
	if len(cfg.Periodic) > 0 {
		// One worker per job: a slow run of one does not hold up the others.
		queues[QueueMaintenance] = river.QueueConfig{MaxWorkers: len(cfg.Periodic)}
	}
	rc := &river.Config{
		Logger:       riverLogger(cfg.Logger),
		Workers:      cfg.Workers,
		Queues:       queues,
		PeriodicJobs: periodic,
		// The gateway's role does not own River's indexes (`silas migrate`
		// runs as the owner), so River's nightly REINDEX would only fail;
		// an operator reindexes as the owner when needed.
		ReindexerSchedule: river.NeverSchedule(),
		// A maintenance job runs every second or few; a day of finished
		// rows is tens of thousands nobody reads. An hour is enough to see
		// what ran (doctor); failures stay a day.
		CompletedJobRetentionPeriod: time.Hour,
		DiscardedJobRetentionPeriod: 24 * time.Hour,
		FetchPollInterval:           cfg.PollInterval,
		TestOnly:                    cfg.Testing,
		Middleware:                  cfg.Middleware,
	}
	if len(queues) == 0 {
		// Nothing to work: an insert-only client (River refuses Workers
		// without Queues).
		rc.Workers, rc.PeriodicJobs = nil, nil
	}
	client, err := river.NewClient(riverpgxv5.New(cfg.Pool), rc)
	if err != nil {
		return nil, fmt.Errorf("background: river client: %w", err)
	}
	return &Room{cfg: cfg, client: client, log: cfg.Logger, works: len(queues) > 0}, nil
}

// Client is the room's River client, for inserting jobs outside a store
// transaction and for tests. Jobs that belong with a state change go
// through store.Tx.QueueJob instead.
func (r *Room) Client() *river.Client[pgx.Tx] { return r.client }

// Start starts fetching and, on the elected leader, inserting the periodic
// jobs. It returns at once; ctx only bounds the start (stopping is Stop's).
func (r *Room) Start(ctx context.Context) error {
	if !r.works {
		return nil // insert-only: nothing to start
	}
	// Not ctx itself: River stops when its start context ends, and the
	// order of stopping is Stop's to decide.
	if err := r.client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("background: start river: %w", err)
	}
	return nil
}

// Stop stops gracefully: no more fetching, running jobs finish (cancelled
// once ctx ends), then the AtStop functions run. Call it after everything
// that starts work for the room has stopped.
func (r *Room) Stop(ctx context.Context) error {
	var err error
	if r.works {
		if err = r.client.Stop(ctx); err != nil {
			r.log.Warn("background: jobs did not finish in time; cancelling them", slog.Any("err", err))
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err = r.client.StopAndCancel(cctx)
			cancel()
		}
	}
	for _, f := range r.cfg.AtStop {
		f(context.WithoutCancel(ctx))
	}
	if err != nil {
		return fmt.Errorf("background: stop river: %w", err)
	}
	return nil
}
