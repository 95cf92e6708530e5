package approval

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"testing"
)

// TestVerifiedSet: a remembered verification answers only for exactly the
// same key, message and signature; a failure is never remembered.
func TestVerifiedSet(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	msg := []byte("silas verified-set test message")
	sig := ed25519.Sign(priv, msg)
	if !verify(pub, msg, sig) {
		t.Fatal("a valid signature does not verify")
	}
	flipped := func(b []byte, i int) []byte { c := append([]byte(nil), b...); c[i] ^= 1; return c }
	tests := []struct {
		name     string
		pub      ed25519.PublicKey
		msg, sig []byte
		want     bool
	}{
		{"same bytes", pub, msg, sig, true},
		{"message edited", pub, flipped(msg, 3), sig, false},
		{"message extended", pub, append(append([]byte(nil), msg...), 'x'), sig, false},
		{"signature edited", pub, msg, flipped(sig, 10), false},
		{"other key", otherPub, msg, sig, false},
		{"other key's signature", pub, msg, ed25519.Sign(otherPriv, msg), false},
		{"short signature", pub, msg, sig[:63], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the second time after any remembering
				if got := verify(tt.pub, tt.msg, tt.sig); got != tt.want {
					t.Fatalf("verify = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// TestVerifiedSetForgetsOldest: the set holds verifiedCap entries and
// evicts the oldest.
func TestVerifiedSetForgetsOldest(t *testing.T) {
	v := verifiedSet{keys: map[string]struct{}{}}
	for i := range verifiedCap + 10 {
		v.add(fmt.Sprint(i))
	}
	if len(v.keys) != verifiedCap {
		t.Fatalf("%d entries, want %d", len(v.keys), verifiedCap)
	}
	if _, ok := v.keys["0"]; ok {
		t.Fatal("the oldest entry was kept")
	}
	if _, ok := v.keys[fmt.Sprint(verifiedCap+9)]; !ok {
		t.Fatal("the newest entry was dropped")
	}
}
