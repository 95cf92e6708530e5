package engine

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
)

// Outbox delivery: each conversation's oldest pending job is delivered
// before the next (in order per chat); conversations proceed in parallel.
// A rate limit or outage delays a conversation; it never drops a message.
const (
	// outboxScan is how often the recovery scan runs.
	outboxScan = time.Second
	// outboxGiveUp bounds retries of non-rate-limit failures.
	outboxGiveUp = 24 * time.Hour
)

// kick makes sure conv's delivery lane runs; it is called after a commit
// that enqueued something for conv. Lanes deliver a conversation's jobs
// oldest first, one at a time, so the cost of a delivery does not grow with
// the backlog of other conversations.
//
// n is how many jobs the commit enqueued for conv that the lane must read
// from the database; n < 0 means unknown (the recovery scan): the lane then
// reads until the conversation has nothing pending.
func (e *Engine) kick(conv core.ConversationID, n int) { e.handOff(conv, nil, n) }

// handOff is kick with jobs the commit enqueued and the caller knows in
// full (new messages: ids from the insert, nothing to supersede or edit).
// The lane delivers those from memory without reading them back; n counts
// the other jobs of the commit, which it reads.
func (e *Engine) handOff(conv core.ConversationID, jobs []core.OutboxJob, n int) {
	e.inflightMu.Lock()
	defer e.inflightMu.Unlock()
	if l, ok := e.lanes[conv]; ok {
		l.add(jobs, n)
		select {
		case l.kicked <- struct{}{}:
		default:
		}
		return
	}
	if e.lanesCtx == nil || e.lanesCtx.Err() != nil {
		return // not running (or shutting down): the scan at start finds it
	}
	l := &lane{kicked: make(chan struct{}, 1)}
	l.add(jobs, n)
	e.lanes[conv] = l
	e.laneWG.Add(1)
	go e.runLane(e.lanesCtx, conv, l)
}

// lane is one conversation's delivery state (guarded by inflightMu). It is
// in one of two modes. Reading: some pending jobs are known only to the
// database (expect > 0, or unknown); the lane reads the oldest pending job
// each time, which may also be one of mem. Memory: every pending job the
// lane knows of is in mem, in id order, and it delivers them without a
// read. A delivery that fails (its retry time is in the database) puts the
// lane back to reading.
type lane struct {
	kicked  chan struct{}
	expect  int  // jobs known to be pending that are not in mem
	unknown bool // pending count unknown: read until empty
	mem     []core.OutboxJob
}

