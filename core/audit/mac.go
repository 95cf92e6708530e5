package audit

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
)

// Entry MACs: which rows the gateway wrote. The chain proves rows agree
// with each other, and checkpoints prove the signed prefix was not
// rewritten, but neither tells a row the gateway appended from one
// appended by anyone else holding INSERT on audit_log (the gateway's own
// database role, or a superuser): a correctly chained row hashes like any
// other. So the writer stores, with every row, HMAC-SHA256 under the entry
// key over the row's hash (which covers seq, at, kind, actor, conversation,
// data and the previous hash). The entry key lives in a file next to the
// audit key (EntryKeyFile); the database never sees it. A row at or after
// the key's FromSeq without a valid MAC was not written by this gateway:
// `audit verify` names it, and the Checkpointer refuses to sign over it.
// Rows before FromSeq (written before the key existed) are covered by the
// signed checkpoints only.
//
// HMAC rather than a signature per entry: it costs about a microsecond on
// the writer's path (BenchmarkEntryMAC), where an Ed25519 signature costs
// tens; the price is that checking MACs needs the key, so only the
// gateway's host can do it (verify elsewhere with the public key checks the
// chain and checkpoints, and says the MACs were not checked).

// MACSize is the length of an entry MAC.
const MACSize = sha256.Size

// entryMACType separates entry MACs from anything else the key might MAC.
const entryMACType = "silas.audit.entry/1\x00"

// EntryKey is the key the writer MACs rows with.
type EntryKey struct {
	// Key is the HMAC-SHA256 key (32 random bytes).
	Key []byte
	// FromSeq is the first seq MAC'd under this key: the head of the log
	// when the key was made, plus one.
	FromSeq int64
}

// Covers reports whether the row at seq must carry a MAC under k.
func (k *EntryKey) Covers(seq int64) bool { return k != nil && seq >= k.FromSeq }

// MAC returns the entry MAC of a row whose hash is rowHash.
func (k *EntryKey) MAC(rowHash []byte) []byte { return k.NewMACer().MAC(rowHash) }

// NewMACer returns a MACer for many rows (the writer's batch): one HMAC
// state reset per row instead of a new one.
func (k *EntryKey) NewMACer() *MACer { return &MACer{h: hmac.New(sha256.New, k.Key)} }

// MACer computes entry MACs under one key; not safe for concurrent use.
type MACer struct {
	h   hash.Hash
	buf [len(entryMACType) + sha256.Size]byte
}

// MAC returns the entry MAC of a row whose hash is rowHash.
func (m *MACer) MAC(rowHash []byte) []byte {
	m.h.Reset()
	b := append(append(m.buf[:0], entryMACType...), rowHash...)
	m.h.Write(b)
	return m.h.Sum(nil)
}

// Valid reports whether mac is the entry MAC of rowHash.
func (m *MACer) Valid(rowHash, mac []byte) bool {
	return len(mac) == MACSize && hmac.Equal(m.MAC(rowHash), mac)
}
