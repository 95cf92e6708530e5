package render

import (
	"encoding/json"
	"fmt"
	"strings"
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
// person's turn (TurnSeq set: /run, the agent's reply) offers it. A task's
// step and an outside agent's call honour a consent the owner gave (a line
// instead of the card, core/propose's Steps) but never offer one: the
// owner gives it on a command they asked for themselves.
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
	intent := "Standing approval " + c.Short() + "…: " + covered(c.Argv, c.Prefix, c.Programs)
	details := fmt.Sprintf("Up to %s risk, lanes %v, %d/%d uses, %d/%d units, expires %s.", c.MaxRisk, c.Lanes, c.Uses, c.MaxUses, c.Units, c.CostCap, c.ExpiresAt.UTC().Format(time.RFC3339))
	if c.Scope == consent.ScopeRun {
		intent = "Consent " + c.Short() + "… for run " + c.Run + " of " + c.Flow + " v" + c.FlowVersion
		details = "Nodes " + strings.Join(c.Nodes, ", ") + "; runs " + covered(c.Argv, c.Prefix, c.Programs) + ". " + details
	}
	return &cards.Card{
		ID:      cards.ID(ConsentCardPrefix + c.ID),
		Kind:    cards.KindInfo,
		Intent:  Clip(cards.ShowInvisible(intent), cards.MaxIntent),
		Status:  cards.StatusPending,
		Details: cards.ShowInvisible(details),
		Choices: []cards.Choice{{ID: "revoke", Label: "Revoke", Style: cards.StyleDanger, Kind: cards.ChoiceDecline}},
	}
}

// covered says in words what a consent's argv rule (or, without one, its
// exact programs) covers.
func covered(argv []string, prefix bool, programs []string) string {
	if len(argv) == 0 {
		return "only the programs " + strings.Join(programs, ", ") + " (any arguments)"
	}
	what := (core.Action{Argv: argv}).CommandLine()
	if prefix {
		what += " …"
	}
	return what
}

// RunConsentChoice is the choice on a run's consent card that mints the
// consent (core/decide's MintRun); "decline" leaves every step asking.
const RunConsentChoice = "allow_run"

// RunConsentCardPrefix starts the card id of a run's consent card; the
// run's id follows.
const RunConsentCardPrefix = "run-consent-"

// RunConsentOffer is the consent card the flows runtime sends for a run
// when flows.run_writes and flows.automatable_execution are on (never
// otherwise): it states exactly what the tap covers — the run, the flow
// and its pinned version, the nodes, the programs or argv rule, the
// highest risk, the lanes, the uses, the cost cap and how long.
func RunConsentOffer(g consent.RunGrant, ttl time.Duration) *cards.Card {
	if ttl <= 0 {
		ttl = time.Hour
	}
	lines := []string{
		fmt.Sprintf("Run %s of flow %s, pinned at version %s.", g.Run, g.Flow, g.FlowVersion),
		fmt.Sprintf("Steps: %s — nothing else in the run.", strings.Join(g.Nodes, ", ")),
		"Runs: " + covered(g.Argv, g.Prefix, g.Programs) + "; never a shell, an interpreter or a wrapper.",
		fmt.Sprintf("Up to %s risk (high and irreversible steps always ask), lanes: %s.", g.MaxRisk, strings.Join(g.Lanes, ", ")),
		fmt.Sprintf("At most %d runs and %d units; for %s from now, or until you revoke it (/consents).", g.MaxUses, g.CostCap, ttl),
		"Each step still gets its own single-use approval token and its own verification.",
	}
	if len(g.Secrets) > 0 {
		lines = append(lines, "Secrets the steps may receive: "+strings.Join(g.Secrets, ", ")+".")
	}
	return &cards.Card{
		ID:      cards.ID(RunConsentCardPrefix + g.Run),
		Kind:    cards.KindInfo,
		Intent:  Clip(cards.ShowInvisible("Let run "+g.Run+" of "+g.Flow+" run its steps without asking each time?"), cards.MaxIntent),
		Risk:    g.MaxRisk,
		Status:  cards.StatusPending,
		Details: cards.ShowInvisible(strings.Join(lines, "\n")),
		Choices: []cards.Choice{
			{ID: RunConsentChoice, Label: StandingLabel(ttl), Style: cards.StylePrimary, Kind: cards.ChoiceForward},
			{ID: "decline", Label: "Ask each step", Style: cards.StyleDanger, Kind: cards.ChoiceDecline},
		},
	}
}

// RunConsentLine is the line on the run's progress card for a step run
// under consent c instead of its card.
func RunConsentLine(node string, c consent.Consent) string {
	return fmt.Sprintf("%s ran under consent %s… (%d/%d uses, %d/%d units)", cards.ShowInvisible(node), c.Short(), c.Uses, c.MaxUses, c.Units, c.CostCap)
}

// RunConsentRoutedLine is the line left where a run was started when its
// consent card went to an owner's direct conversation instead (nobody
// here may give it).
func RunConsentRoutedLine(run string, owner core.IdentityID, ch core.ChannelName) string {
	return fmt.Sprintf("Run %s's consent card went to %s on %s: only an owner can give a run its consent. Until then each step asks with its own card.",
		run, cards.ShowInvisible(string(owner)), ch)
}

// RunRefusalLine is the line for a step the gate refused to run without
// a card, in plain words: the step then asks with its card (or, for a
// refusal no card fixes, stays where it is).
func RunRefusalLine(node string, code consent.Code) string {
	return fmt.Sprintf("%s did not run under the consent: %s (%s).", cards.ShowInvisible(node), code.Words(), code)
}

// ConsentCardPrefix starts the card id of a /consents entry.
const ConsentCardPrefix = "consent-"