func (l *lane) add(jobs []core.OutboxJob, n int) {
	for _, j := range jobs {
		if j.ID == 0 {
			n++ // its id never arrived: read it like any other
			continue
		}
		// Commits of one conversation may land out of id order (a turn and
		// an execution result); keep mem sorted so the oldest goes first.
		i, _ := slices.BinarySearchFunc(l.mem, j.ID, func(a core.OutboxJob, id int64) int { return cmp.Compare(a.ID, id) })
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
func (e *Engine) laneDone(conv core.ConversationID, l *lane, id int64, fromMem bool) bool {
	e.inflightMu.Lock()
	defer e.inflightMu.Unlock()
	if !fromMem {
		if i := slices.IndexFunc(l.mem, func(j core.OutboxJob) bool { return j.ID == id }); i >= 0 {
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
		delete(e.lanes, conv)
		return true
	}
	return false
}

// next picks the lane's next job from memory, or reports that the lane must
// read (read) or has nothing left (done; the lane is then removed).
func (e *Engine) nextFromMemory(conv core.ConversationID, l *lane) (j core.OutboxJob, ok, done bool) {
	e.inflightMu.Lock()
	defer e.inflightMu.Unlock()
	if l.reading() {
		return j, false, false
	}
	if len(l.mem) == 0 {
		select {
		case <-l.kicked:
		default:
		}
		delete(e.lanes, conv)
		return j, false, true
	}
	j = l.mem[0]
	l.mem = l.mem[1:]
	return j, true, false
}

func (e *Engine) runLane(ctx context.Context, conv core.ConversationID, l *lane) {
	defer e.laneWG.Done()
	kicked := l.kicked
	for {
		j, fromMem, done := e.nextFromMemory(conv, l)
		if done {
			return
		}
		var superseded bool
		var ref core.MessageRef
		if !fromMem {
			var err error
			j, superseded, ref, err = e.st.NextOutboxJob(ctx, conv)
			if errors.Is(err, core.ErrNotFound) {
				e.inflightMu.Lock()
				select {
				case <-kicked:
					// Work was enqueued while we looked: look again.
					e.inflightMu.Unlock()
					continue
				default:
				}
				// Nothing pending: whatever mem holds was handed over after
				// the read (its kick is consumed above) — deliver it next.
				l.unknown, l.expect = false, 0
				if len(l.mem) > 0 {
					e.inflightMu.Unlock()
					continue
				}
				delete(e.lanes, conv)
				e.inflightMu.Unlock()
				return
			}
			if err != nil {
				if ctx.Err() != nil {
					e.endLane(conv)
					return
				}
				e.log.Error("outbox: reading the next job failed", slog.String("conversation", string(conv)), slog.Any("err", err))
				if !e.sleep(ctx, kicked, time.Second) {
					e.endLane(conv)
					return
				}
				continue
			}
			if wait := j.NextAt.Sub(e.now()); wait > 0 {
				if !e.sleep(ctx, kicked, wait) {
					e.endLane(conv)
					return
				}
				continue
			}
		}
		// Deliveries use a context of their own so that shutdown lets an
		// in-flight send finish (bounded by the adapter's timeouts).
		delivered := e.deliver(context.WithoutCancel(ctx), j, superseded, ref)
		if !delivered {
			// Its retry time is in the database now: read from here on.
			e.inflightMu.Lock()
			l.unknown = true
			e.inflightMu.Unlock()
		}
		if ctx.Err() != nil {
			e.endLane(conv)
			return
		}
		if delivered && e.laneDone(conv, l, j.ID, fromMem) {
			return
		}
	}
}

func (e *Engine) endLane(conv core.ConversationID) {
	e.inflightMu.Lock()
	delete(e.lanes, conv)
	e.inflightMu.Unlock()
}

// sleep waits d, a kick or the end of ctx; false means ctx ended.
func (e *Engine) sleep(ctx context.Context, kicked chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-kicked:
	case <-t.C:
	}
	return true
}

// outboxLoop runs the lanes and a slow scan that starts a lane for any
// conversation with pending work and none running (after a restart, or work
// enqueued by another process such as the CLI).
func (e *Engine) outboxLoop(ctx context.Context) {
	e.inflightMu.Lock()
	e.lanesCtx = ctx
	e.inflightMu.Unlock()
	defer func() {
		// Under the lock handOff starts lanes with: a worker finishing a
		// turn during shutdown either started its lane before this (Wait
		// waits for it) or sees the lanes closed, never Add racing Wait.
		e.inflightMu.Lock()
		e.lanesCtx = nil
		e.inflightMu.Unlock()
		e.laneWG.Wait()
	}()
	for {
		convs, err := e.st.PendingOutboxConversations(ctx, 10000)
		if err != nil && ctx.Err() == nil {
			e.log.Error("outbox: scanning for pending work failed", slog.Any("err", err))
		}
		for _, c := range convs {
			e.kick(c, -1)
		}
		t := time.NewTimer(outboxScan)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		t.Stop()
	}
}

// deliver hands one job to its channel and records the result; it reports
// whether the job left the queue (delivered, superseded or given up).
func (e *Engine) deliver(ctx context.Context, j core.OutboxJob, superseded bool, prev core.MessageRef) bool {
	ch, ok := e.channels[j.Channel]
	if !ok {
		e.outboxFail(ctx, j, "channel "+string(j.Channel)+" is not configured")
		return true
	}
	var ref core.MessageRef
	var err error
	status := "delivered"
	// The semaphore bounds concurrent platform calls only; recording the
	// result waits for a group commit, which many lanes share.
	e.deliverSem <- struct{}{}
	switch j.Op {
	case core.OpUpdate:
		if superseded {
			status = "superseded" // a newer edit of the same card follows
			break
		}
		if prev == "" {
			// The original never arrived (or failed for good): show the
			// current state as a new message rather than losing it.
			ref, err = sendJob(ctx, ch, j)
			break
		}
		err = ch.Update(ctx, prev, j.Message)
	default:
		ref, err = sendJob(ctx, ch, j)
	}
	<-e.deliverSem
	if err == nil {
		// Nobody waits for this record but the lane's next delivery, so it
		// may share a transaction with other work (see DoBackground).
		derr := e.st.DoBackground(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
			if err := tx.OutboxDelivered(ctx, j, ref, status); err != nil {
				return nil, err
			}
			return []auditEntry{{Kind: "message." + string(j.Op), Actor: "silas", Conversation: string(j.Conversation),
				Data: map[string]any{"job": j.ID, "key": j.MessageKey, "status": status}}}, nil
		})
		if derr != nil {
			e.jobLog(j).Error("outbox: delivered but could not record it; it may be delivered again", slog.Any("err", derr))
		}
		e.m.outbox.WithLabelValues(status).Inc()
		return derr == nil
	}
	var rl *core.RateLimitedError
	var perm *core.PermanentError
	log := e.jobLog(j)
	switch {
	case errors.As(err, &rl):
		wait := max(rl.RetryAfter, 100*time.Millisecond)
		log.Warn("outbox: rate limited", slog.Duration("retry_after", wait))
		e.outboxRetry(ctx, j, e.now().Add(wait), err)
		e.m.outbox.WithLabelValues("rate_limited").Inc()
		return false
	case errors.As(err, &perm):
		log.Error("outbox: permanent delivery failure", slog.Any("err", err))
		e.outboxFail(ctx, j, err.Error())
		return true
	case e.now().Sub(j.CreatedAt) > outboxGiveUp:
		log.Error("outbox: giving up after retrying for a day", slog.Any("err", err))
		e.outboxFail(ctx, j, err.Error())
		return true
	default:
		backoff := min(time.Second<<min(j.Attempts, 16), e.cfg.OutboxMaxBackoff)
		log.Warn("outbox: delivery failed; will retry", slog.Any("err", err), slog.Duration("backoff", backoff), slog.Int("attempt", j.Attempts+1))
		e.outboxRetry(ctx, j, e.now().Add(backoff), err)
		e.m.outbox.WithLabelValues("retry").Inc()
		return false
	}
}

func (e *Engine) jobLog(j core.OutboxJob) *slog.Logger {
	return e.log.With(slog.Int64("job", j.ID), slog.String("channel", string(j.Channel)), slog.String("conversation", string(j.Conversation)), slog.String("op", string(j.Op)))
}

func (e *Engine) outboxRetry(ctx context.Context, j core.OutboxJob, next time.Time, cause error) {
	err := e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
		return nil, tx.OutboxRetry(ctx, j.ID, next, cause.Error())
	})
	if err != nil {
		e.log.Error("outbox: could not schedule retry", slog.Int64("job", j.ID), slog.Any("err", err))
	}
}

