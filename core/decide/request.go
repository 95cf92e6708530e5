package decide

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/approval"
)

// requestOf is the signed view of a stored request.
func requestOf(a core.ApprovalRequest) approval.Request {
	return approval.Request{
		ID: string(a.ID), Channel: string(a.Channel), Conversation: string(a.Conversation), Requester: string(a.Requester),
		ActionHash: a.ActionHash, Intent: a.Intent, Rationale: a.Rationale, Risk: string(a.Risk), Approvers: a.Approvers,
		CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt, Preview: a.Preview,
	}
}

// SignRequest signs a request being proposed: a tap decides only this
// request, as stored now.
func SignRequest(key ed25519.PrivateKey, a *core.ApprovalRequest) error {
	sig, err := approval.SignRequest(key, requestOf(*a))
	if err != nil {
		return fmt.Errorf("decide: sign approval request: %w", err)
	}
	a.Signature = sig
	return nil
}

// RequestIntact reports whether a stored request is the one proposed: its
// action still hashes to the signed hash and its signature verifies. The
// error wraps approval.ErrRequestUnsigned or approval.ErrRequestAltered.
func RequestIntact(pub ed25519.PublicKey, a core.ApprovalRequest) error {
	if sum := sha256.Sum256(a.ActionCanonical); !bytes.Equal(sum[:], a.ActionHash) {
		return fmt.Errorf("%w: the action does not hash to the stored hash", approval.ErrRequestAltered)
	}
	return approval.VerifyRequest(pub, requestOf(a), a.Signature)
}
