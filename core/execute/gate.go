package execute

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
	"github.com/silas-gateway/silas/core/decide"
)

// What binds an execution to a human decision. The database is not trusted
// to say so on its own: rows can be written by anyone who can reach it.
//
//   - A request is signed when it is proposed (decide.SignRequest): a tap
//     on a request edited afterwards is refused, and so is its execution.
//   - An execution runs only if its token verifies for the stored action,
//     its nonce was consumed for this approval (token_nonces) and the audit
//     chain holds the "token.consumed" entry of that decision, linked to its
//     neighbours, and no start of this execution. This is checked in the
//     transaction that claims the execution, with the approval row locked,
//     so a restart resumes through the same gate; what then runs is the
//     action of that checked row, carried as a value, not a later read.

// reasonNoDecision is the refusal of an execution no recorded decision
// stands behind (an approval and execution written straight into the
// database).
const reasonNoDecision = "no recorded decision consumed this approval's token"

// checkApproval is the part of the gate that needs no database read: the
// token verifies, is unexpired at now, is bound to the stored action and
// conversation and names the recorded decider, and the request is intact.
// reason is "" when all hold.
func (x *Executor) checkApproval(a core.ApprovalRequest) (tok approval.Signed, act core.Action, reason string) {
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
	// The token binds the SHA-256 of the action's canonical JSON. The
	// stored bytes are that JSON as proposed (core/propose stores
	// Action.Canonical and its hash; RequestIntact below holds them to the
	// signed hash): when they hash to the token's value they are the bytes
	// the decision minted it for, and re-encoding their decoding gives the
	// same value — so it is not computed again (a marshal and an RFC 8785
	// pass per execution, issue 26). Any other bytes take the old way, so
	// every refusal and its reason stay as they were.
	var hash []byte
	if sum := sha256.Sum256(a.ActionCanonical); bytes.Equal(sum[:], tok.Token.ActionHash) {
		hash = sum[:]
	} else if hash, err = act.Hash(); err != nil {
		return tok, act, "action cannot be hashed"
	}
	if err := approval.Check(x.cfg.Key, tok, hash, x.cfg.Now()); err != nil {
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
	if err := decide.RequestIntact(x.cfg.Key, a); err != nil {
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
// pre is the recorded decision already read for the token the claim
// expected, used only when that is the row's token.
func (x *Executor) admit(ctx context.Context, tx Tx, a core.ApprovalRequest, pre expected) (tok approval.Signed, act core.Action, reason string, err error) {
	tok, act, reason = x.checkApproval(a)
	if reason != "" {
		return tok, act, reason, nil
	}
	d := pre.d
	if !pre.ok || !bytes.Equal(pre.nonce, tok.Token.Nonce) || pre.tokenID != tok.Token.TokenID {
		if d, err = tx.RecordedDecision(ctx, a.ID, tok.Token.Nonce, tok.Token.TokenID); err != nil {
			return tok, act, "", err
		}
	}
	switch {
	case d.NonceApproval == nil || *d.NonceApproval != a.ID || d.NonceTokenID == nil || *d.NonceTokenID != tok.Token.TokenID:
		return tok, act, reasonNoDecision + " (its nonce was not consumed for this approval)", nil
	case d.Entry == nil || d.Entry.Entry.Conversation != string(a.Conversation):
		return tok, act, reasonNoDecision + " (the audit log has no such decision)", nil
	case !linked(d):
		return tok, act, reasonNoDecision + " (the decision's audit entry is not linked into the audit chain)", nil
	case d.Started:
		// The row says queued, the log says it started: set back by hand.
		return tok, act, "this approval's execution was started before; an approval runs once", nil
	}
	return tok, act, "", nil
}

// expected is the token a claim expects on the approval's row (the one
// this process's decision recorded) and, once read, the recorded decision
// of that token.
type expected struct {
	ok      bool
	nonce   []byte
	tokenID string
	d       core.Decision
}

// expect is the token of an approved request, as its decision recorded it.
func expect(a core.ApprovalRequest) expected {
	tok, err := approval.Unmarshal(a.Token)
	if err != nil || len(tok.Token.Nonce) == 0 || tok.Token.TokenID == "" {
		return expected{}
	}
	return expected{ok: true, nonce: tok.Token.Nonce, tokenID: tok.Token.TokenID}
}

// linked reports whether the decision's audit entry hashes to its stored
// hash and is chained to the entries either side of it. A row written into
// the log by hand without recomputing the chain fails this; one appended
// with a recomputed chain is what signed checkpoints of the log detect.
func linked(d core.Decision) bool {
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
