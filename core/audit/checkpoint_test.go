package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCheckpointSignVerify(t *testing.T) {
	t.Parallel()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	hash := sha256.Sum256([]byte("entry"))
	at := time.Date(2030, 1, 2, 3, 4, 5, 678901234, time.UTC)
	c, err := Sign(key, 42, hash[:], at)
	if err != nil {
		t.Fatal(err)
	}
	if !c.At.Equal(Truncate(at)) || c.KeyID != KeyID(pub) {
		t.Fatalf("checkpoint = %+v", c)
	}
	if err := c.Verify([]ed25519.PublicKey{other, pub}); err != nil {
		t.Fatalf("Verify = %v", err)
	}
	cases := []struct {
		name   string
		change func(*Checkpoint)
		want   error
	}{
		{"seq", func(c *Checkpoint) { c.Seq++ }, ErrBadSignature},
		{"hash", func(c *Checkpoint) { c.Hash = bytes.Clone(c.Hash); c.Hash[0] ^= 1 }, ErrBadSignature},
		{"at", func(c *Checkpoint) { c.At = c.At.Add(time.Microsecond) }, ErrBadSignature},
		{"signature", func(c *Checkpoint) { c.Signature = bytes.Clone(c.Signature); c.Signature[5] ^= 1 }, ErrBadSignature},
		{"key id of an untrusted key", func(c *Checkpoint) { c.KeyID = KeyID(other) + "x" }, ErrUnknownKey},
		{"key id of another trusted key", func(c *Checkpoint) { c.KeyID = KeyID(other) }, ErrBadSignature},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := c
			tc.change(&d)
			if err := d.Verify([]ed25519.PublicKey{other, pub}); !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
	if err := c.Verify(nil); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Verify without keys = %v", err)
	}
	if _, err := Sign(key, 0, hash[:], at); err == nil {
		t.Fatal("signed a checkpoint of seq 0")
	}
}

