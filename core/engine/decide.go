package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/approval"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
)

// decide validates a tap and applies it, inside the turn's transaction. The
// approval row is locked (FOR UPDATE) so concurrent taps serialise, and
// every state change is compare-and-swap. Refusals are answers: they
// change nothing and are audited.
func (e *Engine) decide(ctx context.Context, tx *store.Tx, o *outcome, tap core.Tap) error {
	t := o.st.Turn
	_, toasts := e.channels[t.Channel].(core.TapAnswerer)
	var known *core.ApprovalRequest // set once the card is found in this conversation
	refuse := func(reason, msg string) error {
		if known != nil && known.Status.Open() {
			// Re-send the open card so a client that disabled its buttons
			// while waiting re-enables them.
			o.updates = append(o.updates, e.card(*known, nil))
		}
		o.note(audit.KindApprovalRefused, map[string]any{"approval": string(tap.Card), "choice": tap.Choice, "reason": reason})
		o.refused = reason
		// A refusal is a notice to the tapper, not news for the chat: on
		// channels with toasts it is only a toast.
		o.toast = msg
		if !toasts {
			o.reply("%s", msg)
		}
		e.m.approvals.WithLabelValues("refused_" + reason).Inc()
		return nil
	}
	a, err := tx.GetApproval(ctx, core.ApprovalID(tap.Card))
	if errors.Is(err, core.ErrNotFound) {
		r, aerr := tx.GetAccessRequest(ctx, string(tap.Card))
		if aerr == nil {
			return e.decideAccess(ctx, tx, o, r, tap, refuse)
		}
		if !errors.Is(aerr, core.ErrNotFound) {
			return aerr
		}
	}
	if errors.Is(err, core.ErrNotFound) {
		tp, terr := e.taskTap(ctx, tx, o, tap)
		if terr != nil {
			return terr
		}
		if tp.Refused != "" {
			return refuse(tp.Refused, tp.Toast)
		}
		if tp.Handled {
			if tp.Toast != "" {
				o.toast = tp.Toast
			}
			return nil
		}
	}
	if errors.Is(err, core.ErrNotFound) || (err == nil && a.Conversation != t.Conversation) {
		// A card from another conversation is "unknown" too: do not reveal it.
		return refuse("unknown_card", "Unknown card: nothing was changed.")
	}
	if err != nil {
		return err
	}
	known = &a
	if !e.mayApprove(a, t.Sender, o.trust) {
		return refuse("not_approver", fmt.Sprintf("You (%s) may not decide this card; nothing was changed.", t.Sender))
	}
	if !a.Status.Open() {
		// Re-send the card's current state too: a client showing stale
		// buttons (another tab, a lost update) catches up.
		c, err := e.currentCard(ctx, a)
		if err != nil {
			return err
		}
		o.updates = append(o.updates, c)
		return refuse("already_decided", fmt.Sprintf("Already decided (%s): nothing was changed.", a.Status))
	}
	now := tx.Now()
	if !now.Before(a.ExpiresAt) {
		ok, err := tx.TransitionApproval(ctx, a.ID, []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming}, core.ApprovalExpired, "", nil)
		if err != nil {
			return err
		}
		if ok {
			a.Status = core.ApprovalExpired
			o.updates = append(o.updates, e.card(a, nil))
			o.note(audit.KindApprovalExpired, map[string]any{"approval": string(a.ID)})
		}
		return refuse("expired", "This card has expired: nothing was run. Ask again if you still want it.")
	}
	if err := e.requestIntact(a); err != nil {
		// The stored request is not the one the card showed (edited in the
		// database since it was proposed), or predates request signatures.
		// Its card is not re-sent: it would show the stored, altered request.
		known = nil
		if errors.Is(err, approval.ErrRequestUnsigned) {
			return refuse("unsigned", "This request was made before requests were signed, so it cannot be approved: nothing was run. Ask again if you still want it.")
		}
		return refuse("altered", "This request was altered after it was proposed and no longer matches what the card showed: nothing was run.")
	}
	switch tap.Choice {
	case "decline":
		ok, err := tx.TransitionApproval(ctx, a.ID, []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming}, core.ApprovalDeclined, t.Sender, nil)
		if err != nil || !ok {
			return err
		}
		a.Status, a.DecidedBy = core.ApprovalDeclined, t.Sender
		o.updates = append(o.updates, e.card(a, nil))
		o.note(audit.KindApprovalDeclined, map[string]any{"approval": string(a.ID)})
		o.toast = "Declined. Nothing will run."
		e.m.approvals.WithLabelValues("declined").Inc()
		id := a.ID
		o.after = append(o.after, func() { e.taskNotice(id) })
		return nil
	case "approve":
		if a.Status != core.ApprovalPending {
			return refuse("bad_choice", "This card is waiting for confirmation: tap Confirm or Decline.")
		}
		if a.Risk.NeedsConfirm() {
			if a.Risk == cards.RiskIrreversible {
				return refuse("step_up_unavailable", "Irreversible actions need a step-up confirmation on the secure web page, which this gateway does not offer yet. Nothing was run.")
			}
			ok, err := tx.TransitionApproval(ctx, a.ID, []core.ApprovalStatus{core.ApprovalPending}, core.ApprovalConfirming, "", nil)
			if err != nil || !ok {
				return err
			}
			a.Status = core.ApprovalConfirming
			o.updates = append(o.updates, e.card(a, nil))
			o.note(audit.KindApprovalConfirmRequested, map[string]any{"approval": string(a.ID)})
			o.toast = fmt.Sprintf("%s risk: tap Confirm on the card to run it.", a.Risk)
			return nil
		}
		return e.approve(ctx, tx, o, a, t.Sender)
	case "confirm":
		if a.Status != core.ApprovalConfirming {
			return refuse("bad_choice", "There is nothing to confirm on this card yet.")
		}
		return e.approve(ctx, tx, o, a, t.Sender)
	default:
		return refuse("bad_choice", "Unknown choice: nothing was changed.")
	}
}

