package consent

import (
	"crypto/ed25519"
	"reflect"
	"slices"
	"sync"
	"time"
)

// verified remembers, per consent id, the last stored consent whose
// signature verified and the key it verified under, so that each step of
// a run under one consent does not canonicalise and verify the same row
// again (an Ed25519 verification and an RFC 8785 transform per step).
//
// Why this is safe: a hit needs every field of the stored consent that
// its signature covers, and the signature itself, to be equal to the ones
// that verified (unchanged), under the same public key — Ed25519
// verification is deterministic, so verifying again would say the same.
// The comparison is of the whole struct with only the fields that change
// after mint (the counters and the revocation, never signed) cleared:
// a field added later is compared too, and anything that differs in any
// way (an edited row, another encoding of a time) is a miss, which
// verifies in full. The memo is filled only by a verification that
// succeeded, in this process's memory: nothing in the database can add
// to it. The counters, the revocation and the expiry are still checked
// on every use against the row read locked (CounterIntact, limits).
var verified = struct {
	sync.Mutex
	m map[string]verifiedEntry
}{m: map[string]verifiedEntry{}}

// maxVerified bounds the memo: when full it starts again empty (a miss
// costs one verification).
const maxVerified = 4096

type verifiedEntry struct {
	pub string
	c   Consent
}

// signedPart is c without what changes after mint (and is not signed),
// its lists copied: the memo never shares memory with a caller's consent
// (which the caller may change afterwards).
func signedPart(c Consent) Consent {
	clearUnsigned(&c)
	c.Nodes, c.Argv, c.Programs, c.Secrets, c.Lanes = slices.Clone(c.Nodes), slices.Clone(c.Argv), slices.Clone(c.Programs), slices.Clone(c.Secrets), slices.Clone(c.Lanes)
	c.Verify, c.Signature = slices.Clone(c.Verify), slices.Clone(c.Signature)
	return c
}

// clearUnsigned clears what changes after mint: the counters and the
// revocation, which no signature covers.
func clearUnsigned(c *Consent) {
	c.Uses, c.Units, c.RevokedAt, c.AuditedUses, c.AuditedUnits = 0, 0, time.Time{}, 0, 0
}

// verifiedBefore reports whether c, as signed, verified under pub before.
func verifiedBefore(pub ed25519.PublicKey, c Consent) bool {
	verified.Lock()
	e, ok := verified.m[c.ID]
	verified.Unlock()
	if !ok || e.pub != string(pub) {
		return false
	}
	clearUnsigned(&c)
	return reflect.DeepEqual(e.c, c)
}

// rememberVerified records that c verified under pub.
func rememberVerified(pub ed25519.PublicKey, c Consent) {
	verified.Lock()
	defer verified.Unlock()
	if len(verified.m) >= maxVerified {
		clear(verified.m)
	}
	verified.m[c.ID] = verifiedEntry{pub: string(pub), c: signedPart(c)}
}
