package propose

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/route"
)

// The proposing port of a task's steps (core/tasks' Actions): each tool
// call a task's executor makes goes through the proposer on the path of
// /run — the task's requester's trust, validation, policy, the signed
// request and its card and, when policy allows it, the approval on the
// policy's behalf — written inside the step's own transaction. The
// runtime reads what became of it from the store.

// Tx is the part of a step's transaction a proposal is written in
// (core/store's Tx).
type Tx interface {
	decide.Tx
	QueueApproval(a core.ApprovalRequest)
	QueueMessage(ch core.ChannelName, op core.OutboxOp, key string, m core.OutMessage) error
}

// Trust says who a turn's sender is (core/trust's Book).
type Trust interface {
	Of(ctx context.Context, t core.Turn) (core.Trust, string)
}

// Runs is the executor as a task's proposals need it: the narrow
// start-execution port.
type Runs interface {
	// Start runs an approved action once the transaction that approved it
	// committed.
	Start(id core.ApprovalID)
	// Stop kills running executions (a stopped task's); each is recorded
	// interrupted, never run again.
	Stop(ids []core.ApprovalID)
}

// Counter counts what proposing decided, for metrics.
type Counter interface {
	// Policy counts a policy decision ("external" when trust refused).
	Policy(decision string)
	// Decision counts an approval on the policy's behalf (decide.Result's
	// Outcome).
	Decision(outcome string)
}

// Standing approves a request under a standing consent of its
// conversation (core/decide's Decider), as /run's turn does.
type Standing interface {
	Standing() bool
	ApproveStanding(ctx context.Context, tx decide.StandingTx, a core.ApprovalRequest) (decide.Result, consent.Consent, consent.Code, error)
}

// Steps is the proposing port of a task's steps.
type Steps struct {
	Proposer *Proposer
	Trust    Trust
	Runs     Runs
	// Count is optional.
	Count Counter
	// Standing, when set and on, lets a step's action that needs a tap run
	// under the conversation's standing consent instead: the identical
	// command the owner allowed for a while, with a line instead of a
	// card. The step's transaction must then be a decide.StandingTx.
	Standing Standing
	// Router, when set, sends the card of a step's action that the
	// requesting conversation cannot decide — an allowed person's task, a
	// flow a schedule started, an outside agent's call in a chat no owner
	// reads — to the approvers' own direct conversations, with a status
	// card in the requesting one, exactly as a turn's /run card
	// (core/route); and refuses at once, with the reason, an action no
	// approver can receive. The step's transaction must then be a RoutesTx.
	Router Router
}

// Router plans where a request's card goes (core/route's Router).
type Router interface {
	Plan(ctx context.Context, a core.ApprovalRequest, tr core.Trust) (route.Plan, error)
}

// RoutesTx is a step's transaction that can store where a card was routed
// (core/store's Tx).
type RoutesTx interface {
	QueueApprovalRoutes(routes []core.ApprovalRoute) error
	TransitionApproval(ctx context.Context, id core.ApprovalID, from []core.ApprovalStatus, to core.ApprovalStatus, by core.IdentityID, token []byte) (bool, error)
}

// Step is what became of an action a task's step proposed, in its
// transaction.
type Step struct {
	// Approval is the stored request; "" when the action was not proposed.
	Approval core.ApprovalID
	// Refused says, when it was not proposed, why — in a sentence the
	// person and the model are shown.
	Refused string
	// Approved: policy approved it in the transaction (it runs once
	// Proposed is called).
	Approved bool
	// Messages counts the messages Propose queued to the conversation.
	Messages int
	// Audit are the proposal's entries, in the name of origin's sender,
	// committed with the transaction.
	Audit []audit.Entry
}

// Propose puts pa through the path of /run for origin (the turn that
// started task) inside tx: the request (carrying task, so its decision and
// its execution queue the task's step), its card queued to origin's
// conversation and — when policy allows the action — its approval.
func (s Steps) Propose(ctx context.Context, tx Tx, task string, origin core.Turn, pa core.ProposedAction) (Step, error) {
	return s.ProposeUnder(ctx, tx, task, origin, pa, s.standing())
}

