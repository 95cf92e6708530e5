package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/silas-gateway/silas/core/audit"
)

// Op is one unit of work for Do. It runs inside a shared transaction and
// returns the audit entries to append. It must be safe to run twice: when a
// batch fails, each op is retried alone so one bad op cannot fail others.
// Answers (such as "already decided") are results the op records in its
// closure, not errors; an error rolls the op back.
type Op func(ctx context.Context, tx *Tx) ([]audit.Entry, error)

type request struct {
	op   Op
	done chan error
	// then, when set (DoLazy), gets the result instead of done; it runs on
	// the writer's goroutine and must not block.
	then func(error)
	// span is the caller's span (invalid when tracing is off): the op's
	// statements and the jobs it queues belong to the caller's trace.
	span trace.SpanContext
}

// writer is the group-commit loop: while one transaction commits, new
// requests queue up and share the next one. Throughput scales with batch size
// instead of being bound by one commit per operation. Several loops run at
// once so one batch's round trips overlap another's commit; only the audit
// append (under the chain lock) and the commit are serial.
type writer struct {
	s         *Store
	reqs      chan *request
	bg        chan *request // DoBackground: may wait bgDelay for company
	bgDelay   time.Duration
	lazy      chan *request // DoLazy: may wait lazyDelay for company
	lazyDelay time.Duration
	maxBatch  int
	// nloops is how many loops run; with one, head is the audit chain's
	// head as this writer's last commit left it (headOK), used by the
	// next commit instead of reading it (knownHead).
	nloops  int
	head    chainHead
	headOK  bool
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
	loops   sync.WaitGroup
}

// defaultWriters is how many transactions may be open at once. One: a
// batch costs two or three round trips, and every batch serialises on the audit
// chain lock anyway, so more loops only split the load into more, smaller
// transactions that queue for the lock. Measured on the 2-CPU machine of
// BENCHMARKS.md at 1,000 turns/s: PostgreSQL CPU per turn about 0.5 ms
// with one loop against about 1 ms with two or three, at no loss of
// closed-loop throughput.
const defaultWriters = 1

// defaultLazyDelay is how long a DoLazy op waits for a transaction to ride
// in. Long enough that at a few approvals a second the mark of a card's
// last edit meets the next tap's transaction (50 taps/s: one every few ms;
// 10/s: ≈ 90 ms after an execution's verdict), short enough that a store
// whose traffic stopped records it soon. Nobody waits for it.
const defaultLazyDelay = 200 * time.Millisecond

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("store: closed")

func newWriter(s *Store, maxBatch, loops int) *writer {
	w := &writer{s: s, reqs: make(chan *request, 4*maxBatch), bg: make(chan *request, 4*maxBatch), lazy: make(chan *request, 4*maxBatch), maxBatch: maxBatch, nloops: loops, stop: make(chan struct{}), stopped: make(chan struct{})}
	w.loops.Add(loops)
	for range loops {
		go w.loop()
	}
	go func() { w.loops.Wait(); close(w.stopped) }()
	return w
}

func (w *writer) close() {
	w.once.Do(func() { close(w.stop) })
	<-w.stopped
}

// Do runs op in a transaction shared with other concurrent operations and
// returns once it has committed (or failed). If ctx ends first Do returns
// ctx.Err(), and the op may still commit later: ops are idempotent by design.
func (s *Store) Do(ctx context.Context, op Op) error { return s.do(ctx, op, s.w.reqs) }

// DoBackground is Do for work nobody is waiting to see (recording that a
// message was delivered): when no writer is busy it waits up to
// Options.BackgroundDelay for other operations, so that at a moderate load
// such records ride along in other transactions instead of each paying
// for a commit of its own. An ordinary Do arriving meanwhile ends the wait.
func (s *Store) DoBackground(ctx context.Context, op Op) error { return s.do(ctx, op, s.w.bg) }

