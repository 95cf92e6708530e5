package engine

import (
	"context"
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
)

// Standing consents (core/consent) in a turn: an action the policy sends
// to a person runs without its card when a standing consent of the
// conversation covers it — approved by the decider on the consent's
// behalf, with its own single-use token — and the person sees a line.

// standing adds to p's turn, in its transaction, the attempt to approve
// p's request under a standing consent. Nothing changes when none
// applies (the card is sent as always); the refusal is audited.
func (e *Engine) standing(o *outcome, p propose.Proposal) {
	prev := o.inTx
	o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
		if prev != nil {
			if err := prev(ctx, tx, o); err != nil {
				return err
			}
		}
		a, err := tx.GetApproval(ctx, p.Request.ID)
		if err != nil {
			return err
		}
		r, c, code, err := e.decider.ApproveStandingCost(ctx, tx, a, o.modelTokens)
		if err != nil {
			return err
		}
		o.modelTokens = 0 // charged once, to the first action under a consent
		if code != "" {
			o.note(audit.KindConsentRefused, map[string]any{"approval": string(a.ID), "code": string(code)})
			return nil
		}
		// The card is sent already decided (no buttons): the line says why.
		for i, card := range o.cards {
			if card.ID != cards.ID(a.ID) {
				continue
			}
			for j, u := range r.Updates {
				if u.ID == card.ID {
					o.cards[i] = u
					r.Updates = append(r.Updates[:j:j], r.Updates[j+1:]...)
					break
				}
			}
		}
		o.reply("%s", render.StandingLine(p.Card.Command, c, nil))
		e.applyDecision(o, r, tx)
		return nil
	}
}

// storeConsent stores the consent a tap minted, with its decision (after
// applyDecision: its insert is a round trip of its own, which the
// decision's execution insert, claimed or not, may ride in); when the
// action was refused after all (not ready to run), no consent is stored
// and dropConsent took its mint note out first.
func storeConsent(ctx context.Context, tx *store.Tx, r decide.Result) error {
	if r.Consent == nil {
		return nil
	}
	return tx.InsertConsent(ctx, *r.Consent)
}

// dropConsent takes the consent a tap minted, and its mint note, out of a
// result whose action was refused after all.
func dropConsent(r *decide.Result) {
	if r.Consent == nil || r.Queued != "" {
		return
	}
	notes := r.Notes[:0:0]
	for _, n := range r.Notes {
		if n.Kind != audit.KindConsentMinted {
			notes = append(notes, n)
		}
	}
	r.Notes, r.Consent = notes, nil
}

// revokeTap decides a tap on a /consents card's Revoke: handled=false when
// the card is not one. Only an owner revokes; a consent of another
// conversation is unknown here.
func (e *Engine) revokeTap(ctx context.Context, tx *store.Tx, o *outcome, tap core.Tap) (handled bool, err error) {
	id, ok := strings.CutPrefix(string(tap.Card), render.ConsentCardPrefix)
	if !ok {
		return false, nil
	}
	refuse := func(reason, msg string) { e.applyDecision(o, decide.Refusal(tap, reason, msg, nil), nil) }
	switch {
	case tap.Choice != "revoke":
		refuse("bad_choice", "Unknown choice: nothing was changed.")
	case o.trust != core.TrustOwner:
		refuse("not_owner", "Only the owner can revoke a standing approval; nothing was changed.")
	default:
		full, ok, err := tx.RevokeConsent(ctx, id, o.st.Turn.Conversation, o.st.Turn.Sender)
		if err != nil {
			return true, err
		}
		if !ok {
			refuse("already_decided", "That standing approval is already revoked (or unknown here): nothing was changed.")
			return true, nil
		}
		o.note(audit.KindConsentRevoked, map[string]any{"consent": full})
		o.updates = append(o.updates, &cards.Card{ID: tap.Card, Kind: cards.KindInfo, Intent: "Standing approval " + full[:min(8, len(full))] + "… revoked",
			Status: cards.StatusDeclined, Outcome: "Revoked: its command asks with a card again."})
		o.toast = "Revoked: the next run of that command asks with a card again."
	}
	return true, nil
}

var _ consent.Tx = (*store.Tx)(nil)
