// Package outbox delivers what the core enqueued: each conversation with
// something to deliver has a lane that hands its jobs to the channel oldest
// first, records each result with its audit entry, and retries with
// backoff (or the platform's retry_after) until delivered or given up. A
// rate limit or outage delays a conversation; it never drops a message.
// The outbox also runs the expiry sweep that closes approval and
// secure-input cards whose time ran out. It never decides anything about
// a message's content: it delivers what committed.
package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tapseal"
	"github.com/silas-gateway/silas/core/tracing"
)

const (
	// ScanEvery is how often the recovery scan (Scan) runs.
	ScanEvery = time.Second
	// giveUp bounds retries of non-rate-limit failures.
	giveUp = 24 * time.Hour
)

// Config wires an Outbox.
type Config struct {
	Store    *store.Store
	Channels map[core.ChannelName]core.Channel
	Logger   *slog.Logger
	Now      func() time.Time
	// MaxBackoff caps the wait between retries after a platform error
	// (rate limits use retry_after instead).
	MaxBackoff time.Duration
	// After is the timer a lane waits on until a job's retry time (read
	// with Now); default time.After. Tests that run Now faster than real
	// time pass a matching shorter After, so a long outage passes in
	// seconds with every retry it would see.
	After func(time.Duration) <-chan time.Time
	// Concurrency bounds platform calls in flight across all lanes.
	Concurrency int
	// Deliveries counts delivery attempts by result (nil: not counted).
	Deliveries *prometheus.CounterVec
	// Handles opens the sealed tap handles of answer jobs (the engine
	// seals them at intake); nil: handles are stored as given.
	Handles *tapseal.Sealer
	// Cluster says whether other instances share the database and
	// whether this one may still act (nil: alone, as in tests); with
	// others, a lane delivers only while it holds its conversation's
	// claim (lanes.go).
	Cluster Cluster
	// Elsewhere tells the other instances that conv's next job waits for
	// the instance holding ch's connection (a core.HeldSender channel;
	// cluster.Listener.HandOver), which then runs the lane (Nudged). nil:
	// nobody is told; the holder finds the job when its connection comes
	// up or at a recovery scan it runs.
	Elsewhere func(ch core.ChannelName, conv core.ConversationID)
}

// Outbox runs the delivery lanes and the expiry sweep.
type Outbox struct {
	st         *store.Store
	channels   map[core.ChannelName]core.Channel
	log        *slog.Logger
	now        func() time.Time
	after      func(time.Duration) <-chan time.Time
	maxBackoff time.Duration
	results    *prometheus.CounterVec
	handles    *tapseal.Sealer
	cluster    Cluster
	elsewhere  func(core.ChannelName, core.ConversationID)

	mu         sync.Mutex // guards lanes, lanesCtx and missed
	lanes      map[core.ConversationID]*lane
	missed     map[core.ConversationID]bool // handed off while not running
	lanesCtx   context.Context
	laneWG     sync.WaitGroup
	deliverSem chan struct{}

	// splits is how far a message split into several got (by job id), so
	// a retry does not repeat parts; in memory, like a lane.
	splitMu sync.Mutex
	splits  map[int64]splitProgress

	// marks are the lazy delivery marks on their way, by conversation
	// (marks.go).
	markMu sync.Mutex
	marks  map[core.ConversationID]*markChain
}

