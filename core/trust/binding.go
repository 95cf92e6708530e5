package trust

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
)

// record is what a binding signature covers.
type record struct {
	Identity string    `json:"identity"`
	Role     string    `json:"role"`
	BoundAt  time.Time `json:"bound_at"`
}

// HashPairingCode is how codes are stored: only their hash.
func HashPairingCode(code string) []byte {
	h := sha256.Sum256([]byte("silas-pairing:" + strings.ToUpper(strings.TrimSpace(code))))
	return h[:]
}

// SignBinding signs a binding record with the gateway key.
func SignBinding(key ed25519.PrivateKey, id core.IdentityID, role string, at time.Time) (rec, sig []byte, err error) {
	rec, err = json.Marshal(record{Identity: string(id), Role: role, BoundAt: at.UTC()})
	if err != nil {
		return nil, nil, fmt.Errorf("trust: sign binding: %w", err)
	}
	return rec, ed25519.Sign(key, rec), nil
}

// VerifyBinding reports whether a stored binding (identity, role, record,
// signature) is one the gateway signed: the signature verifies over the
// record and the record names the same identity and role as its row.
func VerifyBinding(pub ed25519.PublicKey, id core.IdentityID, role string, rec, sig []byte) bool {
	var r record
	return ed25519.Verify(pub, rec, sig) && json.Unmarshal(rec, &r) == nil && r.Identity == string(id) && r.Role == role
}