// DoLazy queues op and returns at once; then gets its result (nil once
// committed) on the writer's goroutine, so it must not block. The op waits
// up to Options.LazyDelay for company: any Do ends the wait (the op rides
// in that transaction), a DoBackground shortens it to BackgroundDelay. It
// is for records whose only cost when late is a repeat nobody sees (the
// outbox's mark of a card edit that re-applying changes nothing, see
// core/outbox/marks.go): at a steady load they cost no commit of their own.
// After Close, then gets ErrClosed (or nothing, when Close won the race
// with the queueing: the op then never runs).
func (s *Store) DoLazy(op Op, then func(error)) {
	r := &request{op: op, then: then}
	select {
	case <-s.w.stop:
		then(ErrClosed)
		return
	case s.w.lazy <- r:
		return
	default:
	}
	// The queue is full (or then queues the next op from the writer's own
	// goroutine): wait for room elsewhere.
	go func() {
		select {
		case s.w.lazy <- r:
		case <-s.w.stop:
			then(ErrClosed)
		}
	}()
}

func (s *Store) do(ctx context.Context, op Op, q chan *request) error {
	r := &request{op: op, done: make(chan error, 1), span: trace.SpanContextFromContext(ctx)}
	select {
	case <-s.w.stop:
		return ErrClosed
	default:
	}
	select {
	case q <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.w.stop:
		return ErrClosed
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-s.w.stopped:
		// The writer exited; it may have run the request just before.
		select {
		case err := <-r.done:
			return err
		default:
			return ErrClosed
		}
	}
}

