package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
)

// Outbox delivery: each conversation's oldest pending job is delivered
// before the next (in order per chat); conversations proceed in parallel.
// A rate limit or outage delays a conversation; it never drops a message.
const (
	outboxMaxIdle    = time.Second
	outboxMaxBackoff = 5 * time.Minute
	// outboxGiveUp bounds retries of non-rate-limit failures.
	outboxGiveUp = 24 * time.Hour
)

func (e *Engine) wakeOutbox() {
	select {
	case e.outboxWake <- struct{}{}:
	default:
	}
}

func (e *Engine) outboxLoop(ctx context.Context) {
	// Deliveries use their own context so shutdown lets an in-flight send
	// finish (bounded by the HTTP client's timeout) instead of tearing it.
	dctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan core.ConversationID, 64)
	active := 0
	for {
		jobs, err := e.st.OutboxHeads(ctx, e.now(), 128)
		if err != nil && ctx.Err() == nil {
			e.log.Error("outbox: listing jobs failed", slog.Any("err", err))
		}
		for _, j := range jobs {
			e.inflightMu.Lock()
			busy := e.inflight[j.Conversation]
			if !busy {
				e.inflight[j.Conversation] = true
			}
			e.inflightMu.Unlock()
			if busy {
				continue
			}
			active++
			go func(j core.OutboxJob) {
				e.deliver(dctx, j)
				done <- j.Conversation
			}(j)
		}
		wait := outboxMaxIdle
		if next, err := e.st.NextOutboxDue(ctx); err == nil && !next.IsZero() {
			if d := next.Sub(e.now()); d < wait {
				wait = max(d, 5*time.Millisecond)
			}
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			for ; active > 0; active-- {
				e.release(<-done)
			}
			return
		case conv := <-done:
			active--
			e.release(conv)
		case <-e.outboxWake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (e *Engine) release(conv core.ConversationID) {
	e.inflightMu.Lock()
	delete(e.inflight, conv)
	e.inflightMu.Unlock()
}

func (e *Engine) deliver(ctx context.Context, j core.OutboxJob) {
	log := e.log.With(slog.Int64("job", j.ID), slog.String("channel", string(j.Channel)), slog.String("conversation", string(j.Conversation)), slog.String("op", string(j.Op)))
	ch, ok := e.channels[j.Channel]
	if !ok {
		e.outboxFail(ctx, j, "channel "+string(j.Channel)+" is not configured")
		return
	}
	var ref core.MessageRef
	var err error
	status := "delivered"
	switch j.Op {
	case core.OpUpdate:
		if later, lerr := e.st.HasLaterUpdate(ctx, j); lerr == nil && later {
			status = "superseded" // a newer edit of the same card follows
			break
		}
		prev, rerr := e.st.SentRef(ctx, j.Channel, j.MessageKey)
		if errors.Is(rerr, core.ErrNotFound) {
			// The original never arrived (or failed for good): show the
			// current state as a new message rather than losing it.
			ref, err = ch.Send(ctx, j.Message)
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
		err = ch.Update(ctx, prev, j.Message)
	default:
		ref, err = ch.Send(ctx, j.Message)
	}
	if err == nil {
		derr := e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
			if err := tx.OutboxDelivered(ctx, j, ref, status); err != nil {
				return nil, err
			}
			return []auditEntry{{Kind: "message." + string(j.Op), Actor: "silas", Conversation: string(j.Conversation),
				Data: map[string]any{"job": j.ID, "key": j.MessageKey, "status": status}}}, nil
		})
		if derr != nil {
			log.Error("outbox: delivered but could not record it; it may be delivered again", slog.Any("err", derr))
		}
		e.m.outbox.WithLabelValues(status).Inc()
		return
	}
	var rl *core.RateLimitedError
	var perm *core.PermanentError
	switch {
	case errors.As(err, &rl):
		wait := max(rl.RetryAfter, 100*time.Millisecond)
		log.Warn("outbox: rate limited", slog.Duration("retry_after", wait))
		e.outboxRetry(ctx, j, e.now().Add(wait), err)
		e.m.outbox.WithLabelValues("rate_limited").Inc()
	case errors.As(err, &perm):
		log.Error("outbox: permanent delivery failure", slog.Any("err", err))
		e.outboxFail(ctx, j, err.Error())
	case e.now().Sub(j.CreatedAt) > outboxGiveUp:
		log.Error("outbox: giving up after retrying for a day", slog.Any("err", err))
		e.outboxFail(ctx, j, err.Error())
	default:
		backoff := min(time.Second<<min(j.Attempts, 16), outboxMaxBackoff)
		log.Warn("outbox: delivery failed; will retry", slog.Any("err", err), slog.Duration("backoff", backoff), slog.Int("attempt", j.Attempts+1))
		e.outboxRetry(ctx, j, e.now().Add(backoff), err)
		e.m.outbox.WithLabelValues("retry").Inc()
	}
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
		}
		if len(list) > 0 {
			e.wakeOutbox()
		}
	}
}
