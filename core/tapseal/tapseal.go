// Package tapseal seals a tap's handle (core.Turn.TapHandle) while it is
// at rest. A handle is a credential of sorts — a Slack response_url is a
// bearer capability, a Discord interaction token answers as the bot — so
// it must not sit in a plaintext column of the turn or of its outbox
// answer job (security invariant 5). The engine seals a handle before the
// turn is stored; the outbox lane opens it just before it calls the
// channel's AnswerTap. The key is derived from the gateway's Ed25519
// signing key, which the database never sees.
//
// This package must never log, return in an error or otherwise reveal a
// handle or the key, and never open a handle for a different tap than the
// one it was sealed for.
package tapseal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// context separates this key from every other use of the signing key.
const context = "silas tap-handle v1"

// prefix marks a sealed handle (and its format's version).
const prefix = "th1."

// ErrOpen means a sealed handle did not open: it was sealed under another
// key, for another tap, altered, or never sealed at all.
var ErrOpen = errors.New("tapseal: handle does not open (other key, other tap, or altered)")

// Sealer seals and opens tap handles. It is safe for concurrent use.
type Sealer struct{ aead cipher.AEAD }

// New derives the sealing key from the gateway's signing key (HKDF-SHA256
// over its seed, fixed context) and returns a Sealer using AES-256-GCM.
func New(key ed25519.PrivateKey) (*Sealer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("tapseal: an Ed25519 private key is required")
	}
	k, err := hkdf.Key(sha256.New, key.Seed(), nil, context, 32)
	if err != nil {
		return nil, fmt.Errorf("tapseal: derive key: %w", err)
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, fmt.Errorf("tapseal: cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("tapseal: gcm: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// additional binds a sealed handle to its tap: a handle moved to another
// conversation's or event's row does not open. Each part is length-
// prefixed, so no two (conversation, event) pairs give the same bytes.
func additional(conversation, eventID string) []byte {
	ad := make([]byte, 0, len(context)+16+len(conversation)+len(eventID))
	ad = append(ad, context...)
	ad = binary.BigEndian.AppendUint64(ad, uint64(len(conversation)))
	ad = append(ad, conversation...)
	ad = binary.BigEndian.AppendUint64(ad, uint64(len(eventID)))
	return append(ad, eventID...)
}

// Seal returns handle sealed for the tap (conversation, eventID); an empty
// handle (nothing to answer with) stays empty. The result is printable
// ASCII, storable as text.
func (s *Sealer) Seal(handle, conversation, eventID string) (string, error) {
	if handle == "" {
		return "", nil
	}
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(handle)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("tapseal: nonce: %w", err)
	}
	out := s.aead.Seal(nonce, nonce, []byte(handle), additional(conversation, eventID))
	return prefix + base64.RawURLEncoding.EncodeToString(out), nil
}

// Open returns the handle Seal sealed for the tap (conversation, eventID);
// an empty sealed handle opens to an empty handle. Anything else that does
// not open is ErrOpen, which never quotes the input.
func (s *Sealer) Open(sealed, conversation, eventID string) (string, error) {
	if sealed == "" {
		return "", nil
	}
	rest, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return "", ErrOpen
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(b) < s.aead.NonceSize()+s.aead.Overhead() {
		return "", ErrOpen
	}
	n := s.aead.NonceSize()
	plain, err := s.aead.Open(nil, b[:n], b[n:], additional(conversation, eventID))
	if err != nil {
		return "", ErrOpen
	}
	return string(plain), nil
}
