package render

import (
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// CallerQuestion renders a question an MCP caller put to the owner (the
// ask and request_approval tools, core/callgate). The caller wrote the
// question and the choices: they are shown as its words, never as Silas's.
func CallerQuestion(q core.Question) *cards.Card {
	who := string(q.Caller)
	c := &cards.Card{ID: cards.ID(q.ID), Kind: cards.KindInfo, Details: cards.ShowInvisible(q.Details)}
	text := strings.Join(strings.Fields(q.Text), " ")
	if q.Kind == core.QuestionApproval {
		c.Intent = Clip(cards.ShowInvisible("Approve: "+text), cards.MaxIntent)
		c.Rationale = Clip("An agent connected over MCP ("+who+") will do this itself if you approve: Silas does not run it or check it, "+
			"it only gives the agent your signed decision. The description is the agent's words. The agent waits for your answer.", cards.MaxRationale)
	} else {
		c.Intent = Clip(cards.ShowInvisible("Question: "+text), cards.MaxIntent)
		c.Rationale = Clip("An agent connected over MCP ("+who+") asks this and waits for your answer; the question and its choices are its words, not Silas's.", cards.MaxRationale)
	}
	label := func(id string) string {
		for _, ch := range q.Choices {
			if ch.ID == id {
				return ch.Label
			}
		}
		return id
	}
	switch q.Status {
	case core.QuestionExpired:
		c.Status, c.Outcome = cards.StatusExpired, "Nobody answered in time; the agent was told."
	case core.QuestionAnswered:
		c.Status = cards.StatusDone
		if q.Kind == core.QuestionApproval && q.Choice == "decline" {
			c.Status = cards.StatusDeclined
		} else if q.Kind == core.QuestionApproval {
			c.Status = cards.StatusApproved
		}
		c.Outcome = Clip(cards.ShowInvisible(label(q.Choice)+" — answered by "+string(q.DecidedBy)+"."), cards.MaxIntent)
	default:
		c.Status = cards.StatusPending
		for i, ch := range q.Choices {
			st, kind := cards.StyleSecondary, cards.ChoiceForward
			if q.Kind == core.QuestionApproval {
				st = cards.StylePrimary
				if ch.ID == "decline" {
					st, kind = cards.StyleDanger, cards.ChoiceDecline
				}
			} else if i == 0 {
				st = cards.StylePrimary
			}
			c.Choices = append(c.Choices, cards.Choice{ID: ch.ID, Label: Clip(cards.ShowInvisible(ch.Label), cards.MaxLabel), Style: st, Kind: kind})
		}
	}
	return c
}
