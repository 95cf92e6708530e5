package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
)

// The output of an action that received a secret is shown only when the
// owner taps "show" on a card that says it may hold the secret in some
// encoding: /output asks with the card (askToReveal), the tap comes back
// through the engine's tap path (RevealTap) and is audited. What the tap
// shows is a reply marked as secret-derived (Out.SecretOutput), which no
// model request carries; the web chat's full-output page serves the ref in
// that conversation from then on (store.GetConversationOutput).

// Choices of a reveal card.
const (
	revealShow = "show"
	revealHide = "hide"
)

// askToReveal sends the card that asks the owner to show output ref, whose
// action received the secrets names, and stores its request, in the turn's
// transaction.
func (c *Table) askToReveal(t Turn, ref string, names []string, out Out) {
	card := revealCard(cards.ID(core.NewID()), ref, names)
	out.Write(func(ctx context.Context, tx *store.Tx, o Out) error {
		if err := tx.InsertOutputReveal(ctx, store.OutputReveal{Card: card.ID, Ref: ref, Channel: t.Turn.Channel,
			Conversation: t.Turn.Conversation, RequestedBy: t.Turn.Sender}); err != nil {
			return err
		}
		o.Card(card)
		return nil
	})
}

// revealCard is the card that asks to show output ref, pending.
func revealCard(id cards.ID, ref string, names []string) *cards.Card {
	which := "a secret"
	if len(names) > 0 {
		which = "secret " + strings.Join(names, ", ")
	}
	intent := fmt.Sprintf("Show output %s here? It may contain %s in some encoding.", ref, which)
	return &cards.Card{ID: id, Kind: cards.KindInfo, Intent: render.Clip(intent, cards.MaxIntent),
		Rationale: "The program that printed it received the secret. Redaction replaced the value and the encodings it knows, " +
			"but a program can print a secret in a form no redaction finds (encrypted, hashed, encoded twice). " +
			"Shown, it is in this chat for everyone in it; it is never given to the assistant. Only the owner can show it.",
		Choices: []cards.Choice{
			{ID: revealShow, Label: "Show the output here", Style: cards.StyleDanger, Kind: cards.ChoiceForward},
			{ID: revealHide, Label: "Keep it hidden", Style: cards.StyleSecondary, Kind: cards.ChoiceDecline},
		},
		Status: cards.StatusPending}
}

// TapResult is what a tap on a reveal card did.
type TapResult struct {
	// Handled: the card is a reveal card of this conversation.
	Handled bool
	// Refused is why the tap changed nothing ("" when it took effect);
	// Toast is the notice to the tapper.
	Refused, Toast string
}

// RevealTap decides a tap on a reveal card inside tx: only the owner may
// decide it, once (compare-and-swap). Not a reveal card (or another
// conversation's): Handled is false.
func (c *Table) RevealTap(ctx context.Context, tx *store.Tx, t Turn, tap core.Tap, out Out) (TapResult, error) {
	r, err := tx.GetOutputReveal(ctx, tap.Card)
	if errors.Is(err, core.ErrNotFound) || err == nil && r.Conversation != t.Turn.Conversation {
		return TapResult{}, nil
	}
	if err != nil {
		return TapResult{}, err
	}
	refuse := func(reason, msg string) (TapResult, error) {
		return TapResult{Handled: true, Refused: reason, Toast: msg}, nil
	}
	var names []string
	id := core.ApprovalID(strings.TrimPrefix(r.Ref, outputRefPrefix))
	if a, err := c.cfg.Reads.GetApproval(ctx, id); err == nil {
		var act core.Action
		if json.Unmarshal(a.ActionCanonical, &act) == nil {
			names = act.Secrets
		}
	}
	card := revealCard(r.Card, r.Ref, names)
	if t.Trust != core.TrustOwner {
		out.Note(audit.KindOutputRefused, map[string]any{"approval": string(id), "ref": r.Ref, "reason": "not_owner"})
		return refuse("not_owner", fmt.Sprintf("Only the owner can show this output (you are %s); nothing was shown.", t.Turn.Sender))
	}
	var status string
	switch tap.Choice {
	case revealShow:
		status = store.RevealShown
	case revealHide:
		status = store.RevealDeclined
	default:
		return refuse("bad_choice", "Unknown choice: nothing was changed.")
	}
	text, ok, err := tx.DecideOutputReveal(ctx, r.Card, status, t.Turn.Sender)
	if err != nil {
		return TapResult{}, err
	}
	if !ok {
		card.Status, card.Choices = revealed(r.Status), nil
		out.Update(card)
		return refuse("already_decided", "Already decided: nothing was changed.")
	}
	card.Choices = nil
	if status == store.RevealDeclined {
		card.Status, card.Outcome = cards.StatusDeclined, "Kept hidden by "+string(t.Turn.Sender)+"."
		out.Note(audit.KindOutputRefused, map[string]any{"approval": string(id), "ref": r.Ref, "reason": "kept_hidden"})
		out.Update(card)
		return TapResult{Handled: true, Toast: "Kept hidden."}, nil
	}
	card.Status, card.Outcome = cards.StatusDone, "Shown below by "+string(t.Turn.Sender)+"."
	out.Note(audit.KindOutputShown, map[string]any{"approval": string(id), "ref": r.Ref, "card": string(r.Card), "secret": true})
	out.Update(card)
	out.SecretOutput(c.showOutput("Output "+r.Ref+" (secret values redacted)", text))
	return TapResult{Handled: true, Toast: "Shown."}, nil
}

// revealed is the card status of a decided request.
func revealed(status string) cards.Status {
	if status == store.RevealShown {
		return cards.StatusDone
	}
	return cards.StatusDeclined
}
