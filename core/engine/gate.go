package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/approval"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
)

// What binds an execution to a human decision. The database is not trusted
// to say so on its own: rows can be written by anyone who can reach it.
//
//   - A request is signed when it is proposed (approval.Request): a tap on
//     a request edited afterwards is refused, and so is its execution.
//   - An execution runs only if its token verifies for the stored action,
//     its nonce was consumed for this approval (token_nonces) and the audit
//     chain holds the "token.consumed" entry of that decision, linked to its
//     neighbours, and no start of this execution. This is checked in the
//     transaction that claims the execution, so a restart resumes through
//     the same gate.

// reasonNoDecision is the refusal of an execution no recorded decision
// stands behind (an approval and execution written straight into the
// database).
const reasonNoDecision = "no recorded decision consumed this approval's token"

// requestOf is the signed view of a stored request.
func requestOf(a core.ApprovalRequest) approval.Request {
	return approval.Request{
		ID: string(a.ID), Channel: string(a.Channel), Conversation: string(a.Conversation), Requester: string(a.Requester),
		ActionHash: a.ActionHash, Intent: a.Intent, Rationale: a.Rationale, Risk: string(a.Risk), Approvers: a.Approvers,
		CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt,
	}
}

// signRequest signs a request being proposed.
func (e *Engine) signRequest(a *core.ApprovalRequest) error {
	sig, err := approval.SignRequest(e.cfg.Key, requestOf(*a))
	if err != nil {
		return fmt.Errorf("engine: sign approval request: %w", err)
	}
	a.Signature = sig
	return nil
}

// requestIntact reports whether a stored request is the one proposed: its
// action still hashes to the signed hash and its signature verifies. The
// error wraps approval.ErrRequestUnsigned or approval.ErrRequestAltered.
func (e *Engine) requestIntact(a core.ApprovalRequest) error {
	if sum := sha256.Sum256(a.ActionCanonical); !bytes.Equal(sum[:], a.ActionHash) {
		return fmt.Errorf("%w: the action does not hash to the stored hash", approval.ErrRequestAltered)
	}
	return approval.VerifyRequest(e.pub, requestOf(a), a.Signature)
}

// checkApproval is the part of the execution gate that needs no database
// read: the token verifies, is unexpired, is bound to the stored action and
// conversation and names the recorded decider, and the request is intact.
// reason is "" when all hold.
func (e *Engine) checkApproval(a core.ApprovalRequest) (tok approval.Signed, act core.Action, reason string) {
	if a.Status != core.ApprovalApproved {
		return tok, act, fmt.Sprintf("the approval is %s, not approved", a.Status)
	}
	tok, err := approval.Unmarshal(a.Token)
	if err != nil {
		return tok, act, "approval token unreadable"
	}
	if err := json.Unmarshal(a.ActionCanonical, &act); err != nil {
		return tok, act, "stored action unreadable"
	}
	hash, err := act.Hash()
	if err != nil {
		return tok, act, "action cannot be hashed"
	}
	if err := approval.Check(e.pub, tok, hash, e.now()); err != nil {
		reason := "approval token invalid"
		switch {
		case errors.Is(err, approval.ErrHashMismatch):
			reason = "the action changed after approval"
		case errors.Is(err, approval.ErrExpired):
			reason = "the approval token expired before execution"
		case errors.Is(err, approval.ErrBadSignature):
			reason = "the approval token signature does not verify"
		}
		return tok, act, reason
	}
	if tok.Token.Conversation != string(a.Conversation) {
		return tok, act, "the approval token belongs to another conversation"
	}
	if tok.Token.Approver != string(a.DecidedBy) {
		return tok, act, "the approval token names someone other than the recorded decider"
	}
	if err := e.requestIntact(a); err != nil {
		if errors.Is(err, approval.ErrRequestUnsigned) {
			return tok, act, "the request was not signed when it was proposed"
		}
		return tok, act, "the request was altered after it was proposed"
	}
	return tok, act, ""
}

// admit is the execution gate, run in the transaction that claims the
// execution: checkApproval, then the recorded decision — the token's nonce
// consumed for this approval under this token id, and the decision's
// "token.consumed" audit entry for this approval and token, in this
// conversation, linked into the chain — and no "execution.started" entry
// for it yet. reason is "" when the execution may run.
func (e *Engine) admit(ctx context.Context, tx *store.Tx, a core.ApprovalRequest) (reason string, err error) {
	tok, _, reason := e.checkApproval(a)
	if reason != "" {
		return reason, nil
	}
	d, err := tx.RecordedDecision(ctx, a.ID, tok.Token.Nonce, tok.Token.TokenID)
	if err != nil {
		return "", err
	}
	switch {
	case d.NonceApproval == nil || *d.NonceApproval != a.ID || d.NonceTokenID == nil || *d.NonceTokenID != tok.Token.TokenID:
		return reasonNoDecision + " (its nonce was not consumed for this approval)", nil
	case d.Entry == nil || d.Entry.Entry.Conversation != string(a.Conversation):
		return reasonNoDecision + " (the audit log has no such decision)", nil
	case !linked(d):
		return reasonNoDecision + " (the decision's audit entry is not linked into the audit chain)", nil
	case d.Started:
		// The row says queued, the log says it started: set back by hand.
		return "this approval's execution was started before; an approval runs once", nil
	}
	return "", nil
}

// linked reports whether the decision's audit entry hashes to its stored
// hash and is chained to the entries either side of it. A row written into
// the log by hand without recomputing the chain fails this; one appended
// with a recomputed chain is what signed checkpoints of the log detect.
func linked(d store.Decision) bool {
	r := d.Entry
	c, err := audit.Canonical(r.Seq, r.At, r.Entry.Kind, r.Entry.Actor, r.Entry.Conversation, r.DataJSON)
	if err != nil || !bytes.Equal(audit.Chain(r.PrevHash, c), r.Hash) {
		return false
	}
	prev := d.PrevHash
	if r.Seq == 1 {
		prev = audit.Genesis
	}
	if prev == nil || !bytes.Equal(prev, r.PrevHash) {
		return false
	}
	return d.NextPrevHash == nil || bytes.Equal(d.NextPrevHash, r.Hash)
}
