// Package keys loads and creates the gateway's Ed25519 signing key. The key
// signs approval tokens and identity bindings. It lives in a file of mode
// 0600 under the data directory; its bytes are never logged.
package keys

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrNoKey means the key file does not exist.
var ErrNoKey = errors.New("keys: signing key file does not exist")

// Load reads an Ed25519 private key from a PEM (PKCS#8) file. It refuses a
// file that other users can read.
func Load(path string) (ed25519.PrivateKey, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s (run `silas keys init`)", ErrNoKey, path)
	}
	if err != nil {
		return nil, fmt.Errorf("keys: stat %s: %w", path, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("keys: %s has mode %04o; it must not be readable by group or others (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("keys: read %s: %w", path, err)
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("keys: %s is not a PEM \"PRIVATE KEY\" file", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("keys: parse %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("keys: %s holds a %T, want an Ed25519 key", path, k)
	}
	return priv, nil
}

// Create writes a new key to path (mode 0600, directory 0700). It refuses to
// overwrite an existing file: replacing the key invalidates every token and
// binding it signed.
func Create(path string) (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("keys: generate: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("keys: marshal: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("keys: create directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("keys: create %s: %w", path, err)
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		f.Close()
		return nil, fmt.Errorf("keys: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("keys: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("keys: close %s: %w", path, err)
	}
	return priv, nil
}

// LoadOrCreate loads the key, creating it on first start.
func LoadOrCreate(path string) (priv ed25519.PrivateKey, created bool, err error) {
	priv, err = Load(path)
	if errors.Is(err, ErrNoKey) {
		priv, err = Create(path)
		return priv, err == nil, err
	}
	return priv, false, err
}
