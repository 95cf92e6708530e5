// Package approval mints and checks Ed25519-signed approval tokens. A token
// binds one approver's decision to the sha256 of one canonical action; the
// signed bytes are RFC 8785 JSON of the token fields. Consumption (the nonce
// under a unique constraint) happens in the store, in the same transaction as
// the decision; this package is pure.
package approval

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Scope of a token.
const (
	// ScopeSingle tokens authorise one execution of one action.
	ScopeSingle = "single"
)

// Token is the signed payload.
type Token struct {
	TokenID       string    `json:"token_id"`
	Scope         string    `json:"scope"`
	ActionHash    []byte    `json:"action_hash"`
	Conversation  string    `json:"conversation"`
	Approver      string    `json:"approver"`
	IssuedAt      time.Time `json:"issued_at"`
	ExpiresAt     time.Time `json:"expires_at"`
	MaxExecutions int       `json:"max_executions"`
	Nonce         []byte    `json:"nonce"`
}

// Signed is a token with its signature, as stored.
type Signed struct {
	Token     Token  `json:"token"`
	Signature []byte `json:"signature"`
}

// Errors returned by Check; all wrap ErrInvalid.
var (
	ErrInvalid      = errors.New("approval token invalid")
	ErrBadSignature = fmt.Errorf("%w: bad signature", ErrInvalid)
	ErrExpired      = fmt.Errorf("%w: expired", ErrInvalid)
	ErrHashMismatch = fmt.Errorf("%w: action changed after approval", ErrInvalid)
	ErrScope        = fmt.Errorf("%w: scope", ErrInvalid)
)

// SigningBytes returns the canonical bytes that are signed.
func (t Token) SigningBytes() ([]byte, error) {
	t.IssuedAt = t.IssuedAt.UTC()
	t.ExpiresAt = t.ExpiresAt.UTC()
	if b, ok := t.appendCanonical(make([]byte, 0, 320)); ok {
		return b, nil
	}
	return t.signingJSON()
}

// Mint builds and signs a single-use token for actionHash.
func Mint(key ed25519.PrivateKey, tokenID string, actionHash []byte, conversation, approver string, now time.Time, ttl time.Duration) (Signed, error) {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return Signed{}, fmt.Errorf("approval: nonce: %w", err)
	}
	t := Token{
		TokenID:       tokenID,
		Scope:         ScopeSingle,
		ActionHash:    append([]byte(nil), actionHash...),
		Conversation:  conversation,
		Approver:      approver,
		IssuedAt:      now.UTC().Truncate(time.Millisecond),
		ExpiresAt:     now.Add(ttl).UTC().Truncate(time.Millisecond),
		MaxExecutions: 1,
		Nonce:         nonce,
	}
	b, err := t.SigningBytes()
	if err != nil {
		return Signed{}, err
	}
	return Signed{Token: t, Signature: ed25519.Sign(key, b)}, nil
}

// Check verifies signature, scope, expiry and the binding to actionHash. It
// consumes nothing; callers consume the nonce in their decision transaction.
func Check(pub ed25519.PublicKey, s Signed, actionHash []byte, now time.Time) error {
	b, err := s.Token.SigningBytes()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !verify(pub, b, s.Signature) {
		return ErrBadSignature
	}
	if s.Token.Scope != ScopeSingle || s.Token.MaxExecutions != 1 {
		return ErrScope
	}
	if len(s.Token.Nonce) < 16 || s.Token.TokenID == "" {
		return fmt.Errorf("%w: missing nonce or id", ErrInvalid)
	}
	if !now.Before(s.Token.ExpiresAt) {
		return ErrExpired
	}
	if !bytes.Equal(s.Token.ActionHash, actionHash) {
		return ErrHashMismatch
	}
	return nil
}

// Marshal encodes a signed token for storage.
func (s Signed) Marshal() ([]byte, error) { return json.Marshal(s) }

// Unmarshal decodes a stored token.
func Unmarshal(b []byte) (Signed, error) {
	if s, ok := decodeStored(b); ok {
		return s, nil
	}
	var s Signed
	if err := json.Unmarshal(b, &s); err != nil {
		return Signed{}, fmt.Errorf("%w: decode: %v", ErrInvalid, err)
	}
	return s, nil
}