// New builds an Outbox; it delivers nothing until Run.
func New(cfg Config) *Outbox {
	if cfg.Deliveries == nil {
		cfg.Deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silas_outbox_deliveries_total"}, []string{"result"})
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	return &Outbox{
		after: cfg.After, st: cfg.Store, channels: cfg.Channels, log: cfg.Logger, now: cfg.Now, maxBackoff: cfg.MaxBackoff,
		results: cfg.Deliveries, handles: cfg.Handles, cluster: cfg.Cluster, elsewhere: cfg.Elsewhere, lanes: map[core.ConversationID]*lane{}, splits: map[int64]splitProgress{}, marks: map[core.ConversationID]*markChain{}, missed: map[core.ConversationID]bool{}, deliverSem: make(chan struct{}, max(cfg.Concurrency, 1)),
	}
}

// Kick makes sure conv's delivery lane runs; it is called after a commit
// that enqueued something for conv. Lanes deliver a conversation's jobs
// oldest first, one at a time, so the cost of a delivery does not grow with
// the backlog of other conversations.
//
// n is how many jobs the commit enqueued for conv that the lane must read
// from the database; n < 0 means unknown (the recovery scan): the lane then
// reads until the conversation has nothing pending.
func (ob *Outbox) Kick(conv core.ConversationID, n int) { ob.HandOff(conv, nil, n) }

// HandOff is Kick with jobs the commit enqueued and the caller knows in
// full (store.Queued: new messages with their ids from the insert; card
// edits also with the ref of the message they edit, read in the insert's
// round trip). The lane delivers those from memory without reading them back —
// while this instance is alone on the database, and an edit only while
// its ref is current (store.Queued.RefCurrent); otherwise it reads them
// as any other. n counts the other jobs of the commit, which it reads.
func (ob *Outbox) HandOff(conv core.ConversationID, jobs []store.Queued, n int) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if l, ok := ob.lanes[conv]; ok {
		l.add(jobs, n)
		select {
		case l.kicked <- struct{}{}:
		default:
		}
		return
	}
	if ob.lanesCtx == nil || ob.lanesCtx.Err() != nil {
		// Not running yet (workers resuming stored turns start before Run)
		// or shutting down: Run starts a reading lane for conv, so these
		// jobs are not overtaken by later ones handed over in memory.
		ob.missed[conv] = true
		return
	}
	ob.startLaneLocked(conv, jobs, n)
}

// startLaneLocked starts conv's lane; ob.mu is held.
func (ob *Outbox) startLaneLocked(conv core.ConversationID, jobs []store.Queued, n int) {
	l := &lane{kicked: make(chan struct{}, 1)}
	l.add(jobs, n)
	ob.lanes[conv] = l
	ob.laneWG.Add(1)
	go ob.runLane(ob.lanesCtx, conv, l)
}

// lane is one conversation's delivery state (guarded by Outbox.mu). It is
// in one of two modes. Reading: some pending jobs are known only to the
// database (expect > 0, or unknown); the lane reads the oldest pending job
// each time, which may also be one of mem. Memory: every pending job the
// lane knows of is in mem, in id order, and it delivers them without a
// read — an edit with the ref it carries, superseded when a newer update
// of the same message is in mem (what NextOutboxJob computes: in this
// mode mem holds every pending job). A delivery that fails (its retry time
// is in the database), or a job the lane may not trust (see runLane),
// puts the lane back to reading.
type lane struct {
	// claimed: this lane holds its conversation's claim, made under
	// heartbeat generation gen (lanes.go); only with other instances.
	claimed bool
	gen     uint64
	kicked  chan struct{}
	expect  int  // jobs known to be pending that are not in mem
	unknown bool // pending count unknown: read until empty
	mem     []store.Queued
}

func (l *lane) add(jobs []store.Queued, n int) {
	for _, j := range jobs {
		if j.ID == 0 {
			n++ // its id never arrived: read it like any other
			continue
		}
		// Commits of one conversation may land out of id order (a turn and
		// an execution result); keep mem sorted so the oldest goes first.
		i, _ := slices.BinarySearchFunc(l.mem, j.ID, func(a store.Queued, id int64) int { return cmp.Compare(a.ID, id) })
		l.mem = slices.Insert(l.mem, i, j)
	}
	if n < 0 {
		l.unknown = true
		return
	}
	l.expect += n
}

func (l *lane) reading() bool { return l.unknown || l.expect > 0 }

