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
func (t *Tx) insertJobs(ctx context.Context) error { return t.insertJobsThen(ctx, nil) }

// insertJobsThen inserts the queued River jobs after everything queued
// before them, then sends then (the writer's chain lock and head): River's
// insert carries the queued statements before it and then after it in its
// own round trip (connTx.Query), so the statements keep their order — the
// chain lock still after every row the ops write, River's included — at
// the cost of one round trip instead of three. Without jobs it is send.
func (t *Tx) insertJobsThen(ctx context.Context, then []extra) error {
	if len(t.jobs) == 0 {
		return t.send(ctx, then)
	}
	if t.river == nil {
		return errors.New("store: QueueJob: the store has no job inserter")
	}
	jobs := t.jobs
	t.jobs = nil
	c := &connTx{c: t.conn.Conn(), t: t, then: then}
	_, err := t.river.InsertManyTx(ctx, c, jobs)
	if c.rows != nil {
		c.rows.Close() // River closes what it reads; this is in case it did not
	}
	if c.errBefore != nil {
		// Ours, not River's: a statement queued before the insert failed
		// (errors.Is must see, for example, ErrFlowRunChanged).
		return c.errBefore
	}
	if err != nil {
		return fmt.Errorf("store: insert %d job(s): %w", len(jobs), err)
	}
	if c.errAfter != nil {
		return c.errAfter
	}
	if !c.piped {
		return t.send(ctx, c.then) // River sent no query to carry them
	}
	return nil
}

// connTx lends River the writer's transaction: the writer began it by hand
// on this connection (Tx) and alone commits or rolls it back, so those
// are refused here, and so is a nested transaction (River's inserts need
// none). River's first query (the insert) carries what the Tx has queued
// before it and then after it, in one round trip; any other statement
// River sends first is preceded by the queued ones in a round trip of
// their own.
type connTx struct {
	c *pgx.Conn
	t *Tx
	// then are sent after River's first query, their results read once
	// River closed its rows; nil once sent.
	then  []extra
	piped bool       // River's first query carried the queued statements
	rows  *pipedRows // its rows
	// errBefore and errAfter are of statements of ours sent before and
	// after River's query, in its round trip.
	errBefore, errAfter error
}

var errTxOwned = errors.New("store: the transaction belongs to the store's writer")

func (*connTx) Begin(context.Context) (pgx.Tx, error) { return nil, errTxOwned }
func (*connTx) Commit(context.Context) error          { return errTxOwned }
func (*connTx) Rollback(context.Context) error        { return errTxOwned }

// before sends the queued statements ahead of a statement River sends
// that cannot carry them.
func (c *connTx) before(ctx context.Context) error {
	if c.rows != nil && !c.rows.done {
		return errors.New("store: River sent a statement before closing its rows")
	}
	if !c.t.begun {
		c.t.later("begin", "SELECT 1") // BEGIN goes first, with whatever is queued
	}
	if err := c.t.flush(ctx); err != nil {
		c.errBefore = err
		return err
	}
	c.t.trips++ // River's statement
	return nil
}

func (c *connTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := c.before(ctx); err != nil {
		return 0, err
	}
	return c.c.CopyFrom(ctx, table, cols, src)
}
func (c *connTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := c.before(ctx); err != nil {
		return errBatch{err}
	}
	return c.c.SendBatch(ctx, b)
}
func (*connTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }
func (c *connTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return c.c.Prepare(ctx, name, sql)
}
func (c *connTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := c.before(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return c.c.Exec(ctx, sql, args...)
}
func (c *connTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := c.before(ctx); err != nil {
		return errRow{err}
	}
	return c.c.QueryRow(ctx, sql, args...)
}
func (c *connTx) Conn() *pgx.Conn { return c.c }

// Query sends River's query; the first one carries the Tx's queued
// statements (and BEGIN) before it and then after it.
func (c *connTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if c.piped {
		if err := c.before(ctx); err != nil {
			return nil, err
		}
		return c.c.Query(ctx, sql, args...)
	}
	c.piped = true
	then := c.then
	c.then = nil
	b, labels, turns := c.t.assemble([]extra{{"river insert", func(b *pgx.Batch) { b.Queue(sql, args...) }}})
	n := len(labels) - 1 // River's query
	for _, x := range then {
		x.queue(b)
		labels = append(labels, x.label)
	}
	br := c.c.SendBatch(ctx, b)
	if err := readResults(br, b, labels, 0, n); err != nil {
		c.errBefore = err
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	c.rows = &pipedRows{Rows: rows, close: func() {
		if err := readResults(br, b, labels, n+1, len(labels)); err != nil {
			c.errAfter = err
			return
		}
		if err := br.Close(); err != nil {
			c.errAfter = fmt.Errorf("store: %w", err)
			return
		}
		if err := c.t.storedTurns(ctx, turns); err != nil {
			c.errAfter = err
		}
	}}
	return c.rows, nil
}

// pipedRows are River's rows in a batch of ours: closing them reads the
// results of the statements sent after them.
type pipedRows struct {
	pgx.Rows
	close func()
	done  bool
}

func (r *pipedRows) Close() {
	r.Rows.Close()
	if !r.done {
		r.done = true
		r.close()
	}
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }
func (errBatch) Tx() pgx.Tx                         { return nil }

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
