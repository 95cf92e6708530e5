package audit

// The files that live outside the database: the audit key, its public key
// and the head file. Unlike the rest of this package they touch the disk;
// they are here so the formats are defined next to what they protect.

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/silas-gateway/silas/core/keys"
)

// LoadOrCreateKey loads the audit signing key from keyPath, creating it
// (mode 0600, directory 0700) on first use, and makes sure its public key
// is in pubPath. pubPath keeps the public keys of earlier audit keys too:
// when a lost key is replaced, the new public key is appended, so older
// checkpoints still verify.
func LoadOrCreateKey(keyPath, pubPath string) (key ed25519.PrivateKey, created bool, err error) {
	key, created, err = keys.LoadOrCreate(keyPath)
	if err != nil {
		return nil, false, fmt.Errorf("audit: key %s: %w", keyPath, err)
	}
	pub := key.Public().(ed25519.PublicKey)
	have, err := LoadPublicKeys(pubPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	for _, h := range have {
		if h.Equal(pub) {
			return key, created, nil
		}
	}
	if err := appendPublicKey(pubPath, pub); err != nil {
		return nil, false, err
	}
	return key, created, nil
}

func appendPublicKey(path string, pub ed25519.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return fmt.Errorf("audit: marshal public key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("audit: create directory for %s: %w", path, err)
	}
	// Not secret, but only the gateway adds to it.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("audit: open %s: %w", path, err)
	}
	hdr := map[string]string{"Key-Id": KeyID(pub), "Created": time.Now().UTC().Format(time.RFC3339)}
	if err := pem.Encode(f, &pem.Block{Type: "PUBLIC KEY", Headers: hdr, Bytes: der}); err != nil {
		f.Close()
		return fmt.Errorf("audit: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("audit: sync %s: %w", path, err)
	}
	return f.Close()
}

// LoadPublicKeys reads every PEM "PUBLIC KEY" block (Ed25519) in path. A
// missing file is an error wrapping fs.ErrNotExist.
func LoadPublicKeys(path string) ([]ed25519.PublicKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit: public key: %w", err)
	}
	var out []ed25519.PublicKey
	for {
		var b *pem.Block
		b, raw = pem.Decode(raw)
		if b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			continue
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("audit: public key in %s: %w", path, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("audit: %s holds a %T public key, want Ed25519", path, k)
		}
		out = append(out, pub)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("audit: %s holds no PEM \"PUBLIC KEY\" block", path)
	}
	return out, nil
}

// headLine is one line of the head file.
type headLine struct {
	Seq       int64  `json:"seq"`
	Hash      string `json:"hash"`
	At        string `json:"at"`
	KeyID     string `json:"key_id"`
	Signature string `json:"signature"`
}

