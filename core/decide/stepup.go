package decide

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// StepUp is the passkey step-up (core/stepup): the top rung of the risk
// ladder. An approve tap on an irreversible card does not approve it; it
// asks StepUp for a single-use link to the secure form, where a WebAuthn
// assertion bound to this exact request decides it (ApproveStepUp).
type StepUp interface {
	// Offer stores, in tx, a step-up link for request a tapped by by and
	// returns it. An Offer without URL says why none can be given
	// (Missing: no passkey registered for by, for instance).
	Offer(ctx context.Context, tx Tx, a core.ApprovalRequest, by core.IdentityID) (Offer, error)
}

// Offer is a step-up link for one request and one approver.
type Offer struct {
	URL       string
	ExpiresAt time.Time
	// Notes are the audit entries of the offer (stepup.offered).
	Notes []Note
	// Missing says why there is no link ("" when URL is set).
	Missing string
}

// Proof is what a passkey step-up proved: which credential, at which sign
// count. It rides on the approval's audit entry (approval_strength:
// passkey).
type Proof struct {
	// Credential is the credential id, base64url.
	Credential string
	SignCount  uint32
}

// RefusedNoPasskey: an irreversible card was tapped by an approver with no
// registered passkey.
const RefusedNoPasskey = "no_passkey"

// ErrNeedsPasskey is returned when something tries to approve an
// irreversible request without a passkey step-up: no path but
// ApproveStepUp mints its token.
var ErrNeedsPasskey = errors.New("decide: an irreversible action is approved only through a passkey step-up")

// offerStepUp answers the approve tap on an irreversible card: a step-up
// link on the card (its status "confirming"), or a refusal saying why none
// can be given.
func (d *Decider) offerStepUp(ctx context.Context, tx Tx, a core.ApprovalRequest, by core.IdentityID, tap core.Tap) (Result, error) {
	if d.cfg.StepUp == nil {
		return Refusal(tap, core.RefusedStepUp, "Irreversible actions need a passkey step-up on the secure web page, which this gateway does not offer (it needs secrets_web with a domain name: docs/passkeys.md). Nothing was run.", d.open(a)), nil
	}
	off, err := d.cfg.StepUp.Offer(ctx, tx, a, by)
	if err != nil {
		return Result{}, fmt.Errorf("decide: step-up for %s: %w", a.ID, err)
	}
	if off.URL == "" {
		return Refusal(tap, RefusedNoPasskey, off.Missing, d.open(a)), nil
	}
	if a.Status == core.ApprovalPending {
		ok, err := tx.TransitionApproval(ctx, a.ID, []core.ApprovalStatus{core.ApprovalPending}, core.ApprovalConfirming, "", nil)
		if err != nil || !ok {
			return Result{}, err
		}
		a.Status = core.ApprovalConfirming
	}
	c := d.card(a, nil)
	c.Link = &cards.Link{Label: "Confirm with passkey", URL: off.URL}
	c.Outcome = fmt.Sprintf("Irreversible: confirm with your passkey on the secure page (the link works once, until %s).", off.ExpiresAt.UTC().Format("15:04 MST"))
	r := Result{Updates: []*cards.Card{c}, Toast: "Irreversible: open the \"Confirm with passkey\" link on the card. The tap alone runs nothing."}
	r.Notes = append(r.Notes, off.Notes...)
	return r, nil
}

// ApproveStepUp approves a, read and locked in tx, on by's behalf after a
// passkey assertion bound to it was verified (core/stepup): the token is
// minted, checked and its nonce consumed exactly as for a tap, in tx, and
// the approval is noted with approval_strength "passkey" and the
// credential. It decides only an irreversible request that is still open,
// unexpired and intact; anything else is a refusal (Result.Refused), an
// answer, not an error.
func (d *Decider) ApproveStepUp(ctx context.Context, tx Tx, a core.ApprovalRequest, by core.IdentityID, p Proof) (Result, error) {
	switch {
	case !a.Status.Open():
		return Result{Refused: core.RefusedAlreadyDecided, Toast: fmt.Sprintf("Already decided (%s): nothing was changed.", a.Status)}, nil
	case !tx.Now().Before(a.ExpiresAt):
		return Result{Refused: core.RefusedExpired, Toast: "This card has expired: nothing was run."}, nil
	case a.Risk != cards.RiskIrreversible:
		return Result{Refused: core.RefusedBadChoice, Toast: "This request does not take a passkey step-up."}, nil
	}
	if err := RequestIntact(d.pub, a); err != nil {
		return Result{Refused: core.RefusedAltered, Toast: "This request was altered after it was proposed: nothing was run."}, nil
	}
	if !MayDecide(a, by, core.TrustOwner) {
		return Result{Refused: core.RefusedNotApprover, Toast: "You may not decide this request."}, nil
	}
	r, err := d.approveWith(ctx, tx, a, by, &p)
	if err != nil {
		return Result{}, err
	}
	return r, nil
}

// strengthNote adds the step-up's proof to the approval's audit entry.
func strengthNote(r *Result, p *Proof) {
	for i := range r.Notes {
		if r.Notes[i].Kind == audit.KindApprovalApproved {
			r.Notes[i].Data["approval_strength"] = "passkey"
			r.Notes[i].Data["credential"] = p.Credential
			r.Notes[i].Data["sign_count"] = p.SignCount
		}
	}
}