// Under approves, in tx, request a — one the policy sends to a person —
// on behalf of a consent that covers it: the decision and the line the
// person sees instead of the card; refused (the audited refusal) when no
// consent applies, and the card asks as always.
type Under func(ctx context.Context, tx Tx, a core.ApprovalRequest) (r decide.Result, line string, refused *decide.Note, err error)

// standing is Under for the conversation's standing consents (nil when
// off, or when the transaction cannot read them).
func (s Steps) standing() Under {
	if s.Standing == nil || !s.Standing.Standing() {
		return nil
	}
	return func(ctx context.Context, tx Tx, a core.ApprovalRequest) (decide.Result, string, *decide.Note, error) {
		st, ok := tx.(decide.StandingTx)
		if !ok {
			return decide.Result{}, "", &decide.Note{Kind: audit.KindConsentRefused, Data: map[string]any{"approval": string(a.ID), "code": string(consent.Required)}}, nil
		}
		r, c, code, err := s.Standing.ApproveStanding(ctx, st, a)
		if err != nil || code != "" {
			return decide.Result{}, "", &decide.Note{Kind: audit.KindConsentRefused, Data: map[string]any{"approval": string(a.ID), "code": string(code)}}, err
		}
		return r, render.StandingLine(commandOf(a), c, nil), nil, nil
	}
}

// commandOf is a request's command line, as its card shows it.
func commandOf(a core.ApprovalRequest) string {
	var act core.Action
	if json.Unmarshal(a.ActionCanonical, &act) != nil {
		return a.Intent
	}
	return act.CommandLine()
}

// ProposeUnder is Propose with under, when not nil, approving on a
// consent's behalf what the policy sends to a person.
func (s Steps) ProposeUnder(ctx context.Context, tx Tx, task string, origin core.Turn, pa core.ProposedAction, under Under) (Step, error) {
	trust, _ := s.Trust.Of(ctx, origin)
	p := s.Proposer.Propose(core.StoredTurn{Turn: origin}, trust, pa)
	if s.Count != nil && p.Decision != "" {
		s.Count.Policy(p.Decision)
	}
	var out Step
	note := func(notes []decide.Note) {
		for _, n := range notes {
			out.Audit = append(out.Audit, audit.Entry{Kind: n.Kind, Actor: string(origin.Sender), Conversation: string(origin.Conversation), Data: n.Data})
		}
	}
	note(p.Notes)
	if p.Request == nil {
		// Not proposed: refused (trust), blocked by policy or malformed.
		out.Refused = p.Refused
		return out, nil
	}
	p.Request.Task = task
	plan, err := s.plan(ctx, tx, p, trust)
	if err != nil {
		return Step{}, err
	}
	if plan.Refused != "" && under == nil {
		// Nobody can receive its card: refused now, never stored to wait.
		s.unroutable(&out, p, plan, note)
		return out, nil
	}
	tx.QueueApproval(*p.Request)
	var updates []*cards.Card
	var line string
	switch {
	case p.Auto != "":
		r, err := s.Proposer.Approve(ctx, tx, p)
		if err != nil {
			return Step{}, err
		}
		note(r.Notes)
		updates, out.Approved = r.Updates, r.Queued != ""
		if l := r.Outcome(); s.Count != nil && l != "" {
			s.Count.Decision(l)
		}
	case under != nil:
		// Decided as queued, not read back (a round trip): a row this
		// transaction inserts is seen, changed and locked by no other
		// before it commits.
		r, l, refused, err := under(ctx, tx, *p.Request)
		if err != nil {
			return Step{}, err
		}
		if refused != nil {
			note([]decide.Note{*refused})
			if plan.Refused != "" {
				// No consent covers it and nobody can receive its card: the
				// stored request is closed now, never left to expire unseen.
				if _, err := tx.(RoutesTx).TransitionApproval(ctx, p.Request.ID, []core.ApprovalStatus{core.ApprovalPending}, core.ApprovalDeclined, "silas:unroutable", nil); err != nil {
					return Step{}, err
				}
				s.unroutable(&out, p, plan, note)
				return out, nil
			}
			break
		}
		plan = route.Plan{} // decided under the consent: nothing to route
		note(r.Notes)
		out.Approved, line = r.Queued != "", l
		if l := r.Outcome(); s.Count != nil && l != "" {
			s.Count.Decision(l)
		}
		// The card is sent already decided (no buttons): the line says why.
		for _, u := range r.Updates {
			if u.ID == p.Card.ID {
				p.Card = u
			} else {
				updates = append(updates, u)
			}
		}
	}
	// The card first, then what the policy's decision made of it.
	send := func(op core.OutboxOp, c *cards.Card) error {
		return tx.QueueMessage(origin.Channel, op, string(c.ID), core.OutMessage{Conversation: origin.Conversation, Card: c})
	}
	if plan.Routed {
		if err := s.sendRouted(tx, origin, p, plan); err != nil {
			return Step{}, err
		}
		note([]decide.Note{{Kind: audit.KindApprovalRouted, Data: map[string]any{"approval": string(p.Request.ID), "to": plan.Who(), "channels": plan.Where()}}})
	} else if err := send(core.OpSend, p.Card); err != nil {
		return Step{}, err
	}
	for _, c := range updates {
		if err := send(core.OpUpdate, c); err != nil {
			return Step{}, err
		}
	}
	out.Approval, out.Messages = p.Request.ID, 1+len(updates)
	if line != "" {
		if err := tx.QueueMessage(origin.Channel, core.OpSend, "r-"+core.NewID(), core.OutMessage{Conversation: origin.Conversation, Text: line}); err != nil {
			return Step{}, err
		}
		out.Messages++
	}
	return out, nil
}