// AppendHead appends a checkpoint to the head file as one JSON line and
// syncs it. The file is append-only by convention: the newest line is the
// latest signed head, which verify compares with the database.
func AppendHead(path string, c Checkpoint) error {
	b, err := json.Marshal(headLine{Seq: c.Seq, Hash: hex.EncodeToString(c.Hash), At: Truncate(c.At).Format(TimeFormat),
		KeyID: c.KeyID, Signature: base64.StdEncoding.EncodeToString(c.Signature)})
	if err != nil {
		return fmt.Errorf("audit: head line: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("audit: create directory for %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("audit: open head file: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("audit: write head file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("audit: sync head file: %w", err)
	}
	return f.Close()
}

// headTail is how much of the end of the head file ReadHead looks at: many
// lines, and constant work however long the file grows.
const headTail = 64 << 10

// ReadHead returns the newest checkpoint (highest seq) among the last lines
// of the head file, or nil when the file has none. A missing file is an
// error wrapping fs.ErrNotExist. Lines that do not parse (a write cut short
// by a crash) are skipped.
func ReadHead(path string) (*Checkpoint, error) {
	lines, err := ReadHeadLines(path)
	if err != nil {
		return nil, err
	}
	return NewestHead(lines), nil
}

// NewestHead returns the checkpoint with the highest seq (nil for none).
func NewestHead(lines []Checkpoint) *Checkpoint {
	var newest *Checkpoint
	for i := range lines {
		if newest == nil || lines[i].Seq > newest.Seq {
			newest = &lines[i]
		}
	}
	return newest
}

// ReadHeadLines returns every checkpoint among the last lines of the head
// file (headTail), in file order. Verify compares all of them with the
// log, not only the newest: a log truncated and then grown again past the
// old head (a reset sequence, the gateway appending and checkpointing
// anew) agrees with the newest line but not with the older ones.
func ReadHeadLines(path string) ([]Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit: head file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("audit: head file: %w", err)
	}
	partial := false
	if st.Size() > headTail {
		if _, err := f.Seek(st.Size()-headTail, io.SeekStart); err != nil {
			return nil, fmt.Errorf("audit: head file: %w", err)
		}
		partial = true
	}
	var lines []Checkpoint
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), headTail+1)
	for sc.Scan() {
		if partial { // the first line may start mid-way
			partial = false
			continue
		}
		if c, ok := parseHeadLine(sc.Bytes()); ok {
			lines = append(lines, c)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("audit: read head file: %w", err)
	}
	return lines, nil
}

func parseHeadLine(b []byte) (Checkpoint, bool) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return Checkpoint{}, false
	}
	var l headLine
	if err := json.Unmarshal(b, &l); err != nil {
		return Checkpoint{}, false
	}
	hash, err1 := hex.DecodeString(l.Hash)
	sig, err2 := base64.StdEncoding.DecodeString(l.Signature)
	at, err3 := time.Parse(TimeFormat, l.At)
	if err1 != nil || err2 != nil || err3 != nil || l.Seq < 1 {
		return Checkpoint{}, false
	}
	return Checkpoint{Seq: l.Seq, Hash: hash, At: at, KeyID: l.KeyID, Signature: sig}, true
}

// entryKeyPEM is the PEM type of the entry key file (mac.go).
const entryKeyPEM = "SILAS AUDIT ENTRY KEY"

// LoadEntryKey reads the entry key (mac.go) from path. A missing file is
// an error wrapping fs.ErrNotExist.
func LoadEntryKey(path string) (*EntryKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit: entry key: %w", err)
	}
	b, _ := pem.Decode(raw)
	if b == nil || b.Type != entryKeyPEM || len(b.Bytes) != 32 {
		return nil, fmt.Errorf("audit: entry key %s: not a PEM %q block of 32 bytes", path, entryKeyPEM)
	}
	from, err := strconv.ParseInt(b.Headers["From-Seq"], 10, 64)
	if err != nil || from < 1 {
		return nil, fmt.Errorf("audit: entry key %s: bad From-Seq header %q", path, b.Headers["From-Seq"])
	}
	return &EntryKey{Key: b.Bytes, FromSeq: from}, nil
}

// LoadOrCreateEntryKey loads the entry key from path or, when there is
// none, creates one (mode 0600, directory 0700) that MACs from head+1 on:
// head is the newest seq in the log, read under the writer's chain lock,
// so no row after it goes unMAC'd. created says a new key was made.
func LoadOrCreateEntryKey(path string, head int64) (k *EntryKey, created bool, err error) {
	k, err = LoadEntryKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, false, fmt.Errorf("audit: entry key: %w", err)
	}
	k = &EntryKey{Key: key, FromSeq: head + 1}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("audit: create directory for %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) { // another process was quicker
		k, err = LoadEntryKey(path)
		return k, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("audit: create entry key: %w", err)
	}
	blk := &pem.Block{Type: entryKeyPEM, Headers: map[string]string{"From-Seq": strconv.FormatInt(k.FromSeq, 10)}, Bytes: key}
	err = pem.Encode(f, blk)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, false, fmt.Errorf("audit: write entry key %s: %w", path, err)
	}
	return k, true, nil
}
