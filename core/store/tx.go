package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// Tx is the transaction an Op runs in. Its methods are the only writes.
//
// Two kinds of method, told apart by name:
//
//   - Queue… methods (QueueTurn, QueueMessage, QueueApproval, …) queue a
//     statement whose result nobody reads; they take no context and return
//     at once. Queued statements are sent together in one pipelined round
//     trip, before the next statement that runs now and before commit. An
//     error in one therefore surfaces a little later — still inside the
//     same batch, which then fails and is retried op by op, so it is
//     attributed to the right op.
//   - Every other method runs its statement now (after everything queued,
//     in the same round trip) and returns its result — except that, when
//     the op speculates (Speculate, speculate.go), Approve queues its
//     compare-and-swap guarded and answers as if it applied; the
//     transaction fails if it did not, and runs again without speculation.
//
// Foreign keys fix an order: a row that references another may only be
// queued once its parent is in this transaction's view — inserted earlier
// in it (QueueApproval) or read in it (GetApproval, which locks the row).
// QueueExecution and QueueOutput check this and refuse with ErrOrder
// instead of letting the database fail the whole batch. (A turn's seq, the
// other referenced key, is only known once its insert was sent, so an
// approval naming it cannot precede it.)
//
// The transaction itself is driven by hand on one pooled connection, so
// that BEGIN travels with the first statements and COMMIT with the audit
// rows: a batch of inline turns costs two round trips (BEGIN, the turns,
// the chain lock and head; then the outbox rows, the audit rows and
// COMMIT) instead of one per statement.
type Tx struct {
	conn  *pgxpool.Conn
	begun bool // BEGIN was sent
	// instance is the store's (SetInstance): the processor of the turns
	// it stores, the only one that may finish them.
	instance *string
	now      func() time.Time
	queued   *pgx.Batch
	labels   []string

	// Rows of the hot statements, gathered across all ops of the batch and
	// sent as one multi-row statement each at the next flush: PostgreSQL's
	// per-statement cost then does not grow with the number of turns.
	turns     []queuedTurn
	enqueues  []queuedJob
	finishes  []queuedFinish
	delivered []queuedDelivered
	// River jobs queued by QueueJob, inserted before COMMIT through river.
	jobs  []river.InsertManyParams
	river jobInserter
	// approvals this transaction inserted or read: the parents its
	// executions and outputs may reference (see ErrOrder).
	approvals map[core.ApprovalID]bool
	// execs are the execution inserts QueueExecution queued and not sent
	// yet (ClaimQueuedExecution may still make them claimed ones).
	execs map[core.ApprovalID]*pgx.QueuedQuery
	// decided are the approvals this transaction approved, with the token
	// whose nonce it consumed (Approve; see Decided).
	decided map[core.ApprovalID]decided
	// trips counts the round trips sent; prefetched is a tap's approval
	// and route read, sent with its turn's insert (InsertInlineTurn) for
	// GetApprovalRoute to answer from while nothing was sent since.
	trips      int
	prefetched *approvalRoute
	// finally runs after the batch's statements were sent (see Finally).
	finally []func() ([]audit.Entry, error)
	// fanned are the conversations an edit of a routed card was fanned
	// out to (routes.go), told to the store's FanOut hook once committed.
	fanned []core.ConversationID
	// inline are the turns InsertInlineTurn stored done in this
	// transaction (QueueFinishTurn of them writes nothing more).
	inline map[int64]bool
	// Speculation (speculate.go): noSpeculation is set when the writer
	// re-runs a batch whose guard failed; guards are the queued
	// statements whose check is the server's (guard); lost: a guard
	// failed, nothing of the transaction commits.
	noSpeculation bool
	guards        map[*pgx.QueuedQuery]bool
	lost          bool
}

type queuedTurn struct {
	turn   core.Turn
	body   string
	status core.TurnStatus
	then   func(seq int64, dup bool)
}

type queuedJob struct {
	ch      core.ChannelName
	conv    core.ConversationID
	op      core.OutboxOp
	key     string
	payload string
	// secret: the message carries secret-derived output (outbox.secret_output).
	secret bool
	then   func(id int64)
	// handed, when set, gets the job's id, the ref of the message it
	// edits and the insert's time (Queued).
	handed func(id int64, ref core.MessageRef, now time.Time)
}

type queuedFinish struct {
	seq    int64
	status core.TurnStatus
	err    string
}

type queuedDelivered struct {
	id     int64
	status core.OutboxStatus
}

