package engine

import (
	"context"
	"errors"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/commands"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tracing"
)

// decide applies a tap inside the turn's transaction. An approval card is
// the decider's (core/decide); an access request's card is decided here,
// a card asking to show a secret run's output by the command table, a
// task's question by the task runtime; anything else is unknown.
func (e *Engine) decide(ctx context.Context, tx *store.Tx, o *outcome, tap core.Tap) error {
	ctx, span := tracing.Start(ctx, tracing.SpanDecide)
	defer span.End()
	refuse := func(reason, msg string) error {
		e.applyDecision(o, decide.Refusal(tap, reason, msg, nil), nil)
		return nil
	}
	r, err := e.decider.Tap(ctx, tx, o.st.Turn, o.trust)
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrApprovalID.String(string(tap.Card)), tracing.AttrOutcome.String(r.Outcome()))
	}
	if !errors.Is(err, decide.ErrNoApproval) {
		if err != nil {
			return err
		}
		if r.Queued != "" {
			// A run that cannot start (a declared secret not stored) is
			// refused here: its card goes to refused, never "running…".
			u, err := e.exec.RefuseUnready(ctx, tx, r.Approved, o.st.Turn.Sender)
			if err != nil {
				return err
			}
			if u != nil {
				for i, c := range r.Updates {
					if c.ID == u.Card.ID {
						r.Updates[i] = u.Card
					}
				}
				r.Queued, r.Toast = "", "Not run: "+u.Reason
				o.audit = append(o.audit, u.Audit)
				o.after = append(o.after, u.After)
			}
		}
		dropConsent(&r)
		e.applyDecision(o, r, tx)
		return storeConsent(ctx, tx, r)
	}
	if handled, err := e.revokeTap(ctx, tx, o, tap); handled || err != nil {
		return err
	}
	ar, err := tx.GetAccessRequest(ctx, string(tap.Card))
	if err == nil {
		return e.decideAccess(ctx, tx, o, ar, tap, refuse)
	}
	if !errors.Is(err, core.ErrNotFound) {
		return err
	}
	// A card that asks the owner to show a secret run's output.
	rv, err := e.cmds.RevealTap(ctx, tx, commands.Turn{StoredTurn: o.st, Trust: o.trust}, tap, o)
	if err != nil {
		return err
	}
	if rv.Handled {
		if rv.Refused != "" {
			return refuse(rv.Refused, rv.Toast)
		}
		o.toast = rv.Toast
		return nil
	}
	for _, q := range []Questions{e.cfg.Questions, e.cfg.Flows} {
		if q == nil {
			continue
		}
		// A card an outside agent's question put to the owner, or a
		// flow gate's.
		qt, err := q.Tap(ctx, tx, o.st, o.trust, tap, o)
		if err != nil {
			return err
		}
		if qt.Refused != "" {
			return refuse(qt.Refused, qt.Toast)
		}
		if qt.Handled {
			o.toast = qt.Toast
			return nil
		}
	}
	tp, err := e.taskTap(ctx, tx, o, tap)
	if err != nil {
		return err
	}
	if tp.Refused != "" {
		return refuse(tp.Refused, tp.Toast)
	}
	if tp.Handled {
		if tp.Toast != "" {
			o.toast = tp.Toast
		}
		return nil
	}
	// A card from another conversation is "unknown" too: do not reveal it.
	return refuse("unknown_card", "Unknown card: nothing was changed.")
}

// approvedStarter is a Runs that can start an execution with the request
// its decision approved (execute.Executor).
type approvedStarter interface {
	StartApproved(a core.ApprovalRequest)
}

// decisionClaimer is a Runs that can claim an execution in the
// transaction of the decision that approved it (execute.Executor).
type decisionClaimer interface {
	ClaimWithDecision(tx execute.ClaimTx, a core.ApprovalRequest, entries []audit.Entry) (*execute.Claimed, audit.Entry, string)
	StartClaimed(c *execute.Claimed)
}

// applyDecision adds what a decision shows to the turn's outcome: card
// updates and audit entries in its transaction; once committed, the answer
// to the tapper and the execution it calls for (a declined task call's
// step job was queued by the decider, in the transaction). A refusal
// is a notice to the tapper, not news for the chat: the tap's one answer
// carries it (core/outbox makes it a message only on channels that cannot
// answer a tap).
//
// With tx (the decision's transaction: a tap's, or a turn's whose action
// a policy or a standing consent approved), the execution the decision
// queued is claimed in that same transaction when this process's executor
// runs it at once (core/execute ClaimWithDecision): its start is one
// commit away from the decision instead of two. Otherwise — or when the
// executor declines — it is claimed once committed, in a transaction of
// its own.
func (e *Engine) applyDecision(o *outcome, r decide.Result, tx *store.Tx) {
	o.updates = append(o.updates, r.Updates...)
	for _, n := range r.Notes {
		o.note(n.Kind, n.Data)
		if n.Conversation != "" {
			o.audit[len(o.audit)-1].Conversation = string(n.Conversation)
		}
	}
	if r.Toast != "" {
		o.toast = r.Toast
	}
	if r.Refused != "" {
		o.refused = r.Refused
	}
	if r.Key != "" {
		o.answerKey = r.Key
	}
	if l := r.Outcome(); l != "" {
		e.count.Decision(l)
	}
	id := r.Queued
	if id == "" {
		return
	}
	// Not once in-flight work is being cancelled (the shutdown's grace is
	// over): whether the caller then learns of the commit is a race, and
	// a claimed execution it never starts is interrupted at the next start,
	// where a queued one runs.
	if c, ok := e.exec.(decisionClaimer); ok && tx != nil && r.Approved.ID == id && e.workCtx.Err() == nil {
		// The gate reads the entries this transaction appends (the
		// decision's "token.consumed"); the claim's entry follows them.
		if cl, started, _ := c.ClaimWithDecision(tx, r.Approved, o.audit); cl != nil {
			o.audit = append(o.audit, started)
			o.after = append(o.after, func() { c.StartClaimed(cl) })
			return
		}
	}
	if s, ok := e.exec.(approvedStarter); ok && r.Approved.ID == id {
		// The claim reads the decision of the token just recorded
		// with the approval row (core/execute).
		a := r.Approved
		o.after = append(o.after, func() { s.StartApproved(a) })
	} else {
		o.after = append(o.after, func() { e.exec.Start(id) })
	}
}
