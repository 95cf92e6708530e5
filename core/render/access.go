package render

import (
	"fmt"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// Access renders a stranger's request to talk to Silas, as shown to the
// owner who decides it.
func Access(r core.AccessRequest) *cards.Card {
	// The display name is the stranger's own choice: bidi controls in it
	// are shown, and the button names the sender by platform id.
	r.Name = cards.ShowInvisible(r.Name)
	c := &cards.Card{
		ID:     cards.ID(r.ID),
		Kind:   cards.KindInfo,
		Intent: Clip(fmt.Sprintf("Allow %s (%s) to talk to Silas?", r.Name, r.Identity), cards.MaxIntent),
		Rationale: Clip(fmt.Sprintf("They wrote to the bot in a private chat (request code %s). Allowing gives them auth trust: they can talk to Silas and ask for actions; owners still approve every action. The name %s is the one they gave themselves: Silas has not checked it.",
			r.Code, Quoted(r.Name)), cards.MaxRationale),
	}
	switch r.Status {
	case core.AccessPending:
		c.Status = cards.StatusPending
		c.Choices = []cards.Choice{{ID: "allow", Label: Clip("Allow "+cards.ShowInvisible(string(r.Identity)), cards.MaxLabel), Style: cards.StylePrimary, Kind: cards.ChoiceForward}, {ID: "deny", Label: "Deny", Style: cards.StyleDanger, Kind: cards.ChoiceDecline}}
	case core.AccessAllowed:
		c.Status = cards.StatusApproved
		c.Outcome = fmt.Sprintf("Allowed by %s.", r.DecidedBy)
	case core.AccessDenied:
		c.Status = cards.StatusDeclined
		c.Outcome = fmt.Sprintf("Denied by %s.", r.DecidedBy)
	}
	return c
}
