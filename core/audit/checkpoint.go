package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/silas-gateway/silas/core/canon"
)

// A Checkpoint anchors the chain: the audit key's Ed25519 signature over
// {seq, hash, at} of one entry. The chain alone proves only that rows agree
// with each other; someone who can write to the database can edit a row and
// recompute every hash after it, or delete the newest rows, and the chain
// still verifies. A checkpoint cannot be recomputed without the key, which
// the database (and its roles) never see.
type Checkpoint struct {
	Seq       int64
	Hash      []byte
	At        time.Time
	KeyID     string
	Signature []byte
}

// checkpointType separates checkpoint signatures from anything else an
// Ed25519 key might sign.
const checkpointType = "silas.audit.checkpoint/1"

// CheckpointMessage returns the bytes signed for a checkpoint: RFC 8785
// JSON of {at, hash (hex), seq, type}. at is hashed at the microsecond
// precision PostgreSQL keeps, like entries.
func CheckpointMessage(seq int64, hash []byte, at time.Time) ([]byte, error) {
	raw, err := json.Marshal(struct {
		At   string `json:"at"`
		Hash string `json:"hash"`
		Seq  int64  `json:"seq"`
		Type string `json:"type"`
	}{Truncate(at).Format(TimeFormat), hex.EncodeToString(hash), seq, checkpointType})
	if err != nil {
		return nil, fmt.Errorf("audit: marshal checkpoint: %w", err)
	}
	return canon.Transform(raw)
}

// KeyID names a public key: "sha256:" and the first 8 bytes of its hash,
// as the gateway key's fingerprint is written.
func KeyID(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return "sha256:" + hex.EncodeToString(h[:8])
}

// Sign makes the checkpoint of entry seq whose hash is hash.
func Sign(key ed25519.PrivateKey, seq int64, hash []byte, at time.Time) (Checkpoint, error) {
	if seq < 1 || len(hash) != sha256.Size {
		return Checkpoint{}, fmt.Errorf("audit: checkpoint needs an entry (seq %d, %d-byte hash)", seq, len(hash))
	}
	at = Truncate(at)
	msg, err := CheckpointMessage(seq, hash, at)
	if err != nil {
		return Checkpoint{}, err
	}
	return Checkpoint{Seq: seq, Hash: bytes.Clone(hash), At: at, KeyID: KeyID(key.Public().(ed25519.PublicKey)),
		Signature: ed25519.Sign(key, msg)}, nil
}

// ErrUnknownKey means a checkpoint names a key that is not trusted.
var ErrUnknownKey = errors.New("audit: checkpoint signed by an unknown key")

// ErrBadSignature means a checkpoint's signature does not verify.
var ErrBadSignature = errors.New("audit: checkpoint signature does not verify")

// Verify checks the signature with the trusted key whose id the
// checkpoint names. The key id is a hint for choosing among trusted keys,
// not evidence: the signature decides.
func (c Checkpoint) Verify(trusted []ed25519.PublicKey) error {
	msg, err := CheckpointMessage(c.Seq, c.Hash, c.At)
	if err != nil {
		return err
	}
	for _, pub := range trusted {
		if KeyID(pub) != c.KeyID {
			continue
		}
		if ed25519.Verify(pub, msg, c.Signature) {
			return nil
		}
		return ErrBadSignature
	}
	return ErrUnknownKey
}

// Same reports whether two checkpoints anchor the same entry with the same
// signature.
func (c Checkpoint) Same(o Checkpoint) bool {
	return c.Seq == o.Seq && bytes.Equal(c.Hash, o.Hash) && c.At.Equal(o.At) && c.KeyID == o.KeyID && bytes.Equal(c.Signature, o.Signature)
}
