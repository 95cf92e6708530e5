package secrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
)

func newSealer(t *testing.T) (*Sealer, Key) {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSealer(k)
	if err != nil {
		t.Fatal(err)
	}
	return s, k
}

func TestSealOpen(t *testing.T) {
	s, _ := newSealer(t)
	other, _ := newSealer(t)
	value := []byte("ghp_0123456789abcdefghijklmnopqrstuvwxyzAB")

	a, err := s.Seal("github_token", value)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Seal("github_token", value)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, b) {
		t.Fatal("sealing the same value twice gave equal ciphertexts")
	}
	if len(a) != len(value)+Overhead || a[0] != formatV1 {
		t.Fatalf("sealed length %d / version %d", len(a), a[0])
	}
	if bytes.Contains(a, value) {
		t.Fatal("ciphertext contains the value")
	}
	for _, ct := range [][]byte{a, b} {
		got, err := s.Open("github_token", ct)
		if err != nil || !bytes.Equal(got, value) {
			t.Fatalf("open: %q, %v", got, err)
		}
	}

	tampered := func(i int) []byte {
		c := bytes.Clone(a)
		c[i] ^= 0x01
		return c
	}
	cases := []struct {
		name   string
		sealer *Sealer
		secret string
		ct     []byte
	}{
		{"wrong key", other, "github_token", a},
		{"moved to another name", s, "slack_token", a},
		{"name differing in case", s, "GITHUB_TOKEN", a},
		{"tampered version", s, "github_token", tampered(0)},
		{"tampered nonce", s, "github_token", tampered(3)},
		{"tampered ciphertext", s, "github_token", tampered(1 + nonceSize + 2)},
		{"tampered tag", s, "github_token", tampered(len(a) - 1)},
		{"truncated", s, "github_token", a[:len(a)-1]},
		{"too short", s, "github_token", a[:Overhead-1]},
		{"empty", s, "github_token", nil},
		{"appended byte", s, "github_token", append(bytes.Clone(a), 0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.sealer.Open(c.secret, c.ct)
			if !errors.Is(err, ErrOpen) || got != nil {
				t.Fatalf("got %q, %v; want ErrOpen", got, err)
			}
		})
	}
}