// delivered records that job id left the queue (delivered or given up); it
// reports whether the lane may stop without looking again.
func (ob *Outbox) laneDone(conv core.ConversationID, l *lane, id int64, fromMem bool) bool {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if !fromMem {
		if i := slices.IndexFunc(l.mem, func(j store.Queued) bool { return j.ID == id }); i >= 0 {
			l.mem = slices.Delete(l.mem, i, i+1)
		} else {
			l.expect--
		}
	}
	if !l.reading() && len(l.mem) == 0 {
		select {
		case <-l.kicked:
		default:
		}
		delete(ob.lanes, conv)
		return true
	}
	return false
}

// nextFromMemory picks the lane's next job from memory, and whether a
// newer update of the same message supersedes it, or reports that the lane
// must read (!ok) or has nothing left (done; the lane is then removed).
func (ob *Outbox) nextFromMemory(conv core.ConversationID, l *lane) (j store.Queued, superseded, ok, done bool) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if l.reading() {
		return j, false, false, false
	}
	if len(l.mem) == 0 {
		select {
		case <-l.kicked:
		default:
		}
		delete(ob.lanes, conv)
		return j, false, false, true
	}
	j = l.mem[0]
	l.mem = l.mem[1:]
	superseded = j.Op == core.OpUpdate && slices.ContainsFunc(l.mem, func(n store.Queued) bool {
		return n.Op == core.OpUpdate && n.Channel == j.Channel && n.MessageKey == j.MessageKey
	})
	return j, superseded, true, false
}

// trusted reports whether the lane may deliver q, a job from memory,
// without reading it back: this instance is alone on the database (else
// another instance may have queued an older job of the conversation, or
// delivered the card meanwhile: the database says what is oldest), and
// for an edit, no ref of its message may have been recorded since it was
// read (a card re-sent as a new message: store.Queued.RefCurrent).
func (ob *Outbox) trusted(q store.Queued) bool {
	if !ob.solo() {
		return false
	}
	return (q.Op != core.OpUpdate && q.Op != core.OpAnswer) || q.RefCurrent()
}

func (ob *Outbox) runLane(ctx context.Context, conv core.ConversationID, l *lane) {
	defer ob.laneWG.Done()
	defer ob.leaveLane(ctx, conv, l)
	kicked := l.kicked
	for {
		q, superseded, fromMem, done := ob.nextFromMemory(conv, l)
		if done {
			return
		}
		if fromMem && !ob.trusted(q) {
			// Read it (and whatever else is pending) from the database.
			ob.mu.Lock()
			l.mem = slices.Insert(l.mem, 0, q)
			l.unknown = true
			ob.mu.Unlock()
			continue
		}
		j, ref := q.OutboxJob, q.Ref
		if !fromMem {
			var err error
			j, superseded, ref, err = ob.st.NextOutboxJob(ctx, conv, ob.unmarked(conv)...)
			if errors.Is(err, core.ErrNotFound) {
				ob.mu.Lock()
				select {
				case <-kicked:
					// Work was enqueued while we looked: look again.
					ob.mu.Unlock()
					continue
				default:
				}
				// Nothing pending: whatever mem holds was handed over after
				// the read (its kick is consumed above) — deliver it next.
				l.unknown, l.expect = false, 0
				if len(l.mem) > 0 {
					ob.mu.Unlock()
					continue
				}
				if l.claimed {
					ob.mu.Unlock()
					more := ob.releaseLane(ctx, conv, l)
					ob.mu.Lock()
					select {
					case <-kicked:
						more = true
					default:
					}
					if more || len(l.mem) > 0 {
						l.unknown = true
						ob.mu.Unlock()
						continue
					}
				}
				delete(ob.lanes, conv)
				ob.mu.Unlock()
				return
			}
			if err != nil {
				if ctx.Err() != nil {
					ob.endLane(conv)
					return
				}
				ob.log.Error("outbox: reading the next job failed", slog.String("conversation", string(conv)), slog.Any("err", err))
				if !ob.sleep(ctx, kicked, time.Second) {
					ob.endLane(conv)
					return
				}
				continue
			}
			if ob.heldElsewhere(j) {
				ob.handOver(ctx, conv, l, j.Channel)
				return
			}
			if wait := j.NextAt.Sub(ob.now()); wait > 0 {
				if !ob.sleep(ctx, kicked, wait) {
					ob.endLane(conv)
					return
				}
				continue
			}
		}
		switch v, wait := ob.mayDeliver(ctx, conv, l, j.Channel); v {
		case laneLost:
			ob.endLane(conv)
			return
		case laneWait, laneRead:
			if v == laneWait && !ob.sleep(ctx, kicked, wait) {
				ob.endLane(conv)
				return
			}
			// Not delivered now: the next read finds it again.
			ob.mu.Lock()
			if fromMem {
				l.mem = slices.Insert(l.mem, 0, q)
			}
			l.unknown = true
			ob.mu.Unlock()
			continue
		}
		// Deliveries use a context of their own so that shutdown lets an
		// in-flight send finish (bounded by the adapter's timeouts).
		delivered := ob.deliver(ob.sendCheck(context.WithoutCancel(ctx), l), j, superseded, ref)
		if !delivered {
			// Its retry time is in the database now: read from here on.
			ob.mu.Lock()
			l.unknown = true
			ob.mu.Unlock()
		}
		if ctx.Err() != nil {
			ob.endLane(conv)
			return
		}
		if delivered && ob.laneDone(conv, l, j.ID, fromMem) {
			return
		}
	}
}

