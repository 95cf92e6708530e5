package trust

import (
	"bytes"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
)

func TestVerifyBinding(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	otherPub, _, _ := ed25519.GenerateKey(nil)
	rec, sig, err := SignBinding(key, "test:1", "auth", time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(rec, []byte(`"auth"`), []byte(`"owner"`), 1)
	tests := []struct {
		name     string
		pub      ed25519.PublicKey
		id       core.IdentityID
		role     string
		rec, sig []byte
		want     bool
	}{
		{"as signed", pub, "test:1", "auth", rec, sig, true},
		{"row names another identity", pub, "test:2", "auth", rec, sig, false},
		{"row names another role", pub, "test:1", "owner", rec, sig, false},
		{"record edited", pub, "test:1", "owner", tampered, sig, false},
		{"another key", otherPub, "test:1", "auth", rec, sig, false},
		{"no signature", pub, "test:1", "auth", rec, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := VerifyBinding(tt.pub, tt.id, tt.role, tt.rec, tt.sig); got != tt.want {
				t.Fatalf("VerifyBinding = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHashPairingCode(t *testing.T) {
	// Codes are typed by people: case and surrounding space do not matter.
	if !bytes.Equal(HashPairingCode(" ab12cd "), HashPairingCode("AB12CD")) {
		t.Fatal("the same code typed differently hashes differently")
	}
	if bytes.Equal(HashPairingCode("AB12CD"), HashPairingCode("AB12CE")) {
		t.Fatal("different codes hash the same")
	}
}

func TestAccessCode(t *testing.T) {
	for range 100 {
		c := NewAccessCode()
		if len(c) != 6 {
			t.Fatalf("code %q is not 6 characters", c)
		}
		for _, r := range c {
			if !bytes.ContainsRune([]byte(accessAlphabet), r) {
				t.Fatalf("code %q has %q outside the alphabet", c, r)
			}
		}
	}
}