func (w *writer) loop() {
	defer w.loops.Done()
	batch := make([]*request, 0, w.maxBatch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var first *request
		var delay time.Duration // how long first may wait for company
		select {
		case first = <-w.reqs:
		case first = <-w.bg:
			delay = w.bgDelay
		case first = <-w.lazy:
			delay = w.lazyDelay
		case <-w.stop:
			// Finish what is already queued, then stop.
			for {
				select {
				case r := <-w.reqs:
					w.run([]*request{r})
				case r := <-w.bg:
					w.run([]*request{r})
				case r := <-w.lazy:
					w.run([]*request{r})
				default:
					return
				}
			}
		}
		batch = append(batch[:0], first)
		if delay > 0 {
			// Wait for company; any ordinary request ends the wait, a
			// background one shortens a lazy one's.
			deadline := time.Now().Add(delay)
			timer.Reset(delay)
		wait:
			for len(batch) < w.maxBatch {
				select {
				case r := <-w.bg:
					batch = append(batch, r)
					if d := time.Now().Add(w.bgDelay); d.Before(deadline) {
						// Reset drops a pending expiry (go.mod ≥ 1.23).
						deadline = d
						timer.Reset(w.bgDelay)
					}
				case r := <-w.lazy:
					batch = append(batch, r)
				case r := <-w.reqs:
					batch = append(batch, r)
					break wait
				case <-timer.C:
					break wait
				case <-w.stop:
					break wait
				}
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
	fill:
		for len(batch) < w.maxBatch {
			select {
			case r := <-w.reqs:
				batch = append(batch, r)
			case r := <-w.bg:
				batch = append(batch, r)
			case r := <-w.lazy:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		w.run(batch)
	}
}

func (w *writer) run(batch []*request) {
	err := classify(w.commitOnce(batch))
	if err == nil || len(batch) == 1 {
		for _, r := range batch {
			r.finish(err)
		}
		return
	}
	// Isolate the failing op: retry each alone.
	for _, r := range batch {
		r.finish(classify(w.commitOnce([]*request{r})))
	}
}

func (r *request) finish(err error) {
	if r.then != nil {
		r.then(err)
		return
	}
	r.done <- err
}

// commitOnce is commit, run again when nothing had committed because the
// chain's head it knew had moved (then reading the head), or because a
// speculated compare-and-swap did not apply (then without speculation:
// speculate.go). Each can happen once: a head read under the lock does not
// move, and without speculation no guard is queued.
func (w *writer) commitOnce(batch []*request) error {
	speculate := true
	var err error
	for range 3 {
		err = w.commit(batch, speculate)
		switch {
		case errors.Is(err, errStaleHead):
		case errors.Is(err, errSpeculationLost) && speculate:
			speculate = false
		default:
			return err
		}
	}
	return err
}

func (w *writer) commit(batch []*request, speculate bool) (err error) {
	var tx *Tx
	defer func() {
		if err != nil {
			w.forgetHead()
			if tx != nil && tx.lost && !errors.Is(err, errSpeculationLost) {
				// A guard failed, whatever error an op made of it (or
				// swallowed, the transaction aborted): run again.
				err = fmt.Errorf("%w (%v)", errSpeculationLost, err)
			}
		}
	}()
	// The writer outlives callers' contexts; bound each transaction instead.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := w.s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	tx = &Tx{conn: conn, now: w.s.now, river: w.s.jobs, instance: w.s.instanceArg(), noSpeculation: !speculate}
	committed := false
	defer func() {
		if !committed {
			tx.rollback()
		}
		conn.Release()
		if committed {
			w.s.fannedOut(tx.fanned)
		}
	}()
	var entries []audit.Entry
	if batch[0].span.IsValid() {
		// The batch's own statements (BEGIN, the audit rows, COMMIT) go to
		// the first caller's trace.
		ctx = trace.ContextWithSpanContext(ctx, batch[0].span)
	}
	for _, r := range batch {
		opCtx := ctx
		if r.span.IsValid() {
			opCtx = trace.ContextWithSpanContext(ctx, r.span)
		}
		e, err := r.op(opCtx, tx)
		if err != nil {
			return err
		}
		entries = append(entries, e...)
	}
	// COMMIT of a transaction that failed earlier answers ROLLBACK, not an
	// error (as pgx.Tx.Commit checks too).
	commit := extra{"commit", func(b *pgx.Batch) {
		b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
			if ct.String() != "COMMIT" {
				return pgx.ErrTxCommitRollback
			}
			return nil
		})
	}}
	lock := extra{"audit lock", func(b *pgx.Batch) { b.Queue("SELECT pg_advisory_xact_lock($1)", int64(auditLockKey)) }}
	if head, ok := w.knownHead(); ok && tx.unchecked() {
		// The chain's head is known from this writer's last commit, and
		// nothing queued checks its result on this side (so nothing can
		// fail the transaction once COMMIT is sent; a guard's check is
		// the server's, speculate.go): what the ops queued,
		// the lock, a check that the head is still that one (another
		// process may have appended since), the rows and COMMIT in one
		// round trip instead of two — a delivery mark's batch. A stale
		// head fails the check, and with it the transaction, before
		// anything commits; the batch is then run again reading the
		// head (commitOnce).
		rows, next, err := w.auditRows(entries, head)
		if err != nil {
			return err
		}
		extras := []extra{lock}
		if rows != nil {
			extras = append(extras, headCheck(head), *rows)
		}
		if err := tx.send(ctx, append(extras, commit)); err != nil {
			return err
		}
		committed = true
		w.setHead(next)
		return nil
	}
	// What the ops queued, the River jobs they queued, the chain lock and
	// the head: one round trip (together with BEGIN when no op needed a
	// result earlier; River's insert carries the rest, insertJobsThen), in
	// that order — the lock after every row the ops write. Taking the lock
	// before the Finally functions run costs nothing with one writer loop
	// (nothing else in this process contends for it) and saves a round
	// trip: their statements go with the audit rows and COMMIT.
	head := chainHead{prev: audit.Genesis}
	headErr := pgx.ErrNoRows
	err = tx.insertJobsThen(ctx, []extra{
		lock,
		{"audit head", func(b *pgx.Batch) {
			b.Queue("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1").QueryRow(func(row pgx.Row) error {
				headErr = row.Scan(&head.seq, &head.prev)
				return nil
			})
		}},
	})
	if err != nil {
		return err
	}
	if headErr != nil && !errors.Is(headErr, pgx.ErrNoRows) {
		return fmt.Errorf("store: audit head: %w", headErr)
	}
	more, err := tx.runFinally(ctx)
	if err != nil {
		return err
	}
	if len(tx.jobs) > 0 { // jobs a Finally function queued
		if err := tx.insertJobs(ctx); err != nil {
			return err
		}
	}
	// Statements a Finally function queued (an executor's card update once
	// its transition applied) go with the audit rows and COMMIT, after the
	// chain lock as before: no round trip of their own.
	entries = append(entries, more...)
	rows, next, err := w.auditRows(entries, head)
	if err != nil {
		return err
	}
	extras := []extra{commit}
	if rows != nil {
		extras = []extra{*rows, commit}
	}
	if err := tx.send(ctx, extras); err != nil {
		return err
	}
	committed = true
	w.setHead(next)
	return nil
}

// chainHead is the audit chain's last entry: its seq and hash (seq 0 and
// the genesis hash for an empty log).
type chainHead struct {
	seq  int64
	prev []byte
}

// errStaleHead: the audit chain's head was not the one this writer last
// wrote (another process appended); nothing was committed.
var errStaleHead = errors.New("store: the audit chain's head moved")

// knownHead is the head this writer's last commit left, when it may be
// used: one writer loop (with several, each would find the others' heads)
// and an entry key already loaded (a new one is made under the lock).
func (w *writer) knownHead() (chainHead, bool) {
	if w.nloops != 1 || !w.headOK || !w.s.entryKeyLoaded() {
		return chainHead{}, false
	}
	return w.head, true
}

// setHead remembers the head a commit left; forgetHead, after a failed
// one, makes the next commit read it.
func (w *writer) setHead(h chainHead) {
	if w.nloops == 1 && h.seq > 0 {
		w.head, w.headOK = h, true
	}
}

func (w *writer) forgetHead() {
	if w.nloops == 1 {
		w.headOK = false
	}
}

// headCheck fails the transaction (division by zero, before the rows and
// COMMIT run) unless the chain's last entry is still h.
func headCheck(h chainHead) extra {
	return extra{"audit head check", func(b *pgx.Batch) {
		b.Queue(`SELECT 1 / (SELECT count(*)::int FROM (SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1) l
			WHERE l.seq = $1 AND l.hash = $2)`, h.seq, h.prev).QueryRow(func(row pgx.Row) error {
			var one int
			if err := row.Scan(&one); err != nil {
				return fmt.Errorf("%w (%v)", errStaleHead, err)
			}
			return nil
		})
	}}
}

// auditRows is the statement appending entries after head, and the head it
// leaves; nil (and head) when there are no entries.
func (w *writer) auditRows(entries []audit.Entry, head chainHead) (*extra, chainHead, error) {
	if len(entries) == 0 {
		return nil, head, nil
	}
	seq, prev := head.seq, head.prev
	// The entry key, loaded (or made, MACing from seq+1) under the lock.
	ek, err := w.s.auditEntryKey(seq)
	if err != nil {
		return nil, head, err
	}
	var mac *audit.MACer
	if ek != nil {
		mac = ek.NewMACer()
	}
	now := w.s.now()
	prepared := make([]audit.Prepared, len(entries))
	for i, e := range entries {
		if prepared[i], err = audit.Prepare(now, e); err != nil {
			return nil, head, err
		}
	}
	n := len(prepared)
	seqs, ats, kinds, actors, convs, datas, prevs, hashes, macs := make([]int64, n), make([]time.Time, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([][]byte, n), make([][]byte, n), make([][]byte, n)
	for i, e := range prepared {
		seq++
		h := audit.Chain(prev, e.Canonical(seq))
		seqs[i], ats[i], kinds[i], actors[i], convs[i], datas[i], prevs[i], hashes[i] = seq, e.At, string(e.Entry.Kind), e.Entry.Actor, e.Entry.Conversation, string(e.DataJSON), prev, h
		if ek.Covers(seq) {
			macs[i] = mac.MAC(h)
		}
		prev = h
	}
	return &extra{"audit append", func(b *pgx.Batch) {
		b.Queue(`INSERT INTO audit_log (seq, at, kind, actor, conversation, data, prev_hash, hash, mac)
				SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::jsonb[], $7::bytea[], $8::bytea[], $9::bytea[])`,
			seqs, ats, kinds, actors, convs, datas, prevs, hashes, macs)
	}}, chainHead{seq: seq, prev: prev}, nil
}

// auditLockKey serialises appends to the chain across processes (serve and
// CLI commands) with a transaction-scoped advisory lock.
const auditLockKey = 0x5117A5A0D17