func TestHeadFile(t *testing.T) {
	t.Parallel()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	path := filepath.Join(t.TempDir(), "audit", "head.log")
	if _, err := ReadHead(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	var last Checkpoint
	// Enough lines that the file outgrows the part ReadHead looks at.
	for i := int64(1); i <= 600; i++ {
		h := sha256.Sum256([]byte{byte(i), byte(i >> 8)})
		c, err := Sign(key, i*1000, h[:], time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := AppendHead(path, c); err != nil {
			t.Fatal(err)
		}
		last = c
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() <= headTail {
		t.Fatalf("head file: %v, %v", st, err)
	}
	got, err := ReadHead(path)
	if err != nil || got == nil || !got.Same(last) {
		t.Fatalf("ReadHead = %+v, %v; want %+v", got, err, last)
	}
	// A line cut short by a crash is skipped.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"seq":999999999,"hash":"ab`)
	f.Close()
	if got, err := ReadHead(path); err != nil || got == nil || !got.Same(last) {
		t.Fatalf("after a torn line: %+v, %v", got, err)
	}
	// An empty file has no head.
	empty := filepath.Join(t.TempDir(), "head.log")
	os.WriteFile(empty, nil, 0o600)
	if got, err := ReadHead(empty); err != nil || got != nil {
		t.Fatalf("empty file: %+v, %v", got, err)
	}
}

func TestKeyFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyPath, pubPath := filepath.Join(dir, "audit", "audit.key"), filepath.Join(dir, "audit", "audit.pub")
	k1, created, err := LoadOrCreateKey(keyPath, pubPath)
	if err != nil || !created {
		t.Fatalf("first start: %v, created %v", err, created)
	}
	if st, err := os.Stat(keyPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", st, err)
	}
	k1again, created, err := LoadOrCreateKey(keyPath, pubPath)
	if err != nil || created || !k1.Equal(k1again) {
		t.Fatalf("second start: %v, created %v", err, created)
	}
	// A lost key is replaced; the old public key stays trusted, so older
	// checkpoints still verify.
	os.Remove(keyPath)
	k2, created, err := LoadOrCreateKey(keyPath, pubPath)
	if err != nil || !created {
		t.Fatalf("after losing the key: %v, created %v", err, created)
	}
	pubs, err := LoadPublicKeys(pubPath)
	if err != nil || len(pubs) != 2 || !pubs[0].Equal(k1.Public()) || !pubs[1].Equal(k2.Public()) {
		t.Fatalf("public keys = %d, %v", len(pubs), err)
	}
	raw, _ := os.ReadFile(pubPath)
	if !strings.Contains(string(raw), "Key-Id: "+KeyID(k2.Public().(ed25519.PublicKey))) {
		t.Errorf("public key file lacks the key id:\n%s", raw)
	}
	if _, err := LoadPublicKeys(filepath.Join(dir, "nothing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing public key file: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "junk.pub"), []byte("not a key"), 0o644)
	if _, err := LoadPublicKeys(filepath.Join(dir, "junk.pub")); err == nil {
		t.Error("junk accepted as a public key file")
	}
}

// Check without a database: rows in memory, tampered as in the store tests.
func TestCheckInMemory(t *testing.T) {
	t.Parallel()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	rows := chainOf(t, 30)
	sign := func(seq int64) Checkpoint {
		c, err := Sign(key, seq, rows[seq-1].Hash, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cps := []Checkpoint{sign(10), sign(20)}
	head := sign(30)
	run := func(rows []Row, cps []Checkpoint, head *Checkpoint) *Report {
		c := NewCheck([]ed25519.PublicKey{pub}, cps, head, "head.log")
		for _, r := range rows {
			c.Row(r)
		}
		return c.Finish()
	}
	if r := run(rows, append(cps, head), &head); !r.OK() || r.Entries != 30 || r.NewestCheckpoint != 30 || len(r.Warnings) != 0 {
		t.Fatalf("intact: %+v", r)
	}
	// The head file has seq 30; the database lost that checkpoint and the
	// rows after 25.
	r := run(rows[:25], cps, &head)
	if len(r.Problems) != 2 || r.Problems[0].Kind != ProblemCheckpointsDeleted || r.Problems[1].Message != "checkpoint at seq 30; the log ends at 25 < 30" {
		t.Fatalf("truncated: %+v", r.Problems)
	}
	// Without a public key, checkpoints are no evidence, and say so.
	c := NewCheck(nil, cps, nil, "")
	for _, row := range rows {
		c.Row(row)
	}
	if r := c.Finish(); r.OK() || r.Problems[0].Kind != ProblemNoPublicKey {
		t.Fatalf("no public key: %+v", r.Problems)
	}
	// No checkpoints at all: fine, with a warning.
	if r := run(rows, nil, nil); !r.OK() || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "no signed checkpoints") {
		t.Fatalf("no checkpoints: %+v", r)
	}
}

func chainOf(t *testing.T, n int) []Row {
	t.Helper()
	var rows []Row
	prev := Genesis
	at := time.Now()
	for i := int64(1); i <= int64(n); i++ {
		p, err := Prepare(at, Entry{Kind: "k", Actor: "a", Conversation: "c", Data: map[string]any{"i": i}})
		if err != nil {
			t.Fatal(err)
		}
		h := Chain(prev, p.Canonical(i))
		rows = append(rows, Row{Seq: i, At: p.At, Entry: p.Entry, DataJSON: p.DataJSON, PrevHash: prev, Hash: h})
		prev = h
	}
	return rows
}

// The head file is read back after a crash may have cut a line short; no
// line may crash the parser or yield a checkpoint without a seq.
func FuzzParseHeadLine(f *testing.F) {
	f.Add([]byte(`{"seq":1000,"hash":"00","at":"2030-01-01T00:00:00.000000Z","key_id":"sha256:00","signature":"AA=="}`))
	f.Add([]byte(`{"seq":-1}`))
	f.Add([]byte(`{"seq":1,"hash":"zz"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, ok := parseHeadLine(b)
		if ok && c.Seq < 1 {
			t.Fatalf("parsed seq %d", c.Seq)
		}
	})
}