// Finally registers f to run once the statements queued so far (by every
// op of the batch) were sent, so their callbacks have fired. The entries it
// returns are appended to the audit log with the batch; it may queue more
// statements. It runs again if the batch is retried.
func (t *Tx) Finally(f func() ([]audit.Entry, error)) {
	t.finally = append(t.finally, f)
}

// runFinally runs the registered Finally functions (and any they add).
func (t *Tx) runFinally(ctx context.Context) ([]audit.Entry, error) {
	var out []audit.Entry
	for len(t.finally) > 0 {
		if err := t.flush(ctx); err != nil {
			return nil, err
		}
		fs := t.finally
		t.finally = nil
		for _, f := range fs {
			e, err := f()
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
	}
	return out, nil
}

// ErrOrder is returned by a Queue… method asked to queue a row before the
// row it references is in the transaction's view (see Tx). It is a
// programming error, reported where it is made rather than as a foreign
// key violation that fails the whole batch.
var ErrOrder = errors.New("store: a row was queued before the row it references")

// seen records that approval id is in this transaction's view.
func (t *Tx) seen(id core.ApprovalID) {
	if t.approvals == nil {
		t.approvals = map[core.ApprovalID]bool{}
	}
	t.approvals[id] = true
}

// parent checks the statement-order rule for a row referencing approval id.
func (t *Tx) parent(what string, id core.ApprovalID) error {
	if !t.approvals[id] {
		return fmt.Errorf("%w: %s of approval %s (insert or read the approval first in this transaction)", ErrOrder, what, id)
	}
	return nil
}

// later queues a statement whose result is not needed (beyond a check
// the caller may attach to the returned query: its error fails the send).
func (t *Tx) later(label, sql string, args ...any) *pgx.QueuedQuery {
	if t.queued == nil {
		t.queued = &pgx.Batch{}
	}
	t.labels = append(t.labels, label)
	return t.queued.Queue(sql, args...)
}

// flush sends queued statements, then the gathered multi-row ones, in one
// round trip. Nothing queued depends on a multi-row statement of the same
// flush (they are inserts and updates of rows no queued statement reads).
func (t *Tx) flush(ctx context.Context) error { return t.send(ctx, nil) }

// extra is a statement sent after everything queued, in the same round
// trip (a read, the chain lock, COMMIT).
type extra struct {
	label string
	queue func(b *pgx.Batch)
}

// send sends BEGIN (the first time), the queued statements, the gathered
// multi-row ones and then extras, in one round trip, and reads every
// result in order (running callbacks).
func (t *Tx) send(ctx context.Context, extras []extra) error {
	if len(extras) == 0 && !t.pending() {
		return nil
	}
	b, labels, turns := t.assemble(extras)
	br := t.conn.SendBatch(ctx, b)
	if err := readResults(br, b, labels, 0, len(labels)); err != nil {
		return err
	}
	if err := br.Close(); err != nil {
		return err
	}
	return t.storedTurns(ctx, turns)
}

// unchecked reports whether nothing queued checks its result on this side
// (a callback that may fail the transaction, a Finally function, a
// gathered statement with a check, River jobs): then COMMIT may travel in
// the same round trip as the queued statements, since no error can come
// back after it that should have rolled them back.
func (t *Tx) unchecked() bool {
	// Finishing turns checks on the server (a fenced instance's
	// transaction fails there); the outbox rows' callback only collects
	// their ids (its count check cannot fail for a plain insert).
	if len(t.finally) > 0 || len(t.jobs) > 0 || len(t.turns) > 0 {
		return false
	}
	if t.queued != nil {
		for _, q := range t.queued.QueuedQueries {
			// A guard's check is the server's: a failed one aborts the
			// transaction before COMMIT (speculate.go).
			if q.Fn != nil && !t.guards[q] {
				return false
			}
		}
	}
	return true
}

// pending says statements are queued.
func (t *Tx) pending() bool {
	return (t.queued != nil && t.queued.Len() > 0) || len(t.turns) > 0 || len(t.enqueues) > 0 || len(t.finishes) > 0 || len(t.delivered) > 0
}

// assemble builds send's batch: BEGIN (the first time), the queued
// statements, the gathered multi-row ones, then extras; labels name them
// in order, and turns are the turns it inserts (for storedTurns).
func (t *Tx) assemble(extras []extra) (b *pgx.Batch, labels []string, turns []queuedTurn) {
	t.trips++
	b = &pgx.Batch{}
	if !t.begun {
		b.Queue("BEGIN")
		labels = append(labels, "begin")
		t.begun = true
	}
	if t.queued != nil {
		b.QueuedQueries = append(b.QueuedQueries, t.queued.QueuedQueries...)
		labels = append(labels, t.labels...)
	}
	t.queued, t.labels, t.execs, t.guards = nil, nil, nil, nil
	turns = t.turns
	t.turns = nil
	if len(turns) > 0 {
		queueTurns(b, turns, t.now(), t.instance)
		labels = append(labels, "insert turns")
	}
	if len(t.enqueues) > 0 {
		labels = append(labels, t.queueJobs(b, t.enqueues, t.now())...)
		t.enqueues = nil
	}
	if len(t.finishes) > 0 {
		fs := t.finishes
		t.finishes = nil
		// Fenced: a turn is finished only by its processor (or by anyone
		// when it has none: rows from before instances, tools). A turn
		// not finished here was adopted by another instance, or finished
		// already: its processing is a stale second one, and nothing it
		// queued may commit.
		//
		// The check fails the transaction on the server (a division by
		// zero), not only here: nothing after it in the same round trip —
		// COMMIT, when the writer sends it along (unchecked) — can commit.
		//
		// A few turns (a worker's, at a moderate load: the usual case)
		// get a statement each, without unnest: see singleRowMax.
		if len(fs) <= singleRowMax {
			for _, f := range fs {
				b.Queue(`WITH f AS (UPDATE turns SET status = $3, processed_at = $2, error = NULLIF($4, '')
					WHERE turns.seq = $1 AND turns.status = 'pending' AND (turns.instance IS NULL OR turns.instance = $5 OR $5 IS NULL)
					RETURNING 1)
				SELECT count(*), 1 / (CASE WHEN count(*) = 1 THEN 1 ELSE 0 END) FROM f`, f.seq, t.now(), string(f.status), f.err, t.instance).
					QueryRow(fencedFinish(1))
				labels = append(labels, "finish turn")
			}
		} else {
			seqs, sts, errs := make([]int64, len(fs)), make([]string, len(fs)), make([]string, len(fs))
			for i, f := range fs {
				seqs[i], sts[i], errs[i] = f.seq, string(f.status), f.err
			}
			b.Queue(`WITH f AS (UPDATE turns SET status = u.status, processed_at = $2, error = NULLIF(u.err, '')
				FROM unnest($1::bigint[], $3::text[], $4::text[]) AS u(seq, status, err)
				WHERE turns.seq = u.seq AND turns.status = 'pending' AND (turns.instance IS NULL OR turns.instance = $5 OR $5 IS NULL)
				RETURNING 1)
			SELECT count(*), 1 / (CASE WHEN count(*) = $6 THEN 1 ELSE 0 END) FROM f`, seqs, t.now(), sts, errs, t.instance, len(seqs)).
				QueryRow(fencedFinish(len(seqs)))
			labels = append(labels, "finish turns")
		}
	}
	if len(t.delivered) > 0 {
		ds := t.delivered
		t.delivered = nil
		if len(ds) <= singleRowMax { // see singleRowMax
			for _, d := range ds {
				b.Queue(`UPDATE outbox SET status = $3, delivered_at = $2, attempts = attempts + 1
					WHERE id = $1 AND status = 'pending'`, d.id, t.now(), string(d.status))
				labels = append(labels, "outbox delivered")
			}
		} else {
			ids, sts := make([]int64, len(ds)), make([]string, len(ds))
			for i, d := range ds {
				ids[i], sts[i] = d.id, string(d.status)
			}
			b.Queue(`UPDATE outbox SET status = u.status, delivered_at = $2, attempts = attempts + 1
				FROM unnest($1::bigint[], $3::text[]) AS u(id, status)
				WHERE outbox.id = u.id AND outbox.status = 'pending'`, ids, t.now(), sts)
			labels = append(labels, "outbox delivered")
		}
	}
	for _, x := range extras {
		x.queue(b)
		labels = append(labels, x.label)
	}
	return b, labels, turns
}

// singleRowMax: the multi-row UPDATEs (finishing turns, marking outbox jobs)
// are sent as one statement per row, without unnest, up to singleRowMax
// rows. PostgreSQL plans a prepared statement afresh for its first five
// runs on a connection, then keeps its generic plan unless that plan's
// estimated cost is above the custom plans' — and an unnest of a parameter
// is estimated at 10 rows (100 for a function without a row estimate), of
// a constant array at its length: for the usual one to a few rows the
// generic plan of the unnest form always looks dearer than a custom one,
// so every run was planned anew (four in five finishes, seven in ten
// marks in silas-load's phase (c); every multi-row mark). Without unnest,
// generic and custom plans are the same: planned once per connection, and
// a few such statements in the batch cost less than one planning.
const singleRowMax = 4

// fencedFinish reads a finish's count check (see assemble): the division
// by zero is the server failing a fenced instance's transaction.
func fencedFinish(n int) func(pgx.Row) error {
	return func(r pgx.Row) error {
		var got, one int
		if err := r.Scan(&got, &one); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "22012" { // division_by_zero: the check
				return fmt.Errorf("some of %d turns are no longer this instance's to finish: %w", n, core.ErrFenced)
			}
			return err
		}
		return nil
	}
}