func (ob *Outbox) endLane(conv core.ConversationID) {
	ob.mu.Lock()
	delete(ob.lanes, conv)
	ob.mu.Unlock()
}

// sleep waits d, a kick or the end of ctx; false means ctx ended.
func (ob *Outbox) sleep(ctx context.Context, kicked chan struct{}, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-kicked:
	case <-ob.after(d):
	}
	return true
}

// Run runs the lanes until ctx ends, after starting one for every
// conversation a previous process left pending work in. The periodic
// recovery scan (Scan) is the background room's.
func (ob *Outbox) Run(ctx context.Context) {
	// What a previous process left pending is found before lanes open:
	// a lane that a hand-off starts delivers from memory, and must not
	// overtake an older job of its conversation that only the database
	// knows. Those lanes start reading instead.
	convs, err := ob.st.PendingOutboxConversations(ctx, 10000)
	if err != nil && ctx.Err() == nil {
		ob.log.Error("outbox: scanning for pending work failed", slog.Any("err", err))
	}
	ob.whenSendsHere(ctx)
	ob.mu.Lock()
	ob.lanesCtx = ctx
	for _, c := range convs {
		ob.missed[c] = true
	}
	for c := range ob.missed {
		if _, ok := ob.lanes[c]; !ok {
			ob.startLaneLocked(c, nil, -1)
		}
	}
	clear(ob.missed)
	ob.mu.Unlock()
	defer func() {
		// Under the lock HandOff starts lanes with: a worker finishing a
		// turn during shutdown either started its lane before this (Wait
		// waits for it) or sees the lanes closed, never Add racing Wait.
		ob.mu.Lock()
		ob.lanesCtx = nil
		ob.mu.Unlock()
		ob.laneWG.Wait()
		ob.settleAll(ctx)
	}()
	<-ctx.Done()
}

// Scan is the recovery scan: it starts a lane for every conversation with
// pending work and none running (work enqueued by another process such as
// the CLI, or a lane that ended early). The background room runs it every
// ScanEvery; Run does it once itself before the lanes open.
func (ob *Outbox) Scan(ctx context.Context) error {
	convs, err := ob.st.PendingOutboxConversations(ctx, 10000)
	if err != nil {
		return fmt.Errorf("outbox: scanning for pending work: %w", err)
	}
	for _, c := range convs {
		ob.Kick(c, -1)
	}
	return nil
}

