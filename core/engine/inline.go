package engine

import (
	"context"
	"log/slog"
	"maps"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/commands"
	"github.com/silas-gateway/silas/core/store"
)

// Inline answers: a turn whose answer needs no database read, no approval
// and no side effect (plain text to the command agent, /help, /whoami, an
// unknown command) is stored and answered in one transaction when its
// conversation has nothing queued. The reply commits with the turn, so the
// turn is never pending: one group commit on the latency path instead of
// two, and no status update. Everything else — taps, /run, commands that
// read or write state, a slow agent — is stored first and answered by the
// conversation's worker, as before.

// Taps, too, are stored together with their decision when their
// conversation has nothing queued (deliverTap): the turn's insert opens
// the transaction the decision is made in, so a tap costs one transaction
// up to its decision instead of two. A tap stored before (a redelivery)
// decides nothing; a failed attempt leaves nothing and takes the worker
// path.

// inlineCandidate is the cheap test before any work: could this turn be
// answered inline at all?
func (e *Engine) inlineCandidate(t core.Turn) bool {
	if t.Tap != nil || len(t.Redacted) > 0 {
		return false
	}
	if a, ok := e.cfg.Agent.(core.InlineAgent); !ok || !a.Inline() {
		return false
	}
	p := commands.Parse(t.Text)
	if !p.Command {
		// The agent answers it — unless tasks run here: a task may be
		// waiting for this text as its question's answer (a read).
		return e.tasks == nil
	}
	return p.Inline // an unknown command is answered from memory too
}

// deliverInline stores and answers t in one transaction when it can; ok
// reports whether it took the turn (res and err are then Deliver's answer).
func (e *Engine) deliverInline(ctx context.Context, t core.Turn) (res core.DeliverResult, ok bool, err error) {
	if !e.solo() {
		// Another instance may hold an earlier turn of this conversation:
		// only the worker path waits for it (order per conversation).
		return res, false, nil
	}
	if t.Tap != nil && len(t.Redacted) == 0 {
		return e.deliverTap(t)
	}
	if !e.inlineCandidate(t) {
		return res, false, nil
	}
	q, reserved := e.reserve(t.Conversation)
	if !reserved {
		return res, false, nil
	}
	released := false
	defer func() {
		if !released {
			e.release(t.Conversation, q)
		}
	}()

	start := e.now()
	o := outcome{st: core.StoredTurn{Turn: t}}
	var why string
	o.trust, why = e.trust.Of(ctx, t)
	o.note(audit.KindTrustDecided, map[string]any{"seq": int64(0), "trust": string(o.trust), "basis": why})
	if e.gate(&o) {
		if o.inTx == nil {
			if err := e.handleText(ctx, &o); err != nil {
				return res, false, nil // the worker path retries and reports it
			}
		}
	}
	if o.inTx != nil || len(o.appr) > 0 || len(o.cards) > 0 || len(o.updates) > 0 || len(o.sends) > 0 || len(o.after) > 0 {
		return res, false, nil
	}

	seq, dup, err := e.storeTurn(ctx, t, core.TurnDone, func(tx *store.Tx, seq int64) ([]auditEntry, error) {
		o.jobs = nil
		for _, r := range o.replies {
			if err := o.send(tx, "r-"+core.NewID(), core.OutMessage{Conversation: t.Conversation, Text: r}); err != nil {
				return nil, err
			}
		}
		return withSeq(nil, o.audit, seq), nil
	})
	if err != nil || dup {
		// dup: stored before; the stored turn is (or was) answered on its own.
		return core.DeliverResult{Seq: seq, Duplicate: dup}, true, err
	}
	if h := e.cfg.Hooks.TurnDone; h != nil {
		h(seq, t.Conversation)
	}
	e.m.turnLatency.Observe(e.now().Sub(start).Seconds())
	e.m.turnsProcessed.Inc()
	e.out.HandOff(t.Conversation, o.jobs, 0)
	released = true
	e.release(t.Conversation, q)
	return core.DeliverResult{Seq: seq}, true, nil
}

// reserve reserves conv for an inline answer: nothing of it may be queued
// or running, and turns that arrive meanwhile queue behind this one.
func (e *Engine) reserve(conv core.ConversationID) (*convQueue, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, busy := e.queues[conv]; busy || e.closing {
		return nil, false
	}
	q := &convQueue{running: true}
	e.queues[conv] = q
	e.work.Add(1)
	return q, true
}

// deliverTap stores tap t and decides it in one transaction (processTurn
// with no seq yet) when its conversation is idle. It runs on the engine's
// work context, not the caller's: once the transaction may commit, what
// follows the commit (the answer, starting the execution) must run.
func (e *Engine) deliverTap(t core.Turn) (res core.DeliverResult, ok bool, err error) {
	q, reserved := e.reserve(t.Conversation)
	if !reserved {
		return res, false, nil
	}
	defer e.release(t.Conversation, q)
	seq, dup, err := e.processTurn(e.workCtx, core.StoredTurn{Turn: t})
	if err != nil {
		// Nothing was stored: the worker path stores it, retries and
		// reports.
		e.log.Warn("a tap could not be decided as it was stored; queued instead", slog.String("conversation", string(t.Conversation)), slog.Any("err", err))
		return res, false, nil
	}
	return core.DeliverResult{Seq: seq, Duplicate: dup}, true, nil
}

// storeWithOutcome stores the turn of o, not stored yet, first in tx —
// done at once (store.Tx.InsertInlineTurn: the outcome's own completion
// in the same transaction then writes nothing more) — with its
// turn.received entry, and gives the entries noted before it existed their
// seq. dup: it was stored before; nothing is to be done.
func (e *Engine) storeWithOutcome(ctx context.Context, tx *store.Tx, o *outcome) (dup bool, err error) {
	t := o.st.Turn
	seq, dup, err := tx.InsertInlineTurn(ctx, t)
	o.st.Seq = seq
	if err != nil || dup {
		return dup, err
	}
	o.audit = withSeq([]auditEntry{receivedEntry(t, seq)}, o.audit, seq)
	return false, nil
}

// withSeq appends entries noted before the turn's seq existed to dst,
// with the seq they name set.
func withSeq(dst, entries []auditEntry, seq int64) []auditEntry {
	for _, a := range entries {
		if _, has := a.Data["seq"]; has {
			a.Data = maps.Clone(a.Data)
			a.Data["seq"] = seq
		}
		dst = append(dst, a)
	}
	return dst
}

// release ends an inline reservation of conv. Turns queued behind it get a
// worker, which inherits the reservation's place in e.work.
func (e *Engine) release(conv core.ConversationID, q *convQueue) {
	e.mu.Lock()
	if len(q.items) == 0 {
		q.running = false
		delete(e.queues, conv)
		e.mu.Unlock()
		e.work.Done()
		return
	}
	e.mu.Unlock()
	go e.worker(conv, q)
}