// readResults reads the results of b's statements from..to-1, in order;
// on an error it closes br and returns the error, labelled.
func readResults(br pgx.BatchResults, b *pgx.Batch, labels []string, from, to int) error {
	for i := from; i < to; i++ {
		// Results are read in order; a statement with a callback gets it
		// here (Close would run it too, but without the label).
		var err error
		if fn := b.QueuedQueries[i].Fn; fn != nil {
			err = fn(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			br.Close()
			return fmt.Errorf("store: %s: %w", labels[i], err)
		}
	}
	return nil
}

// storedTurns tells the turns a batch inserted that were stored already
// (then callbacks) their seq.
func (t *Tx) storedTurns(ctx context.Context, turns []queuedTurn) error {
	// Events that were already stored (a redelivery, a repeat within this
	// batch, or a concurrent transaction that stored the same event first)
	// need their seq: one more round trip, with a fresh snapshot, only then.
	var chans, evs []string
	for _, q := range turns {
		if q.then != nil {
			chans, evs = append(chans, string(q.turn.Channel)), append(evs, q.turn.EventID)
		}
	}
	if len(chans) == 0 {
		return nil
	}
	t.trips++
	rows, err := t.conn.Query(ctx, `SELECT channel, event_id, seq FROM turns
		WHERE (channel, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, chans, evs)
	if err != nil {
		return fmt.Errorf("store: find stored turns: %w", err)
	}
	found := map[[2]string]int64{}
	for rows.Next() {
		var ch, ev string
		var seq int64
		if err := rows.Scan(&ch, &ev, &seq); err != nil {
			rows.Close()
			return fmt.Errorf("store: find stored turns: %w", err)
		}
		found[[2]string{ch, ev}] = seq
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: find stored turns: %w", err)
	}
	for i := range turns {
		if turns[i].then == nil {
			continue
		}
		seq, ok := found[[2]string{string(turns[i].turn.Channel), turns[i].turn.EventID}]
		if !ok {
			return fmt.Errorf("store: insert turn %s/%s: neither stored nor found", turns[i].turn.Channel, turns[i].turn.EventID)
		}
		turns[i].then(seq, true)
		turns[i].then = nil
	}
	return nil
}

// Now is the store's clock.
func (t *Tx) Now() time.Time { return t.now() }

// exec runs a statement whose result is read, after the queued ones.
func (t *Tx) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := t.send(ctx, []extra{{"statement", func(b *pgx.Batch) {
		b.Queue(sql, args...).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	}}})
	return tag, err
}

// queryRow runs a query after the queued statements, in the same round
// trip, when the returned row is scanned.
func (t *Tx) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return &lazyRow{t: t, ctx: ctx, sql: sql, args: args}
}

// query runs a query after the queued statements (a round trip of its own;
// for the rare statements that return many rows).
func (t *Tx) query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !t.begun {
		// As the first statement it must still run inside the transaction:
		// send skips BEGIN when nothing is queued, and a read outside it
		// (a SELECT … FOR UPDATE releasing its locks at once) lets a
		// concurrent write land between it and this transaction's writes.
		t.later("begin", "SELECT 1")
	}
	if err := t.send(ctx, nil); err != nil {
		return nil, err
	}
	t.trips++
	return t.conn.Query(ctx, sql, args...)
}

type lazyRow struct {
	t    *Tx
	ctx  context.Context
	sql  string
	args []any
}

// Scan sends the query; "no rows" comes back as pgx.ErrNoRows, unwrapped,
// as from pgx.Row.
func (r *lazyRow) Scan(dest ...any) error {
	var scanErr error
	err := r.t.send(r.ctx, []extra{{"query", func(b *pgx.Batch) {
		b.Queue(r.sql, r.args...).QueryRow(func(row pgx.Row) error { scanErr = row.Scan(dest...); return nil })
	}}})
	if err != nil {
		return err
	}
	return scanErr
}

// rollback ends the transaction after a failure. A connection left in an
// unknown state is not reused (the pool closes connections released inside
// a transaction).
func (t *Tx) rollback() {
	if !t.begun {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = t.conn.Exec(ctx, "ROLLBACK")
}
