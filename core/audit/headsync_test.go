package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SyncHead: with several instances one signs and every other copies the
// newest checkpoint into its own head file — only a genuine one, of this
// log, once; and a database that lost checkpoints or entries is reported,
// never copied over.
//
// Checked to fail: with the signature check removed the forged case is
// copied; without the row check the other-database case is; without the
// file read a shared file gets each line twice.
func TestSyncHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	rotatedPub, rotated, _ := ed25519.GenerateKey(rand.Reader)
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	st := &fakeCheckpointStore{rows: chainOf(t, 40)}
	newCP := func(head string) *Checkpointer {
		cp, err := NewCheckpointer(ctx, st, CheckpointOptions{Key: key, HeadFile: head, Trusted: []ed25519.PublicKey{rotatedPub}, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}
	signer := newCP(filepath.Join(dir, "signer", "head.log"))
	other := newCP(filepath.Join(dir, "other", "head.log"))
	lines := func(path string) int {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		return strings.Count(string(b), "\n")
	}
	headOf := func(cp *Checkpointer) int64 {
		h, err := ReadHead(cp.opt.HeadFile)
		if err != nil || h == nil {
			return 0
		}
		return h.Seq
	}
	sync := func(cp *Checkpointer, want int64) {
		t.Helper()
		c, err := cp.SyncHead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := int64(0); c != nil {
			got = c.Seq
			if got != want {
				t.Fatalf("copied seq %d, want %d", got, want)
			}
		} else if want != 0 {
			t.Fatalf("copied nothing, want seq %d", want)
		}
	}

	sync(other, 0) // no checkpoint yet: no file either
	if _, err := os.Stat(other.opt.HeadFile); !os.IsNotExist(err) {
		t.Fatalf("head file made with no checkpoint: %v", err)
	}
	st.rows = chainOf(t, 40)[:10]
	if c, err := signer.Checkpoint(ctx); err != nil || c.Seq != 10 {
		t.Fatalf("checkpoint: %v, %v", c, err)
	}
	sync(signer, 0) // its own: already in its file
	sync(other, 10)
	sync(other, 0) // once
	if h, _ := ReadHead(other.opt.HeadFile); h == nil || !h.Same(st.cps[0]) {
		t.Fatalf("copied head %+v, want %+v", h, st.cps[0])
	}
	if lines(signer.opt.HeadFile) != 1 || lines(other.opt.HeadFile) != 1 {
		t.Fatalf("lines: signer %d, other %d", lines(signer.opt.HeadFile), lines(other.opt.HeadFile))
	}

	// A checkpoint signed by a key rotated out (in audit.pub) is copied.
	st.rows = chainOf(t, 40)[:20]
	c, err := Sign(rotated, 20, st.rows[19].Hash, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st.cps = append(st.cps, c)
	sync(other, 20)

	// Someone with the database but not the audit key: a head of their
	// own is not copied.
	st.rows = chainOf(t, 40)[:30]
	forged, _ := Sign(stranger, 30, st.rows[29].Hash, time.Now())
	st.cps = append(st.cps, forged)
	sync(other, 0)
	// A genuine checkpoint of another database under the same key: the
	// log does not hold the hash it signed.
	h := sha256.Sum256([]byte("another log"))
	foreign, _ := Sign(key, 31, h[:], time.Now())
	st.cps = append(st.cps, foreign)
	sync(other, 0)
	sync(other, 0)
	if headOf(other) != 20 {
		t.Fatalf("head after refusals = %d, want 20", headOf(other))
	}
	for _, want := range []string{"not signed by a trusted audit key", "the log does not hold the entry the newest checkpoint signed"} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", want, n, logs.String())
		}
	}

	// Checkpoint rows deleted: the head file is ahead; reported, the file
	// left as it is.
	st.cps = st.cps[:1]
	sync(other, 0)
	sync(other, 0)
	if n := strings.Count(logs.String(), "checkpoint rows were deleted"); n != 1 || headOf(other) != 20 {
		t.Errorf("deleted checkpoints: logged %d times, head %d\n%s", n, headOf(other), logs.String())
	}

	// One head file shared by two instances: each checkpoint lands once.
	st.cps = nil
	st.rows = chainOf(t, 40)
	shared := filepath.Join(dir, "shared", "head.log")
	a, b := newCP(shared), newCP(shared)
	signer.Checkpoint(ctx)
	sync(a, 40)
	sync(b, 0)
	if n := lines(shared); n != 1 {
		t.Fatalf("shared head file has %d lines, want 1", n)
	}
}
