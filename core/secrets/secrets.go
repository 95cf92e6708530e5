// Package secrets keeps credentials (API keys, bot tokens, passwords) that a
// user hands to Silas through the secure form, never through chat.
//
// It holds three things:
//
//   - the Sealer: AES-256-GCM with a random 96-bit nonce per seal and the
//     secret's name as associated data, so a ciphertext copied to another
//     name does not open. Sealed values have a versioned format:
//     version (1 byte) ‖ nonce (12 bytes) ‖ ciphertext and tag.
//   - the data key: 32 random bytes in a file of mode 0600 (or a base64
//     value from the environment), separate from the Ed25519 signing key.
//   - secure-input requests and their link tokens: 256 random bits,
//     single-use, bound to one request and expiring with it. Only the
//     token's sha256 is ever stored.
//
// This package must never log, print or return a key or a secret value in
// an error; its Key type formats itself as "[redacted]" to make accidents
// harmless. Values are opened only at the moment they are injected into a
// sandboxed execution.
package secrets

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
)

// Request statuses, as stored.
const (
	StatusPending   = "pending"
	StatusFulfilled = "fulfilled"
	StatusExpired   = "expired"
)

// Request asks a user to type one secret into the secure form. It is created
// by the `/secret <name>` command; the chat shows a card with a link
// (see secrets-web) and never the value.
type Request struct {
	// Ref identifies the request in the link (/secrets/{ref}); 128 random
	// bits, unique.
	Ref string
	// Name is the secret's name (see ValidateName); a second request for the
	// same name replaces the value when fulfilled (rotation).
	Name string
	// Label and Hint are shown on the form ("GitHub token", "a fine-grained
	// token with repo:read").
	Label string
	Hint  string
	// Requester, Conversation and Channel say who asked and where the card
	// lives, so the card can be updated once the value is stored.
	Requester    core.IdentityID
	Conversation core.ConversationID
	Channel      core.ChannelName
	ExpiresAt    time.Time
	CreatedAt    time.Time
	// Status is StatusPending, StatusFulfilled or StatusExpired as stored;
	// StateAt also accounts for a pending request past its expiry.
	Status string
	// TokenHash is sha256 of the link token. The token itself is never
	// stored.
	TokenHash []byte
}

// StateAt is the request's effective status at now: a pending request whose
// expiry has passed is expired even before a sweeper marks it.
func (r Request) StateAt(now time.Time) string {
	if r.Status == StatusPending && !now.Before(r.ExpiresAt) {
		return StatusExpired
	}
	return r.Status
}

// Outcome is the answer to an attempt to fulfil a request. Only
// OutcomeStored changed anything; the others are answers, not errors.
type Outcome int

const (
	// OutcomeStored: the value was sealed and stored, the request is
	// fulfilled.
	OutcomeStored Outcome = iota + 1
	// OutcomeNotFound: no request has this ref.
	OutcomeNotFound
	// OutcomeWrongToken: the ref exists but the token does not match. The
	// web form answers it exactly like OutcomeNotFound.
	OutcomeWrongToken
	// OutcomeAlreadyFulfilled: the link was used before (single use).
	OutcomeAlreadyFulfilled
	// OutcomeExpired: the request expired before it was fulfilled.
	OutcomeExpired
)

func (o Outcome) String() string {
	switch o {
	case OutcomeStored:
		return "stored"
	case OutcomeNotFound:
		return "not_found"
	case OutcomeWrongToken:
		return "wrong_token"
	case OutcomeAlreadyFulfilled:
		return "already_fulfilled"
	case OutcomeExpired:
		return "expired"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Info describes a stored secret without its value.
type Info struct {
	Name      string
	CreatedAt time.Time
	UpdatedAt time.Time
	// LastUsedAt is zero when the secret was never used.
	LastUsedAt time.Time
}

// CiphertextStore reads a sealed value by name (core.ErrNotFound when there
// is none). The store implements it and records the use.
type CiphertextStore interface {
	SecretCiphertext(ctx context.Context, name string) ([]byte, error)
}

// Reveal reads and opens the secret name. Call it only to inject the value
// into a sandboxed execution, and feed the value to redact.RedactValues for
// that execution's output.
func Reveal(ctx context.Context, st CiphertextStore, s *Sealer, name string) ([]byte, error) {
	ct, err := st.SecretCiphertext(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("secrets: read %s: %w", name, err)
	}
	v, err := s.Open(name, ct)
	if err != nil {
		return nil, fmt.Errorf("secrets: open %s: %w", name, err)
	}
	return v, nil
}

// MaxNameLen bounds a secret's name.
const MaxNameLen = 64

// ErrBadName means a secret name is not a valid identifier.
var ErrBadName = errors.New("secrets: a secret name is 1–64 letters, digits or underscores and starts with a letter")

// ValidateName checks that name is 1–64 ASCII letters, digits or
// underscores starting with a letter. Names become environment variable
// names (EnvName) and appear in audit entries and chat, so they are kept
// plain.
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return ErrBadName
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '_'):
		default:
			return ErrBadName
		}
	}
	return nil
}

// EnvName is the environment variable a secret is injected as: its name in
// upper case (github_token → GITHUB_TOKEN).
func EnvName(name string) string { return strings.ToUpper(name) }

// TokenBytes is the size of a link token's randomness (256 bits).
const TokenBytes = 32

// NewToken returns a new link token (43 URL-safe characters) and its
// sha256, which is what gets stored.
func NewToken() (token string, hash []byte, err error) {
	var b [TokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, fmt.Errorf("secrets: random token: %w", err)
	}
	token = base64.RawURLEncoding.EncodeToString(b[:])
	return token, HashToken(token), nil
}

// HashToken is the stored form of a link token.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// TokenMatches reports, in constant time, whether token hashes to hash.
func TokenMatches(hash []byte, token string) bool {
	if len(hash) != sha256.Size || token == "" {
		return false
	}
	return subtle.ConstantTimeCompare(hash, HashToken(token)) == 1
}

// NewRequest completes r (Name, Label, Hint, Requester, Conversation and
// Channel set by the caller) into a new pending request: a fresh Ref,
// CreatedAt = now, ExpiresAt = now + ttl, and a new link token whose hash
// is in TokenHash. The token goes into the link only.
func NewRequest(r Request, now time.Time, ttl time.Duration) (Request, string, error) {
	if err := ValidateName(r.Name); err != nil {
		return Request{}, "", err
	}
	if ttl <= 0 {
		return Request{}, "", errors.New("secrets: request ttl must be positive")
	}
	token, hash, err := NewToken()
	if err != nil {
		return Request{}, "", err
	}
	if r.Label == "" {
		r.Label = r.Name
	}
	r.Ref = core.NewID()
	r.CreatedAt = now
	r.ExpiresAt = now.Add(ttl)
	r.Status = StatusPending
	r.TokenHash = hash
	return r, token, nil
}
