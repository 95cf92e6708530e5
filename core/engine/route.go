package engine

import (
	"context"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/route"
)

// route adds p's card to the turn's outcome where the router (core/route)
// says it goes: here as always; to the approvers' own direct
// conversations, with a status card here and the routes stored with the
// request; or nowhere — no approver can receive it, so the requester is
// told why at once and the request is not stored (ok false): nothing waits
// unseen until it expires.
func (e *Engine) route(ctx context.Context, o *outcome, p propose.Proposal) (ok bool, err error) {
	if e.cfg.Router == nil {
		o.cards = append(o.cards, p.Card)
		return true, nil
	}
	a := *p.Request
	plan, err := e.cfg.Router.Plan(ctx, a, o.trust)
	if err != nil {
		return false, err
	}
	switch {
	case plan.Refused != "":
		o.note(audit.KindApprovalUnroutable, map[string]any{"approval": string(a.ID), "command": p.Card.Command, "risk": string(a.Risk),
			"reason": plan.Refused})
		o.reply("%s", route.Refusal(p.Card.Command, plan.Refused))
		return false, nil
	case !plan.Routed:
		o.cards = append(o.cards, p.Card)
		return true, nil
	}
	d := plan.Deliver(p.Card, a)
	o.cards = append(o.cards, d.Status)
	o.routes = append(o.routes, d.Routes...)
	for _, c := range d.Copies {
		o.sends = append(o.sends, pendingSend{ch: c.Channel, conv: c.Conversation, key: c.Key, msg: core.OutMessage{Conversation: c.Conversation, Card: c.Card}})
	}
	o.note(audit.KindApprovalRouted, map[string]any{"approval": string(a.ID), "to": plan.Who(), "channels": plan.Where()})
	return true, nil
}
