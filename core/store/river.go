package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/flowjob"
	"github.com/silas-gateway/silas/core/taskjob"
)

// River (core/background's job engine) keeps its jobs in this database:
// its migrations run with ours, and a job that belongs with a state change
// is inserted in the same transaction as the change (Tx.QueueJob). River's
// own SQL stays River's; what is here is where it meets ours.

// riverLockKey serialises River's migrations across processes (two serves,
// or serve and `silas migrate`), as goose's session lock does ours.
const riverLockKey = 0x5117A5A0D18

// migrateRiver applies River's pending migrations and returns how many
// ran. They cannot all share one transaction (riverEnumSplit), so a
// session lock held on another connection serialises concurrent migrators.
func (s *Store) migrateRiver(ctx context.Context) (int, error) {
	m, err := rivermigrate.New(riverpgxv5.New(s.pool), &rivermigrate.Config{Logger: s.log})
	if err != nil {
		return 0, fmt.Errorf("store: river migrations: %w", err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("store: river migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(riverLockKey)); err != nil {
		return 0, fmt.Errorf("store: river migrations lock: %w", err)
	}
	defer func() {
		// The lock is the session's: unlock before the connection returns
		// to the pool (on failure the pool's next user would hold it).
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(riverLockKey)); err != nil {
			conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	// Two transactions instead of one per version (each costs a commit):
	// up to riverEnumSplit, then the rest.
	n := 0
	for _, target := range []int{riverEnumSplit, 0} {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			//lint:ignore SA1019 MigrateTx is deprecated because some versions cannot share one transaction; the split at riverEnumSplit is what keeps them apart
			res, err := m.MigrateTx(ctx, tx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{TargetVersion: target})
			if res != nil {
				n += len(res.Versions)
			}
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("store: river migrations: %w", err)
		}
	}
	if n > 0 {
		s.log.Info("applied River's migrations", slog.Int("count", n))
	}
	return n, nil
}

// riverEnumSplit is the last River migration that may share a transaction
// with those before it: version 6 uses the enum value "pending" that 4
// adds, which PostgreSQL refuses in the transaction that added it.
const riverEnumSplit = 5

// RiverSchemaCurrent reports whether River's migrations are all applied
// (serve refuses to start otherwise when it does not migrate itself).
func (s *Store) RiverSchemaCurrent(ctx context.Context) (bool, error) {
	m, err := rivermigrate.New(riverpgxv5.New(s.pool), &rivermigrate.Config{Logger: s.log})
	if err != nil {
		return false, fmt.Errorf("store: river migrations: %w", err)
	}
	res, err := m.Validate(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("store: river schema: %w", err)
	}
	return res.OK, nil
}

// QueueJob queues a River job to insert in this transaction, so that it
// exists exactly when the op's state change does: the job is inserted
// just before COMMIT and rolls back with everything else (a batch retried
// op by op re-runs the op, and with it this call). It takes no context
// and returns at once, like the other Queue… methods; an insert error fails
// the batch. The job is worked by whichever `silas serve` process fetches
// it once the transaction has committed (core/background).
//
// Its worker must be registered on the background room's client under
// args.Kind(); opts may be nil (the args' InsertOpts, else River's
// defaults: queue "default", 25 attempts).
func (t *Tx) QueueJob(args river.JobArgs, opts *river.InsertOpts) {
	t.jobs = append(t.jobs, river.InsertManyParams{Args: args, InsertOpts: opts})
}

// QueueTaskStep queues a step of task id (core/taskjob) in this
// transaction: the state change that calls for the step (a task started,
// stopped or answered, a task approval declined, its execution settled)
// and the job commit or roll back together.
//
// An approval proposed for a flow run carries core.FlowOwner+run in the
// same field: its step is the run's (core/flowjob), so the decider and the
// executor wake a flow run the way they wake a task.
func (t *Tx) QueueTaskStep(id string) {
	if run, ok := core.FlowRunOf(id); ok {
		t.QueueFlowStep(run)
		return
	}
	t.QueueJob(taskjob.Args{Task: id}, taskjob.Opts())
}

// QueueFlowStep queues a step of flow run id (core/flowjob) in this
// transaction, committed or rolled back with the state change calling for
// it.
func (t *Tx) QueueFlowStep(id string) {
	t.QueueJob(flowjob.Args{Run: id}, flowjob.Opts())
}

// QueueFlowSignal queues a step of flow run id that delivers sig.
func (t *Tx) QueueFlowSignal(id string, sig flowjob.Signal) {
	t.QueueJob(flowjob.Args{Run: id, Signal: &sig}, flowjob.Opts())
}

// QueueFlowCancel queues a step of flow run id that cancels it.
func (t *Tx) QueueFlowCancel(id, reason string) {
	t.QueueJob(flowjob.Args{Run: id, Cancel: reason}, flowjob.Opts())
}

// QueueFlowTimer queues a timer of flow run id, delivered at at.
func (t *Tx) QueueFlowTimer(id string, timer flowjob.Timer, at time.Time) {
	t.QueueJob(flowjob.Args{Run: id, Timer: &timer}, flowjob.At(at))
}

// insertJobs inserts the queued River jobs on the transaction's
// connection, after everything queued before them.
func (t *Tx) insertJobs(ctx context.Context) error {
	if len(t.jobs) == 0 {
		return nil
	}
	if t.river == nil {
		return errors.New("store: QueueJob: the store has no job inserter")
	}
	if !t.begun {
		t.later("begin", "SELECT 1") // send BEGIN with whatever else is queued
	}
	if err := t.flush(ctx); err != nil {
		return err
	}
	jobs := t.jobs
	t.jobs = nil
	if _, err := t.river.InsertManyTx(ctx, connTx{t.conn.Conn()}, jobs); err != nil {
		return fmt.Errorf("store: insert %d job(s): %w", len(jobs), err)
	}
	return nil
}

// connTx lends River the writer's transaction: the writer began it by hand
// on this connection (Tx) and alone commits or rolls it back, so those
// are refused here, and so is a nested transaction (River's inserts need
// none).
type connTx struct{ c *pgx.Conn }

var errTxOwned = errors.New("store: the transaction belongs to the store's writer")

func (connTx) Begin(context.Context) (pgx.Tx, error) { return nil, errTxOwned }
func (connTx) Commit(context.Context) error          { return errTxOwned }
func (connTx) Rollback(context.Context) error        { return errTxOwned }
func (t connTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	return t.c.CopyFrom(ctx, table, cols, src)
}
func (t connTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.c.SendBatch(ctx, b)
}
func (connTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }
func (t connTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.c.Prepare(ctx, name, sql)
}
func (t connTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.c.Exec(ctx, sql, args...)
}
func (t connTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.c.Query(ctx, sql, args...)
}
func (t connTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.c.QueryRow(ctx, sql, args...)
}
func (t connTx) Conn() *pgx.Conn { return t.c }

// jobInserter is the part of a River client Tx.QueueJob uses.
type jobInserter interface {
	InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// newJobInserter is an insert-only River client on the store's pool: it
// starts nothing and needs no workers (the background room works the jobs,
// in this process or another).
func (s *Store) newJobInserter(mw []rivertype.Middleware) (jobInserter, error) {
	c, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{Logger: s.log, Middleware: mw})
	if err != nil {
		return nil, fmt.Errorf("store: river insert client: %w", err)
	}
	return c, nil
}