func (e *Engine) outboxFail(ctx context.Context, j core.OutboxJob, reason string) {
	err := e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
		if err := tx.OutboxFailed(ctx, j.ID, reason); err != nil {
			return nil, err
		}
		return []auditEntry{{Kind: "message.failed", Actor: "silas", Conversation: string(j.Conversation), Data: map[string]any{"job": j.ID, "key": j.MessageKey}}}, nil
	})
	if err != nil {
		e.log.Error("outbox: could not record failure", slog.Int64("job", j.ID), slog.Any("err", err))
	}
	e.m.outbox.WithLabelValues("failed").Inc()
}

// expiryLoop closes approval cards whose time ran out, so an old card shows
// "expired" instead of buttons that would only be refused.
func (e *Engine) expiryLoop(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.expireSecretRequests(ctx)
		list, err := e.st.ExpiredApprovals(ctx, e.now(), 100)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Error("expiry: listing failed", slog.Any("err", err))
			}
			continue
		}
		for _, a := range list {
			err := e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
				ok, err := tx.TransitionApproval(ctx, a.ID, []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming}, core.ApprovalExpired, "", nil)
				if err != nil || !ok {
					return nil, err
				}
				a.Status = core.ApprovalExpired
				if err := tx.Enqueue(ctx, a.Channel, core.OpUpdate, string(a.ID), core.OutMessage{Conversation: a.Conversation, Card: e.approvalCard(a, nil)}); err != nil {
					return nil, err
				}
				return []auditEntry{{Kind: "approval.expired", Actor: "silas", Conversation: string(a.Conversation), Data: map[string]any{"approval": string(a.ID)}}}, nil
			})
			if err != nil && ctx.Err() == nil {
				e.log.Error("expiry: could not expire approval", slog.String("approval", string(a.ID)), slog.Any("err", err))
			}
			e.kick(a.Conversation, -1)
		}
	}
}

// expireSecretRequests closes secure-form cards whose link expired unused.
func (e *Engine) expireSecretRequests(ctx context.Context) {
	var expired []secrets.Request
	err := e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
		list, entries, err := tx.ExpireSecretRequests(ctx, 100)
		if err != nil {
			return nil, err
		}
		expired = list
		for _, r := range list {
			if err := tx.Enqueue(ctx, core.ChannelName(r.Channel), core.OpUpdate, r.Ref,
				core.OutMessage{Conversation: core.ConversationID(r.Conversation), Card: secretDoneCard(r, "expired")}); err != nil {
				return nil, err
			}
		}
		return entries, nil
	})
	if err != nil {
		// Do returns when ctx ends even if the writer runs the operation
		// later: expired may still be written, so it is not read.
		if ctx.Err() == nil {
			e.log.Error("expiry: secret requests", slog.Any("err", err))
		}
		return
	}
	for _, r := range expired {
		e.kick(core.ConversationID(r.Conversation), 1)
	}
}