func TestSealEmptyValueAndBadName(t *testing.T) {
	s, _ := newSealer(t)
	ct, err := s.Seal("x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Open("x", ct); err != nil || len(v) != 0 {
		t.Fatalf("%q %v", v, err)
	}
	if _, err := s.Seal("not a name", []byte("v")); !errors.Is(err, ErrBadName) {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := NewSealer(Key{}); err == nil {
		t.Fatal("zero key accepted")
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "github_token", "GITHUB_TOKEN", "k8s_token_2", strings.Repeat("a", MaxNameLen)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "_x", "1abc", "a-b", "a b", "a.b", "ä", "a\x00", strings.Repeat("a", MaxNameLen+1)} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if EnvName("github_token") != "GITHUB_TOKEN" {
		t.Fatal(EnvName("github_token"))
	}
}

func TestKeyNeverFormats(t *testing.T) {
	_, k := newSealer(t)
	enc := k.Encode()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("key", slog.Any("key", k), "k2", k)
	out := buf.String() + fmt.Sprintf("%v %+v %#v %s %x %q %d", k, k, k, k, k, k, k)
	if strings.Contains(out, enc) || strings.Contains(out, fmt.Sprintf("%x", k.b[:])) || !strings.Contains(out, "[redacted]") {
		t.Fatalf("key leaked or not redacted: %s", out)
	}
	if len(k.Fingerprint()) != 16 || strings.Contains(enc, k.Fingerprint()) {
		t.Fatal(k.Fingerprint())
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "secrets.key")

	k1, created, err := LoadOrCreateKey(path)
	if err != nil || !created {
		t.Fatalf("first: created=%v err=%v", created, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %04o", st.Mode().Perm())
	}
	if dst, _ := os.Stat(filepath.Dir(path)); dst.Mode().Perm() != 0o700 {
		t.Fatalf("key dir mode %04o", dst.Mode().Perm())
	}
	k2, created, err := LoadOrCreateKey(path)
	if err != nil || created || k1 != k2 {
		t.Fatalf("second: created=%v err=%v same=%v", created, err, k1 == k2)
	}
	if _, err := CreateKey(path); err == nil {
		t.Fatal("CreateKey overwrote an existing key")
	}

	// A key sealed with the file's key opens with the same key from env.
	s1, _ := NewSealer(k1)
	ct, _ := s1.Seal("n", []byte("v"))
	t.Setenv("SILAS_TEST_SECRETS_KEY", k1.Encode())
	kenv, ok, err := KeyFromEnv("SILAS_TEST_SECRETS_KEY")
	if err != nil || !ok || kenv != k1 {
		t.Fatalf("env: ok=%v err=%v", ok, err)
	}
	t.Setenv("SILAS_TEST_SECRETS_KEY", "file:"+path)
	kfile, ok, err := KeyFromEnv("SILAS_TEST_SECRETS_KEY")
	if err != nil || !ok || kfile != k1 {
		t.Fatalf("env file: ok=%v err=%v", ok, err)
	}
	s2, _ := NewSealer(kfile)
	if v, err := s2.Open("n", ct); err != nil || string(v) != "v" {
		t.Fatal(v, err)
	}
	t.Setenv("SILAS_TEST_SECRETS_KEY", "")
	if _, ok, err := KeyFromEnv("SILAS_TEST_SECRETS_KEY"); ok || err != nil {
		t.Fatal(ok, err)
	}

	// Group- or other-accessible files are refused.
	for _, mode := range []os.FileMode{0o640, 0o604, 0o660, 0o602} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKey(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("mode %04o: %v", mode, err)
		}
		if _, _, err := LoadOrCreateKey(path); err == nil {
			t.Fatalf("LoadOrCreate with mode %04o", mode)
		}
	}
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	if k, err := LoadKey(path); err != nil || k != k1 {
		t.Fatal(err)
	}
}

func TestBadKeyValues(t *testing.T) {
	dir := t.TempDir()
	secretish := "c2hvcnQ=" // base64 of "short": wrong length
	for _, v := range []string{"", "not base64 !!", secretish, "file:" + filepath.Join(dir, "missing")} {
		_, err := ParseKeyValue(v)
		if err == nil {
			t.Fatalf("%q accepted", v)
		}
		if v != "" && !strings.HasPrefix(v, "file:") && strings.Contains(err.Error(), v) {
			t.Fatalf("error echoes the key value: %v", err)
		}
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("AAAA\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(bad); err == nil || strings.Contains(err.Error(), "AAAA") {
		t.Fatalf("bad key file: %v", err)
	}
	// Every base64 flavour of a valid key is accepted.
	k, _ := GenerateKey()
	for _, v := range []string{k.Encode(), strings.TrimRight(k.Encode(), "="), " " + k.Encode() + "\n"} {
		if got, err := DecodeKey(v); err != nil || got != k {
			t.Fatalf("%v", err)
		}
	}
}

func TestTokens(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok, hash, err := NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if len(tok) != 43 || seen[tok] {
			t.Fatalf("token %d chars / repeated", len(tok))
		}
		seen[tok] = true
		if !TokenMatches(hash, tok) || TokenMatches(hash, tok+"x") || TokenMatches(hash, "") || TokenMatches(nil, tok) {
			t.Fatal("TokenMatches")
		}
		if bytes.Contains(hash, []byte(tok)) {
			t.Fatal("hash contains token")
		}
	}
}

func TestNewRequest(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	r, tok, err := NewRequest(Request{Name: "github_token", Requester: "webchat:local", Conversation: "webchat:local", Channel: "webchat"}, now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ref == "" || r.Label != "github_token" || r.Status != StatusPending || !r.ExpiresAt.Equal(now.Add(10*time.Minute)) || !TokenMatches(r.TokenHash, tok) {
		t.Fatalf("%+v", r)
	}
	if r.StateAt(now) != StatusPending || r.StateAt(r.ExpiresAt) != StatusExpired {
		t.Fatal("StateAt")
	}
	r.Status = StatusFulfilled
	if r.StateAt(r.ExpiresAt.Add(time.Hour)) != StatusFulfilled {
		t.Fatal("fulfilled stays fulfilled")
	}
	if _, _, err := NewRequest(Request{Name: "bad name"}, now, time.Minute); !errors.Is(err, ErrBadName) {
		t.Fatal(err)
	}
	if _, _, err := NewRequest(Request{Name: "x"}, now, 0); err == nil {
		t.Fatal("zero ttl accepted")
	}
}

type fakeCiphertexts map[string][]byte

func (f fakeCiphertexts) SecretCiphertext(_ context.Context, name string) ([]byte, error) {
	ct, ok := f[name]
	if !ok {
		return nil, core.ErrNotFound
	}
	return ct, nil
}

func TestReveal(t *testing.T) {
	s, _ := newSealer(t)
	ct, _ := s.Seal("a", []byte("value-a"))
	st := fakeCiphertexts{"a": ct, "b": ct}
	if v, err := Reveal(t.Context(), st, s, "a"); err != nil || string(v) != "value-a" {
		t.Fatal(v, err)
	}
	if _, err := Reveal(t.Context(), st, s, "b"); !errors.Is(err, ErrOpen) {
		t.Fatal("ciphertext copied to b opened:", err)
	}
	if _, err := Reveal(t.Context(), st, s, "c"); !errors.Is(err, core.ErrNotFound) {
		t.Fatal(err)
	}
}
