package approval

import (
	"crypto/ed25519"
	"crypto/sha256"
	"sync"
)

// Verified signatures. An approved execution checks the same two
// signatures twice in this process: the request's and the freshly minted
// token's at the decision, both again at the executor's gate (which must
// not trust the decision: the rows may have been edited in between). An
// Ed25519 verification is a pure function of the public key, the message
// and the signature, so the gate's second verification of exactly the
// same bytes can be answered from memory — and only then: the set is keyed
// by the whole public key and signature and the message's SHA-256, so an
// edited row, another key or another signature is verified afresh (a hit
// for another message would need a SHA-256 collision, which Ed25519's own
// SHA-512 of the message already relies on not happening), and an entry
// stays 128 bytes however long the request's preview (up to 32,000
// characters). Only successes are kept; the set is small and forgets the
// oldest first (a decision's gate runs milliseconds after it).
const verifiedCap = 256

type verifiedSet struct {
	mu   sync.Mutex
	keys map[string]struct{}
	ring [verifiedCap]string
	next int
}

var verified = verifiedSet{keys: make(map[string]struct{}, verifiedCap)}

// verify is ed25519.Verify(pub, msg, sig), answered from the set when this
// process has verified exactly these bytes before.
func verify(pub ed25519.PublicKey, msg, sig []byte) bool {
	if len(sig) != ed25519.SignatureSize || len(pub) != ed25519.PublicKeySize {
		return len(sig) == ed25519.SignatureSize && ed25519.Verify(pub, msg, sig) // as before: a bad key panics there
	}
	// Key, signature and digest have fixed sizes, so the concatenation is
	// unambiguous.
	var buf [ed25519.PublicKeySize + ed25519.SignatureSize + sha256.Size]byte
	sum := sha256.Sum256(msg)
	k := append(append(append(buf[:0], pub...), sig...), sum[:]...)
	verified.mu.Lock()
	_, ok := verified.keys[string(k)]
	verified.mu.Unlock()
	if ok {
		return true
	}
	if !ed25519.Verify(pub, msg, sig) {
		return false
	}
	verified.add(string(k))
	return true
}

func (v *verifiedSet) add(k string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.keys[k]; ok {
		return
	}
	if old := v.ring[v.next]; old != "" {
		delete(v.keys, old)
	}
	v.ring[v.next] = k
	v.keys[k] = struct{}{}
	v.next = (v.next + 1) % verifiedCap
}
