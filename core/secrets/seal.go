package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the data key's size: AES-256.
const KeySize = 32

// Key is the data key that seals secrets. It formats itself as
// "[redacted]" under every fmt verb and in slog, so logging one by accident
// leaks nothing.
type Key struct{ b [KeySize]byte }

// Format implements fmt.Formatter.
func (Key) Format(f fmt.State, _ rune) { io.WriteString(f, "[redacted]") } //nolint:errcheck

// String implements fmt.Stringer.
func (Key) String() string { return "[redacted]" }

// GoString implements fmt.GoStringer.
func (Key) GoString() string { return "secrets.Key([redacted])" }

// LogValue implements slog.LogValuer.
func (Key) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// Fingerprint identifies the key without revealing it (16 hex characters of
// a domain-separated sha256), so an operator can tell which key a gateway
// runs with.
func (k Key) Fingerprint() string {
	h := sha256.New()
	h.Write([]byte("silas/secrets-key-fingerprint/v1\x00"))
	h.Write(k.b[:])
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// KeyFromBytes copies b (exactly KeySize bytes) into a Key.
func KeyFromBytes(b []byte) (Key, error) {
	var k Key
	if len(b) != KeySize {
		return k, fmt.Errorf("secrets: a data key is %d bytes, got %d", KeySize, len(b))
	}
	copy(k.b[:], b)
	return k, nil
}

// GenerateKey returns a new random data key.
func GenerateKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k.b[:]); err != nil {
		return k, fmt.Errorf("secrets: random key: %w", err)
	}
	return k, nil
}

// Encode returns the key as standard base64, the form of the key file and
// of the environment value. Handle the result as the key itself.
func (k Key) Encode() string { return base64.StdEncoding.EncodeToString(k.b[:]) }

// DecodeKey parses a base64 (standard or URL alphabet, padded or not) data
// key. The error never contains the input.
func DecodeKey(s string) (Key, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == KeySize {
			return KeyFromBytes(b)
		}
	}
	return Key{}, fmt.Errorf("secrets: the data key must be %d bytes in base64 (generate one with `head -c 32 /dev/urandom | base64`)", KeySize)
}

// ErrNoKey means the key file does not exist.
var ErrNoKey = errors.New("secrets: data key file does not exist")

// LoadKey reads a data key file (base64, one line). It refuses a file that
// group or others can read or write.
func LoadKey(path string) (Key, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Key{}, fmt.Errorf("%w: %s", ErrNoKey, path)
	}
	if err != nil {
		return Key{}, fmt.Errorf("secrets: stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return Key{}, fmt.Errorf("secrets: %s is not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return Key{}, fmt.Errorf("secrets: %s has mode %04o; it must not be accessible to group or others (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("secrets: read %s: %w", path, err)
	}
	k, err := DecodeKey(string(raw))
	if err != nil {
		return Key{}, fmt.Errorf("secrets: %s: %w", path, err)
	}
	return k, nil
}

// CreateKey writes a new random key to path (mode 0600, directory 0700). It
// refuses to overwrite an existing file: a new key cannot open the secrets
// sealed with the old one.
func CreateKey(path string) (Key, error) {
	k, err := GenerateKey()
	if err != nil {
		return Key{}, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return Key{}, fmt.Errorf("secrets: create directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Key{}, fmt.Errorf("secrets: create %s: %w", path, err)
	}
	if _, err := io.WriteString(f, k.Encode()+"\n"); err != nil {
		f.Close()
		return Key{}, fmt.Errorf("secrets: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return Key{}, fmt.Errorf("secrets: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return Key{}, fmt.Errorf("secrets: close %s: %w", path, err)
	}
	return k, nil
}

// LoadOrCreateKey loads the key file, creating it on first use.
func LoadOrCreateKey(path string) (k Key, created bool, err error) {
	k, err = LoadKey(path)
	if errors.Is(err, ErrNoKey) {
		k, err = CreateKey(path)
		return k, err == nil, err
	}
	return k, false, err
}

// ParseKeyValue reads a configured key value: "file:/path" loads a key file
// (same rules as LoadKey), anything else is the base64 key itself.
func ParseKeyValue(v string) (Key, error) {
	if p, ok := strings.CutPrefix(v, "file:"); ok {
		return LoadKey(p)
	}
	return DecodeKey(v)
}

// KeyFromEnv reads the key from the environment variable name (a base64 key
// or "file:/path"). ok is false when the variable is unset or empty.
func KeyFromEnv(name string) (k Key, ok bool, err error) {
	v := os.Getenv(name)
	if v == "" {
		return Key{}, false, nil
	}
	k, err = ParseKeyValue(v)
	if err != nil {
		return Key{}, true, fmt.Errorf("secrets: %s: %w", name, err)
	}
	return k, true, nil
}

// Sealed-value format, version 1:
//
//	0x01 ‖ nonce (12 bytes, random) ‖ AES-256-GCM(ciphertext ‖ 16-byte tag)
//
// with associated data "silas/secret/v1\x00" ‖ name.
const (
	formatV1  = 0x01
	nonceSize = 12
	tagSize   = 16
	// Overhead is how many bytes sealing adds to a value.
	Overhead = 1 + nonceSize + tagSize
)

// ErrOpen means a sealed value did not open: wrong key, tampered bytes, or
// a ciphertext sealed for another name. The cases are indistinguishable on
// purpose.
var ErrOpen = errors.New("secrets: sealed value does not open (wrong key, tampered, or sealed for another name)")

// Sealer seals and opens secret values with the data key.
type Sealer struct {
	aead cipher.AEAD
}

// NewSealer returns a Sealer for k.
func NewSealer(k Key) (*Sealer, error) {
	if k == (Key{}) {
		return nil, errors.New("secrets: the data key is all zeros (not loaded?)")
	}
	block, err := aes.NewCipher(k.b[:])
	if err != nil {
		return nil, fmt.Errorf("secrets: cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets: gcm: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

func associatedData(name string) []byte {
	return append([]byte("silas/secret/v1\x00"), name...)
}

// Seal encrypts value for the secret name. Each call uses a fresh random
// nonce, so sealing the same value twice gives different bytes.
func (s *Sealer) Seal(name string, value []byte) ([]byte, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	out := make([]byte, 1+nonceSize, Overhead+len(value))
	out[0] = formatV1
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("secrets: random nonce: %w", err)
	}
	return s.aead.Seal(out, out[1:1+nonceSize], value, associatedData(name)), nil
}

// Open decrypts a sealed value of the secret name. Any failure is ErrOpen.
func (s *Sealer) Open(name string, sealed []byte) ([]byte, error) {
	if len(sealed) < Overhead || sealed[0] != formatV1 {
		return nil, ErrOpen
	}
	v, err := s.aead.Open(nil, sealed[1:1+nonceSize], sealed[1+nonceSize:], associatedData(name))
	if err != nil {
		return nil, ErrOpen
	}
	return v, nil
}
