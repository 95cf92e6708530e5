package approval

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"
)

func TestSignVerifyRequest(t *testing.T) {
	t.Parallel()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	// Nanoseconds and a local zone, as time.Now gives them at proposal.
	created := time.Date(2026, 11, 21, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))
	r := Request{
		ID: "appr1", Channel: "telegram", Conversation: "telegram:42", Requester: "telegram:7",
		ActionHash: []byte("0123456789abcdef0123456789abcdef"), Intent: "list files", Rationale: "asked for it",
		Risk: "low", Approvers: nil, CreatedAt: created, ExpiresAt: created.Add(5 * time.Minute),
	}
	sig, err := SignRequest(priv, r)
	if err != nil {
		t.Fatal(err)
	}
	// What reading the row back gives: microseconds, UTC, an empty list.
	stored := r
	stored.CreatedAt = r.CreatedAt.UTC().Truncate(time.Microsecond)
	stored.ExpiresAt = r.ExpiresAt.UTC().Truncate(time.Microsecond)
	stored.Approvers = []string{}

	edit := func(f func(*Request)) Request { c := stored; f(&c); return c }
	tok, _ := Mint(priv, "tok1", r.ActionHash, r.Conversation, "telegram:7", created, time.Minute)
	tests := []struct {
		name string
		pub  ed25519.PublicKey
		r    Request
		sig  []byte
		want error
	}{
		{"as proposed", pub, r, sig, nil},
		{"as stored", pub, stored, sig, nil},
		{"other key", otherPub, stored, sig, ErrRequestAltered},
		{"unsigned", pub, stored, nil, ErrRequestUnsigned},
		{"short signature", pub, stored, sig[:10], ErrRequestAltered},
		{"token signature", pub, stored, tok.Signature, ErrRequestAltered},
		{"action hash", pub, edit(func(c *Request) { c.ActionHash = []byte("fedcba9876543210fedcba9876543210") }), sig, ErrRequestAltered},
		{"risk", pub, edit(func(c *Request) { c.Risk = "irreversible" }), sig, ErrRequestAltered},
		{"intent", pub, edit(func(c *Request) { c.Intent = "list files " }), sig, ErrRequestAltered},
		{"rationale", pub, edit(func(c *Request) { c.Rationale = "" }), sig, ErrRequestAltered},
		{"approvers", pub, edit(func(c *Request) { c.Approvers = []string{"telegram:666"} }), sig, ErrRequestAltered},
		{"conversation", pub, edit(func(c *Request) { c.Conversation = "telegram:43" }), sig, ErrRequestAltered},
		{"channel", pub, edit(func(c *Request) { c.Channel = "webchat" }), sig, ErrRequestAltered},
		{"requester", pub, edit(func(c *Request) { c.Requester = "telegram:8" }), sig, ErrRequestAltered},
		{"id", pub, edit(func(c *Request) { c.ID = "appr2" }), sig, ErrRequestAltered},
		{"expiry", pub, edit(func(c *Request) { c.ExpiresAt = c.ExpiresAt.Add(time.Hour) }), sig, ErrRequestAltered},
		{"created", pub, edit(func(c *Request) { c.CreatedAt = c.CreatedAt.Add(time.Microsecond) }), sig, ErrRequestAltered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := VerifyRequest(tt.pub, tt.r, tt.sig)
			if !errors.Is(err, tt.want) {
				t.Fatalf("VerifyRequest = %v, want %v", err, tt.want)
			}
			if tt.want != nil && !errors.Is(err, ErrRequestInvalid) {
				t.Fatalf("%v does not wrap ErrRequestInvalid", err)
			}
		})
	}
}

func BenchmarkSignVerifyRequest(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now()
	r := Request{ID: "a", Channel: "c", Conversation: "c:1", Requester: "c:2", ActionHash: make([]byte, 32), Intent: "i", Rationale: "r",
		Risk: "low", Approvers: []string{"role:owner"}, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
	for b.Loop() {
		sig, err := SignRequest(priv, r)
		if err != nil {
			b.Fatal(err)
		}
		if err := VerifyRequest(pub, r, sig); err != nil {
			b.Fatal(err)
		}
	}
}