// deliver hands one job to its channel and records the result; it reports
// whether the job left the queue (delivered, superseded or given up).
func (ob *Outbox) deliver(ctx context.Context, j core.OutboxJob, superseded bool, prev core.MessageRef) (left bool) {
	// The delivery joins the trace the card's state was written in.
	ctx, span := tracing.Start(tracing.Recall(ctx, j.MessageKey), tracing.SpanDeliver)
	if span.IsRecording() {
		defer func() { endDelivery(span, j, left) }()
	}
	ch, ok := ob.channels[j.Channel]
	if !ok {
		ob.outboxFail(ctx, j, "channel "+string(j.Channel)+" is not configured")
		return true
	}
	var ref core.MessageRef
	var err error
	status := core.OutboxDelivered
	var ta core.TapAnswerer
	// The semaphore bounds concurrent platform calls only; recording the
	// result waits for a group commit, which many lanes share.
	ob.deliverSem <- struct{}{}
	caps := core.CapabilitiesOf(ch)
	j.Message = renderFor(caps, j.Message)
	switch j.Op {
	case core.OpAnswer:
		ta = ob.tapAnswerer(ch, &j)
		ref, err = answerTapWith(ctx, ch, ta, caps, j, prev)
	case core.OpUpdate:
		if superseded {
			status = core.OutboxSuperseded // a newer edit of the same card follows
			break
		}
		ref, err = updateCard(ctx, ch, caps, j, prev)
	default:
		ref, err = ob.sendSplit(ctx, ch, caps, j)
	}
	<-ob.deliverSem
	if err == nil {
		ob.forgetSplit(j.ID)
	}
	if err == nil {
		m := mark{j: j, ref: ref, status: status}
		if repeatable(j, caps, prev, superseded, ta) {
			// Delivering it again shows nothing: its mark rides in a
			// later transaction and the lane goes on (marks.go).
			ob.markLater(m)
			ob.results.WithLabelValues(string(status)).Inc()
			return true
		}
		// A repeat would be seen: the lane waits for the mark, which goes
		// after the conversation's lazy ones. Nobody else waits for it, so
		// it may share a transaction with other work (see DoBackground).
		ob.settle(ctx, j.Conversation)
		derr := ob.st.DoBackground(ctx, markOp([]mark{m}))
		// Committed or not (a lost answer to COMMIT), it may have
		// recorded a new ref for the card: edits handed over before now
		// are read back (store.Queued.RefCurrent).
		store.RefRecorded(m.j, m.ref)
		if derr != nil {
			ob.jobLog(j).ErrorContext(ctx, "outbox: delivered but could not record it; it may be delivered again", slog.Any("err", derr))
		}
		ob.results.WithLabelValues(string(status)).Inc()
		return derr == nil
	}
	var rl *core.RateLimitedError
	var perm *core.PermanentError
	log := ob.jobLog(j)
	switch {
	case errors.Is(err, core.ErrNotCurrent):
		// Not sent, and not a failure: the lane checks its claim again
		// (lanes.go, sendCheck) and whoever holds it delivers the job.
		log.WarnContext(ctx, "outbox: this instance's heartbeat lapsed before the send; not sent")
		ob.results.WithLabelValues("not_current").Inc()
		return false
	case errors.As(err, &rl):
		wait := max(rl.RetryAfter, 100*time.Millisecond)
		log.WarnContext(ctx, "outbox: rate limited", slog.Duration("retry_after", wait))
		ob.outboxRetry(ctx, j, ob.now().Add(wait), err)
		ob.results.WithLabelValues("rate_limited").Inc()
		return false
	case errors.As(err, &perm):
		log.ErrorContext(ctx, "outbox: permanent delivery failure", slog.Any("err", err))
		ob.outboxFail(ctx, j, err.Error())
		ob.forgetSplit(j.ID)
		return true
	case ob.now().Sub(j.CreatedAt) > giveUp:
		log.ErrorContext(ctx, "outbox: giving up after retrying for a day", slog.Any("err", err))
		ob.outboxFail(ctx, j, err.Error())
		ob.forgetSplit(j.ID)
		return true
	default:
		backoff := min(time.Second<<min(j.Attempts, 16), ob.maxBackoff)
		log.WarnContext(ctx, "outbox: delivery failed; will retry", slog.Any("err", err), slog.Duration("backoff", backoff), slog.Int("attempt", j.Attempts+1))
		ob.outboxRetry(ctx, j, ob.now().Add(backoff), err)
		ob.results.WithLabelValues("retry").Inc()
		return false
	}
}