// plan asks the Router where p's card goes, when p waits for a person
// (zero Plan: where it was asked, as always).
func (s Steps) plan(ctx context.Context, tx Tx, p Proposal, trust core.Trust) (route.Plan, error) {
	if s.Router == nil || p.Auto != "" {
		return route.Plan{}, nil
	}
	if _, ok := tx.(RoutesTx); !ok {
		return route.Plan{}, nil
	}
	plan, err := s.Router.Plan(ctx, *p.Request, trust)
	if err != nil {
		return route.Plan{}, fmt.Errorf("propose: %w", err)
	}
	return plan, nil
}

// unroutable is the step of an action no approver can receive: not
// proposed, the reason said, audited as approval.unroutable.
func (s Steps) unroutable(out *Step, p Proposal, plan route.Plan, note func([]decide.Note)) {
	note([]decide.Note{{Kind: audit.KindApprovalUnroutable, Data: map[string]any{"approval": string(p.Request.ID), "command": p.Card.Command,
		"risk": string(p.Request.Risk), "reason": plan.Refused}}})
	out.Refused = route.Refusal(p.Card.Command, plan.Refused)
}

// sendRouted queues p's routed card: the status card to origin's
// conversation under the card's own key, a copy to each approver's direct
// conversation, and the routes (copies' lanes are kicked after the commit
// by the store's fan-out hook).
func (s Steps) sendRouted(tx Tx, origin core.Turn, p Proposal, plan route.Plan) error {
	d := plan.Deliver(p.Card, *p.Request)
	if err := tx.(RoutesTx).QueueApprovalRoutes(d.Routes); err != nil {
		return err
	}
	if err := tx.QueueMessage(origin.Channel, core.OpSend, string(p.Card.ID), core.OutMessage{Conversation: origin.Conversation, Card: d.Status}); err != nil {
		return err
	}
	for _, c := range d.Copies {
		if err := tx.QueueMessage(c.Channel, core.OpSend, c.Key, core.OutMessage{Conversation: c.Conversation, Card: c.Card}); err != nil {
			return err
		}
	}
	return nil
}

// Proposed starts the execution of an action policy approved, once the
// transaction of p committed.
func (s Steps) Proposed(p Step) {
	if p.Approved {
		s.Runs.Start(p.Approval)
	}
}

// StopRuns kills the running executions of a stopped task.
func (s Steps) StopRuns(ids []core.ApprovalID) {
	if len(ids) > 0 {
		s.Runs.Stop(ids)
	}
}
