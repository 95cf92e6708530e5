package tapseal_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core/tapseal"
)

func newSealer(t *testing.T) *tapseal.Sealer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tapseal.New(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A sealed handle opens only for the tap it was sealed for, under the key
// it was sealed with, unaltered; the sealed form and the error never carry
// the handle.
func TestSealOpen(t *testing.T) {
	t.Parallel()
	s, other := newSealer(t), newSealer(t)
	const handle = "https://hooks.slack.test/actions/T1/1/CANARY"
	sealed, err := s.Seal(handle, "slack:C1", "ev1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "CANARY") || !strings.HasPrefix(sealed, "th1.") {
		t.Fatalf("sealed form %q", sealed)
	}
	if again, _ := s.Seal(handle, "slack:C1", "ev1"); again == sealed {
		t.Fatal("two seals of one handle are equal: the nonce is not fresh")
	}
	flip := func(s string) string {
		b := []byte(s)
		if b[10] == 'A' {
			b[10] = 'B'
		} else {
			b[10] = 'A'
		}
		return string(b)
	}
	tests := []struct {
		name, sealed, conv, event string
		open                      *tapseal.Sealer
		want                      string
		ok                        bool
	}{
		{"its own tap", sealed, "slack:C1", "ev1", s, handle, true},
		{"no handle", "", "slack:C1", "ev1", s, "", true},
		{"another event", sealed, "slack:C1", "ev2", s, "", false},
		{"another conversation", sealed, "slack:C2", "ev1", s, "", false},
		{"conversation and event shifted", sealed, "slack:C1e", "v1", s, "", false},
		{"another key", sealed, "slack:C1", "ev1", other, "", false},
		{"altered", flip(sealed), "slack:C1", "ev1", s, "", false},
		{"truncated", sealed[:20], "slack:C1", "ev1", s, "", false},
		{"never sealed", handle, "slack:C1", "ev1", s, "", false},
		{"not base64", "th1.!!!", "slack:C1", "ev1", s, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.open.Open(tt.sealed, tt.conv, tt.event)
			if tt.ok != (err == nil) || got != tt.want {
				t.Fatalf("Open = %q, %v; want %q, ok=%t", got, err, tt.want, tt.ok)
			}
			if err != nil && (!errors.Is(err, tapseal.ErrOpen) || strings.Contains(err.Error(), "CANARY")) {
				t.Fatalf("error %v", err)
			}
		})
	}
}

func TestNewNeedsAKey(t *testing.T) {
	t.Parallel()
	if _, err := tapseal.New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}
