package render

import (
	"fmt"
	"strings"

	"github.com/silas-gateway/silas/cards"
)

// TaskPlan is what the plan card of an LLM task shows.
type TaskPlan struct {
	// Card is the card's id; Title, Steps and Checks come from the plan
	// (Checks as one line each, e.g. "enough space: df …"); Budget is one
	// line of limits.
	Card   cards.ID
	Title  string
	Steps  []string
	Checks []string
	Budget string
	// Outcome, once the task ended ("Done: …", "Stopped: …"); Done marks a
	// verified finish.
	Outcome string
	Done    bool
}

// PlanCard renders a task's plan as a collapsed info card: the title and
// the count of steps on its face, the steps, checks and budget in its
// details (expandable). It has no buttons: each action of the plan gets
// its own approval card.
func PlanCard(p TaskPlan) *cards.Card {
	var d strings.Builder
	for i, s := range p.Steps {
		fmt.Fprintf(&d, "%d. %s\n", i+1, s)
	}
	if len(p.Checks) > 0 {
		d.WriteString("Done when these checks pass (run by the gateway after the last step):\n")
		for _, c := range p.Checks {
			d.WriteString("✔ " + c + "\n")
		}
	} else {
		d.WriteString("The plan has no final checks: each step's actions are verified on their own.\n")
	}
	if p.Budget != "" {
		d.WriteString("Budget: " + p.Budget + "\n")
	}
	c := &cards.Card{
		ID:     p.Card,
		Kind:   cards.KindInfo,
		Intent: Clip(cards.ShowBidi("Plan: "+p.Title), cards.MaxIntent),
		Rationale: Clip(fmt.Sprintf("%d step(s). Each action asks for your approval unless the risk policy allows it; /stop cancels the task.",
			len(p.Steps)), cards.MaxRationale),
		Details: cards.ShowBidi(strings.TrimRight(d.String(), "\n")),
		Outcome: cards.ShowBidi(p.Outcome),
	}
	if p.Done {
		c.Status = cards.StatusDone
	}
	return c
}

// TaskEscalation is the card a stuck task sends to its user.
type TaskEscalation struct {
	Card   cards.ID
	Title  string
	Step   int // 1-based
	Reason string
	// Chosen is set once decided: "retry", "replan" or "stop", with By.
	Chosen string
	By     string
}

// Escalation choices.
const (
	ChoiceRetry  = "retry"
	ChoiceReplan = "replan"
	ChoiceStop   = "stop"
)

// EscalationCard renders "Stuck on step N: … — Retry / Re-plan / Stop".
func EscalationCard(e TaskEscalation) *cards.Card {
	intent := fmt.Sprintf("Stuck on step %d: %s", e.Step, e.Reason)
	if e.Step < 1 {
		intent = "Stuck: " + e.Reason
	}
	c := &cards.Card{
		ID:        e.Card,
		Kind:      cards.KindInfo,
		Intent:    Clip(cards.ShowBidi(intent), cards.MaxIntent),
		Rationale: Clip(cards.ShowBidi("Task: "+e.Title+". Retry the step, ask for a new plan, or stop the task."), cards.MaxRationale),
	}
	switch e.Chosen {
	case "":
		c.Status = cards.StatusPending
		c.Choices = []cards.Choice{
			{ID: ChoiceRetry, Label: "Retry", Style: cards.StylePrimary, Kind: cards.ChoiceForward},
			{ID: ChoiceReplan, Label: "Re-plan", Style: cards.StyleSecondary, Kind: cards.ChoiceForward},
			{ID: ChoiceStop, Label: "Stop", Style: cards.StyleDanger, Kind: cards.ChoiceDecline},
		}
	case ChoiceStop:
		c.Status = cards.StatusDeclined
		c.Outcome = "Stopped by " + e.By + "."
	default:
		c.Status = cards.StatusApproved
		what := map[string]string{ChoiceRetry: "Retry", ChoiceReplan: "Re-plan"}[e.Chosen]
		c.Outcome = what + " chosen by " + e.By + "."
	}
	return c
}