// currentCard renders a decided request with its execution, if any.
func (e *Engine) currentCard(ctx context.Context, a core.ApprovalRequest) (*cards.Card, error) {
	if a.Status != core.ApprovalApproved {
		return e.card(a, nil), nil
	}
	ex, err := e.st.GetExecution(ctx, a.ID)
	if errors.Is(err, core.ErrNotFound) {
		return e.card(a, nil), nil
	}
	if err != nil {
		return nil, err
	}
	return e.card(a, &ex), nil
}

// mayApprove: the identity is listed, or holds a listed role with at least
// that trust. High risk additionally needs owner trust.
func (e *Engine) mayApprove(a core.ApprovalRequest, who core.IdentityID, trust core.Trust) bool {
	if trust == core.TrustExternal {
		return false
	}
	if a.Risk.Rank() >= cards.RiskHigh.Rank() && trust != core.TrustOwner {
		return false
	}
	for _, ap := range a.Approvers {
		switch {
		case ap == "role:owner" && trust == core.TrustOwner:
			return true
		case ap == "role:auth" && (trust == core.TrustAuth || trust == core.TrustOwner):
			return true
		case core.IdentityID(ap) == who:
			return true
		}
	}
	return false
}

// approve mints a token, verifies it consumingly (nonce under a unique
// key) and queues the execution — all in the caller's transaction, so either
// the request leaves "pending" with its nonce consumed, or nothing happens.
func (e *Engine) approve(ctx context.Context, tx *store.Tx, o *outcome, a core.ApprovalRequest, by core.IdentityID) error {
	// decide checked this already for a tap; a policy approval reads back
	// the request it inserted in this transaction.
	if err := e.requestIntact(a); err != nil {
		return fmt.Errorf("engine: approve %s: %w", a.ID, err)
	}
	now := tx.Now()
	tok, err := approval.Mint(e.cfg.Key, core.NewID(), a.ActionHash, string(a.Conversation), string(by), now, e.cfg.TokenTTL)
	if err != nil {
		return err
	}
	if err := approval.Check(e.pub, tok, a.ActionHash, now); err != nil {
		return fmt.Errorf("engine: freshly minted token does not verify: %w", err)
	}
	raw, err := tok.Marshal()
	if err != nil {
		return err
	}
	ok, err := tx.TransitionApproval(ctx, a.ID, []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming}, core.ApprovalApproved, by, raw)
	if err != nil || !ok {
		return err
	}
	fresh, err := tx.ConsumeNonce(ctx, tok.Token.Nonce, tok.Token.TokenID, a.ID)
	if err != nil {
		return err
	}
	if !fresh {
		return errors.New("engine: token nonce already consumed (replay)")
	}
	if err := tx.QueueExecution(a.ID); err != nil {
		return err
	}
	a.Status, a.DecidedBy, a.Token = core.ApprovalApproved, by, raw
	o.updates = append(o.updates, e.card(a, &core.Execution{Status: core.ExecQueued}))
	o.note(audit.KindApprovalApproved, map[string]any{"approval": string(a.ID), "by": string(by), "risk": string(a.Risk)})
	o.toast = "Approved: running it now."
	o.note(audit.KindTokenMinted, map[string]any{"approval": string(a.ID), "token_id": tok.Token.TokenID,
		"expires_at": tok.Token.ExpiresAt.Format(time.RFC3339)})
	o.note(audit.KindTokenConsumed, map[string]any{"approval": string(a.ID), "token_id": tok.Token.TokenID})
	e.m.approvals.WithLabelValues("approved").Inc()
	id := a.ID
	o.after = append(o.after, func() {
		if e.holdExecution == nil || !e.holdExecution(id) {
			e.startExecution(id)
		}
	})
	return nil
}

// card renders an approval request (and its execution) with this engine's
// output preview length.
func (e *Engine) card(a core.ApprovalRequest, ex *core.Execution) *cards.Card {
	return render.Approval(a, ex, e.cfg.OutputPreview)
}