func (ob *Outbox) jobLog(j core.OutboxJob) *slog.Logger {
	return ob.log.With(slog.Int64("job", j.ID), slog.String("channel", string(j.Channel)), slog.String("conversation", string(j.Conversation)), slog.String("op", string(j.Op)))
}

func (ob *Outbox) outboxRetry(ctx context.Context, j core.OutboxJob, next time.Time, cause error) {
	err := ob.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		return nil, tx.OutboxRetry(ctx, j.ID, next, cause.Error())
	})
	if err != nil {
		ob.log.Error("outbox: could not schedule retry", slog.Int64("job", j.ID), slog.Any("err", err))
	}
}

func (ob *Outbox) outboxFail(ctx context.Context, j core.OutboxJob, reason string) {
	err := ob.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		if err := tx.OutboxFailed(ctx, j.ID, reason); err != nil {
			return nil, err
		}
		return []audit.Entry{{Kind: audit.KindMessageFailed, Actor: "silas", Conversation: string(j.Conversation), Data: map[string]any{"job": j.ID, "key": j.MessageKey}}}, nil
	})
	if err != nil {
		ob.log.Error("outbox: could not record failure", slog.Int64("job", j.ID), slog.Any("err", err))
	}
	ob.results.WithLabelValues("failed").Inc()
}

// messageKind is the audit kind of a delivered job: message.send, or
// message.update for an edit (a tap's answer edits its card).
func messageKind(op core.OutboxOp) audit.Kind {
	if op == core.OpUpdate || op == core.OpAnswer {
		return audit.KindMessageUpdate
	}
	return audit.KindMessageSend
}

// sendJob shows a new message for an outbox job: with the job's message key
// when the channel names messages by it (core.KeyedSender, the web chat,
// whose transcript is read from storage), else with Send.
func sendJob(ctx context.Context, ch core.Channel, j core.OutboxJob) (core.MessageRef, error) {
	if ks, ok := ch.(core.KeyedSender); ok {
		return ks.SendKeyed(ctx, j.MessageKey, j.Message)
	}
	return ch.Send(ctx, j.Message)
}

// endDelivery ends a delivery's span: channel, operation, the card (and
// so the approval) it carried, and whether it left the queue.
func endDelivery(span trace.Span, j core.OutboxJob, left bool) {
	// One SetAttributes call, silas.delivered only when false
	// (tracing.AttrDelivered): every attribute is paid for again in the
	// export, and a text turn's delivery is a third of its spans.
	attrs := [5]attribute.KeyValue{tracing.AttrChannel.String(string(j.Channel)), tracing.AttrOp.String(string(j.Op))}
	n := 2
	if c := j.Message.Card; c != nil {
		attrs[n] = tracing.AttrCardID.String(string(c.ID))
		n++
		if c.Kind == cards.KindApproval {
			attrs[n] = tracing.AttrApprovalID.String(string(c.ID))
			n++
		}
	}
	if !left {
		attrs[n] = tracing.AttrDelivered.Bool(false)
		n++
		span.SetStatus(codes.Error, "not delivered yet")
	}
	span.SetAttributes(attrs[:n]...)
	span.End()
}
