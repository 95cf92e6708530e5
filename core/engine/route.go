package engine

import (
	"context"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/render"
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
		o.reply("Nobody can approve `%s` now: %s. I asked no one and nothing is waiting; nothing was run.", p.Card.Command, plan.Refused)
		return false, nil
	case !plan.Routed:
		o.cards = append(o.cards, p.Card)
		return true, nil
	}
	o.cards = append(o.cards, render.Routed(p.Card, plan.Where()))
	o.routes = append(o.routes, core.ApprovalRoute{Approval: a.ID, Channel: a.Channel, Conversation: a.Conversation, MessageKey: string(a.ID),
		Kind: core.RouteStatus})
	copyCard := render.RoutedCopy(p.Card, a)
	for _, t := range plan.Copies {
		// A key of its own: a copy may sit on the requesting channel.
		key := string(a.ID) + "@" + string(t.Conversation)
		o.routes = append(o.routes, core.ApprovalRoute{Approval: a.ID, Channel: t.Channel, Conversation: t.Conversation, MessageKey: key,
			Kind: core.RouteCopy, Identity: t.Identity})
		o.sends = append(o.sends, pendingSend{ch: t.Channel, conv: t.Conversation, key: key, msg: core.OutMessage{Conversation: t.Conversation, Card: copyCard}})
	}
	o.note(audit.KindApprovalRouted, map[string]any{"approval": string(a.ID), "to": plan.Who(), "channels": plan.Where()})
	return true, nil
}
