package render

import (
	"fmt"
	"slices"
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// Routed is the status card of a request whose card went to approvers
// elsewhere (core/route): the request as its card shows it, without
// choices, saying where it was sent.
func Routed(c *cards.Card, where string) *cards.Card {
	s := *c
	s.Choices = nil
	s.Outcome = fmt.Sprintf("Waiting for an owner's approval — sent to %s.", where)
	return &s
}

// RoutedCopy is the copy of a request's card in an approver's own
// conversation: the card, saying who asked and where.
func RoutedCopy(c *cards.Card, a core.ApprovalRequest) *cards.Card {
	s := *c
	s.Outcome = Clip(fmt.Sprintf("Asked by %s in %s.", a.Requester, a.Conversation), cards.MaxRationale)
	return &s
}

// Asked names who an expired request was waiting for and where, for its
// card: the routed approvers and their channels, or the approvers in the
// requesting conversation.
func Asked(a core.ApprovalRequest, routes []core.ApprovalRoute) string {
	var who, where []string
	for _, r := range routes {
		if r.Kind != core.RouteCopy {
			continue
		}
		if !slices.Contains(who, string(r.Identity)) {
			who = append(who, string(r.Identity))
		}
		if !slices.Contains(where, string(r.Channel)) {
			where = append(where, string(r.Channel))
		}
	}
	if len(who) == 0 {
		return fmt.Sprintf("asked %s in this chat", strings.Join(approverNames(a.Approvers), ", "))
	}
	return fmt.Sprintf("asked %s on %s", strings.Join(who, ", "), strings.Join(where, ", "))
}

// Expired is the expired card of a, saying who was asked and where.
func Expired(a core.ApprovalRequest, routes []core.ApprovalRoute) *cards.Card {
	c := Approval(a, nil, 0)
	c.Outcome = Clip(fmt.Sprintf("Expired without a decision (%s). Nothing was run.", Asked(a, routes)), cards.MaxRationale)
	return c
}

func approverNames(aps []string) []string {
	out := make([]string, 0, len(aps))
	for _, ap := range aps {
		switch ap {
		case "role:owner":
			out = append(out, "an owner")
		case "role:auth":
			out = append(out, "a paired user")
		default:
			out = append(out, ap)
		}
	}
	if len(out) == 0 {
		out = append(out, "an owner")
	}
	return out
}
