package render

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/consent"
)

// StandingChoice is the approval card's choice that runs the action as
// "approve" (or "confirm") would and also mints a standing consent
// (core/consent) for that exact action in that conversation.
const StandingChoice = "allow_standing"

// StandingLabel is the standing choice's label for a consent lasting ttl.
func StandingLabel(ttl time.Duration) string {
	switch {
	case ttl%time.Hour == 0:
		return fmt.Sprintf("Allow this for %d h", int(ttl/time.Hour))
	case ttl%time.Minute == 0:
		return fmt.Sprintf("Allow this for %d min", int(ttl/time.Minute))
	}
	return "Allow this for " + ttl.String()
}

// Standing reports whether a's card offers the standing choice when
// consents last ttl (0: not offered): a low-risk card while pending, a
// medium one once it asks for confirmation (the tap that runs it), and
// only for an action a consent may cover (never high or irreversible,
// never a shell, interpreter or wrapper). Only a request proposed in a
// person's turn (TurnSeq set: /run, the agent's reply) offers it — the path
// that honours consents; a task's step or an outside agent's call does not
// yet, so its card does not promise what would not happen.
func Standing(a core.ApprovalRequest, ttl time.Duration) bool {
	if ttl <= 0 || a.TurnSeq <= 0 {
		return false
	}
	switch {
	case a.Status == core.ApprovalPending && a.Risk == cards.RiskLow:
	case a.Status == core.ApprovalConfirming && a.Risk == cards.RiskMedium:
	default:
		return false
	}
	var act core.Action
	if err := json.Unmarshal(a.ActionCanonical, &act); err != nil {
		return false
	}
	return consent.Coverable(act, a.Risk)
}

// OfferStanding adds the standing choice to c, the card of a, when it
// offers it (Standing), before Decline.
func OfferStanding(c *cards.Card, a core.ApprovalRequest, ttl time.Duration) *cards.Card {
	if !Standing(a, ttl) || len(c.Choices) == 0 {
		return c
	}
	ch := cards.Choice{ID: StandingChoice, Label: StandingLabel(ttl), Kind: cards.ChoiceForward}
	n := len(c.Choices)
	c.Choices = append(c.Choices[:n-1:n-1], ch, c.Choices[n-1])
	return c
}

// StandingLine is the line a person sees instead of a card for an action
// run under their standing consent c.
func StandingLine(command string, c consent.Consent, loc *time.Location) string {
	if loc == nil {
		loc = time.UTC
	}
	return fmt.Sprintf("Ran `%s` under your standing approval %s… (%d/%d uses, expires %s).",
		Clip(cards.ShowInvisible(command), 200), c.Short(), c.Uses, c.MaxUses, c.ExpiresAt.In(loc).Format("15:04 MST"))
}

// Consent is the /consents card for one active consent, with its
// Revoke choice (choice id "revoke"; the card id is "consent-"+id).
func Consent(c consent.Consent) *cards.Card {
	what := (core.Action{Argv: c.Argv}).CommandLine()
	if c.Prefix {
		what += " …"
	}
	return &cards.Card{
		ID:      cards.ID(ConsentCardPrefix + c.ID),
		Kind:    cards.KindInfo,
		Intent:  Clip(cards.ShowInvisible("Standing approval "+c.Short()+"…: "+what), cards.MaxIntent),
		Status:  cards.StatusPending,
		Details: fmt.Sprintf("Up to %s risk, lanes %v, %d/%d uses, %d/%d units, expires %s.", c.MaxRisk, c.Lanes, c.Uses, c.MaxUses, c.Units, c.CostCap, c.ExpiresAt.UTC().Format(time.RFC3339)),
		Choices: []cards.Choice{{ID: "revoke", Label: "Revoke", Style: cards.StyleDanger, Kind: cards.ChoiceDecline}},
	}
}

// ConsentCardPrefix starts the card id of a /consents entry.
const ConsentCardPrefix = "consent-"
