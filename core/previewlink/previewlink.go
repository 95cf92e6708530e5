// Package previewlink serves an approval request's whole preview on the
// secure page when it is longer than its card shows (issue 28 point 5):
// it makes the link's token and, for the page, checks it and the request's
// signature before returning what the approver reads.
//
// The token is an HMAC of the request id under a key derived from the
// gateway's Ed25519 key, so any instance of the gateway makes and checks
// the same token without storing one; it only grants reading one
// request's preview, which the approver's card already shows in part. The
// page shows a preview only while the stored request still verifies: a
// preview changed in the database after the card is refused here as a tap
// on the card is. previewlink never decides, approves or runs anything
// and runs no SQL itself.
package previewlink

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/decide"
)

// keyContext separates this key from every other use of the gateway key.
const keyContext = "silas preview link v1\x00"

func macKey(key ed25519.PrivateKey) []byte {
	sum := sha256.Sum256(append([]byte(keyContext), key.Seed()...))
	return sum[:]
}

// Token is the link token of request id's preview page.
func Token(key ed25519.PrivateKey, id core.ApprovalID) string {
	m := hmac.New(sha256.New, macKey(key))
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// ErrNotFound: no such request, or the token is not its token (the two
// look alike to the page's visitor).
var ErrNotFound = errors.New("previewlink: no such preview")

// ErrAltered: the stored request no longer verifies (its preview or any
// other signed field was changed after it was proposed).
var ErrAltered = errors.New("previewlink: the request was altered after it was proposed")

// Store reads a request.
type Store interface {
	GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error)
}

// Pages answers the secure page's preview requests.
type Pages struct {
	Store Store
	Key   ed25519.PrivateKey
}

// Doc is what the page shows.
type Doc struct {
	Intent  string
	Preview string
}

// Preview returns request id's whole preview when token is its token and
// the stored request still verifies.
func (p Pages) Preview(ctx context.Context, id, token string) (Doc, error) {
	want := Token(p.Key, core.ApprovalID(id))
	if !hmac.Equal([]byte(want), []byte(token)) {
		return Doc{}, ErrNotFound
	}
	a, err := p.Store.GetApproval(ctx, core.ApprovalID(id))
	if errors.Is(err, core.ErrNotFound) {
		return Doc{}, ErrNotFound
	}
	if err != nil {
		return Doc{}, fmt.Errorf("previewlink: %w", err)
	}
	if a.Preview == "" {
		return Doc{}, ErrNotFound
	}
	if err := decide.RequestIntact(p.Key.Public().(ed25519.PublicKey), a); err != nil {
		return Doc{}, ErrAltered
	}
	return Doc{Intent: a.Intent, Preview: a.Preview}, nil
}
