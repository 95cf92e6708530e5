package approval

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"
)

// Request is what the gateway signs when it proposes an action for
// approval: everything an approval card shows or a decision depends on.
// The signature is stored with the request and checked when the request is
// decided and again before it runs, so a request edited in the database
// after it was proposed (another action with its matching hash, a lower
// risk, other approvers) cannot be approved: a database-only attacker
// cannot re-sign it.
type Request struct {
	ID           string    `json:"id"`
	Channel      string    `json:"channel"`
	Conversation string    `json:"conversation"`
	Requester    string    `json:"requester"`
	ActionHash   []byte    `json:"action_hash"`
	Intent       string    `json:"intent"`
	Rationale    string    `json:"rationale"`
	Risk         string    `json:"risk"`
	Approvers    []string  `json:"approvers"`
	CreatedAt    time.Time `json:"created_at"`
	ExpiresAt    time.Time `json:"expires_at"`
	// Preview is what the card shows will change (issue 28); omitted
	// when empty, so a request made before previews signs as it did.
	Preview string `json:"preview,omitempty"`
}

// requestContext prefixes the signed bytes, so a request signature can never
// be taken for a token's or a pairing record's (same key, other messages).
const requestContext = "silas approval request v1\n"

// Errors returned by VerifyRequest; both wrap ErrRequestInvalid.
var (
	ErrRequestInvalid  = errors.New("approval request invalid")
	ErrRequestUnsigned = fmt.Errorf("%w: not signed", ErrRequestInvalid)
	ErrRequestAltered  = fmt.Errorf("%w: altered after it was proposed", ErrRequestInvalid)
)

// SigningBytes returns the bytes that are signed: a context line, then RFC
// 8785 JSON of the request. Times are cut to microseconds in UTC (what
// PostgreSQL keeps) and a nil approver list is the empty list (what a
// text[] reads back as), so a stored request signs the same as it did
// before it was stored.
func (r Request) SigningBytes() ([]byte, error) {
	r = r.asStored()
	// Room for the members' names and fixed-size values, and the strings
	// as they are when nothing in them is escaped.
	n := len(requestContext) + 256 + len(r.ID) + len(r.Channel) + len(r.Conversation) + len(r.Requester) +
		len(r.ActionHash)*4/3 + len(r.Intent) + len(r.Rationale) + len(r.Risk) + len(r.Preview)
	for _, a := range r.Approvers {
		n += len(a) + 3
	}
	b := append(make([]byte, 0, n), requestContext...)
	if b, ok := r.appendCanonical(b); ok {
		return b, nil
	}
	c, err := r.signingJSON()
	if err != nil {
		return nil, err
	}
	return append(b, c...), nil
}

// asStored is r as reading it back from the database gives it.
func (r Request) asStored() Request {
	r.CreatedAt = r.CreatedAt.UTC().Truncate(time.Microsecond)
	r.ExpiresAt = r.ExpiresAt.UTC().Truncate(time.Microsecond)
	if r.Approvers == nil {
		r.Approvers = []string{}
	}
	if r.ActionHash == nil {
		r.ActionHash = []byte{}
	}
	return r
}

// SignRequest signs a request as proposed.
func SignRequest(key ed25519.PrivateKey, r Request) ([]byte, error) {
	b, err := r.SigningBytes()
	if err != nil {
		return nil, err
	}
	return ed25519.Sign(key, b), nil
}

// VerifyRequest checks a stored request against its signature.
func VerifyRequest(pub ed25519.PublicKey, r Request, sig []byte) error {
	if len(sig) == 0 {
		return ErrRequestUnsigned
	}
	b, err := r.SigningBytes()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRequestInvalid, err)
	}
	if !verify(pub, b, sig) {
		return ErrRequestAltered
	}
	return nil
}
