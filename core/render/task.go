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
		Intent: Clip(cards.ShowInvisible("Plan: "+p.Title), cards.MaxIntent),
		Rationale: Clip(fmt.Sprintf("The assistant wrote this plan: its title, steps and checks are its words, not Silas's. %d step(s). Each action asks for your approval unless the risk policy allows it; /stop cancels the task.",
			len(p.Steps)), cards.MaxRationale),
		Details: cards.ShowInvisible(strings.TrimRight(d.String(), "\n")),
		Outcome: cards.ShowInvisible(p.Outcome),
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
		Intent:    Clip(cards.ShowInvisible(intent), cards.MaxIntent),
		Rationale: Clip("Task (the assistant's title): "+Quoted(e.Title)+". Retry the step, ask for a new plan, or stop the task.", cards.MaxRationale),
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

// TaskQuestion is the card of a question a task's executor asked the user
// (ask_user): choices as buttons, or none for a free-text answer.
type TaskQuestion struct {
	Card     cards.ID
	Label    string // "Step 2 of 3 — <title>"
	Question string
	Choices  []string
	// Who may answer, for the card's words.
	Requester string
	// Answer and By, once answered; Cancelled when the task ended first.
	Answer    string
	By        string
	Cancelled string
}

// QuestionChoice is the id of choice i (0-based) on a question card.
func QuestionChoice(i int) string { return fmt.Sprintf("a%d", i+1) }

// QuestionCard renders a task's question. The model wrote the question and
// the choices: they are shown as its words, with bidi controls visible.
func QuestionCard(q TaskQuestion) *cards.Card {
	how := "Reply in this chat: your next message here is the answer."
	if len(q.Choices) > 0 {
		how = "Tap an answer, or reply in this chat in your own words."
	}
	c := &cards.Card{
		ID:     q.Card,
		Kind:   cards.KindInfo,
		Intent: Clip(cards.ShowInvisible("Question: "+strings.Join(strings.Fields(q.Question), " ")), cards.MaxIntent),
		Rationale: Clip(cards.ShowInvisible("The assistant asks this: the question and its choices are its words, not Silas's. "+q.Label+". The task waits for the answer. "+how+
			" Only "+q.Requester+" or an owner can answer; /stop cancels the task."), cards.MaxRationale),
		Details: cards.ShowInvisible(q.Question),
	}
	switch {
	case q.Cancelled != "":
		c.Status = cards.StatusDeclined
		c.Outcome = cards.ShowInvisible(q.Cancelled)
	case q.By != "":
		c.Status = cards.StatusDone
		c.Outcome = Clip(cards.ShowInvisible("Answered by "+q.By+": "+strings.Join(strings.Fields(q.Answer), " ")), cards.MaxIntent)
	default:
		c.Status = cards.StatusPending
		for i, ch := range q.Choices {
			if i == cards.MaxChoices {
				break
			}
			c.Choices = append(c.Choices, cards.Choice{ID: QuestionChoice(i), Label: Clip(cards.ShowInvisible(ch), cards.MaxLabel),
				Style: cards.StyleSecondary, Kind: cards.ChoiceForward})
		}
	}
	return c
}
