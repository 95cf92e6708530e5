package engine

import (
	"context"
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
	if !e.inlineCandidate(t) {
		return res, false, nil
	}
	// Reserve the conversation: nothing of it may be queued or running, and
	// turns that arrive meanwhile queue behind this one.
	e.mu.Lock()
	if _, busy := e.queues[t.Conversation]; busy || e.closing {
		e.mu.Unlock()
		return res, false, nil
	}
	q := &convQueue{running: true}
	e.queues[t.Conversation] = q
	e.work.Add(1)
	e.mu.Unlock()
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
		// The outcome's entries were noted before the seq existed.
		entries := make([]auditEntry, 0, len(o.audit))
		for _, a := range o.audit {
			if _, has := a.Data["seq"]; has {
				a.Data = maps.Clone(a.Data)
				a.Data["seq"] = seq
			}
			entries = append(entries, a)
		}
		return entries, nil
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
