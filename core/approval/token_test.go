package approval

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"
)

func TestMintCheck(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	hash := []byte("0123456789abcdef0123456789abcdef")
	s, err := Mint(priv, "tok1", hash, "webchat:local", "webchat:local", now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A stored-and-reloaded token must still verify.
	raw, _ := s.Marshal()
	reloaded, err := Unmarshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	tampered := reloaded
	tampered.Token.Approver = "telegram:1"
	otherHash := []byte("fedcba9876543210fedcba9876543210")

	tests := []struct {
		name string
		pub  ed25519.PublicKey
		tok  Signed
		hash []byte
		now  time.Time
		want error
	}{
		{"valid", pub, reloaded, hash, now.Add(30 * time.Second), nil},
		{"other key", otherPub, reloaded, hash, now, ErrBadSignature},
		{"tampered field", pub, tampered, hash, now, ErrBadSignature},
		{"expired", pub, reloaded, hash, now.Add(time.Minute), ErrExpired},
		{"action changed", pub, reloaded, otherHash, now, ErrHashMismatch},
		{"empty signature", pub, Signed{Token: reloaded.Token}, hash, now, ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.pub, tt.tok, tt.hash, tt.now)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Check = %v, want %v", err, tt.want)
			}
			if tt.want != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("%v does not wrap ErrInvalid", err)
			}
		})
	}
}

func BenchmarkMintCheck(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	hash := make([]byte, 32)
	now := time.Now()
	for b.Loop() {
		s, err := Mint(priv, "tok", hash, "c", "a", now, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := Check(pub, s, hash, now); err != nil {
			b.Fatal(err)
		}
	}
}
