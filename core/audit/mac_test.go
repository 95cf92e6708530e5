package audit

import (
	"bytes"
	"context"
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

// macChain is chainOf with every row from k.FromSeq on MAC'd, as the
// writer stores it.
func macChain(t *testing.T, n int, k *EntryKey) []Row {
	t.Helper()
	rows := chainOf(t, n)
	for i := range rows {
		if k.Covers(rows[i].Seq) {
			rows[i].MAC = k.MAC(rows[i].Hash)
		}
	}
	return rows
}

func newEntryKey(t *testing.T, from int64) *EntryKey {
	t.Helper()
	k := &EntryKey{Key: make([]byte, 32), FromSeq: from}
	if _, err := rand.Read(k.Key); err != nil {
		t.Fatal(err)
	}
	return k
}

// A row that chains but carries no MAC, or one that does not verify, or
// one under another key, is named as not written by this gateway; rows
// before the key's FromSeq are not asked for one.
//
// Checked to fail: with EntryMACProblem always ok, every case but "intact"
// reports nothing.
func TestCheckNamesEntriesWithoutValidMAC(t *testing.T) {
	t.Parallel()
	k := newEntryKey(t, 4)
	other := newEntryKey(t, 1)
	cases := []struct {
		name   string
		change func(rows []Row)
		want   []int64 // seqs named
	}{
		{"intact", func([]Row) {}, nil},
		{"no MAC", func(rows []Row) { rows[6].MAC = nil }, []int64{7}},
		{"a MAC bit flipped", func(rows []Row) { rows[4].MAC = bytes.Clone(rows[4].MAC); rows[4].MAC[0] ^= 1 }, []int64{5}},
		{"another row's MAC", func(rows []Row) { rows[8].MAC = rows[7].MAC }, []int64{9}},
		{"another key's MAC", func(rows []Row) { rows[9].MAC = other.MAC(rows[9].Hash) }, []int64{10}},
		{"a short MAC", func(rows []Row) { rows[3].MAC = rows[3].MAC[:16] }, []int64{4}},
		{"rows before FromSeq need none", func(rows []Row) { rows[0].MAC, rows[2].MAC = nil, []byte("junk") }, nil},
		{"many", func(rows []Row) {
			for i := 3; i < len(rows); i++ {
				rows[i].MAC = nil
			}
		}, []int64{4, 5, 6, 7, 8, 9, 10, 11, 12, 13}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows := macChain(t, 20, k)
			tc.change(rows)
			c := NewCheck(nil, nil, nil, "").WithEntryKey(k)
			for _, r := range rows {
				c.Row(r)
			}
			rep := c.Finish()
			var got []int64
			for _, p := range rep.Problems {
				if p.Kind != ProblemForgedEntry {
					t.Errorf("problem %+v", p)
				}
				if p.Seq != 0 {
					got = append(got, p.Seq)
					if !strings.Contains(p.Message, "was not written by this gateway") {
						t.Errorf("message %q", p.Message)
					}
				}
			}
			if !slicesEqual(got, tc.want) || rep.OK() != (tc.want == nil) {
				t.Fatalf("named %v, want %v; report %+v", got, tc.want, rep)
			}
			if tc.name == "many" && !strings.Contains(rep.Problems[len(rep.Problems)-1].Message, "7 more entries") {
				t.Fatalf("the rest not counted: %+v", rep.Problems)
			}
		})
	}
	// Without the key nothing is asked of the MACs.
	rows := macChain(t, 5, k)
	rows[4].MAC = nil
	c := NewCheck(nil, nil, nil, "")
	for _, r := range rows {
		c.Row(r)
	}
	if rep := c.Finish(); !rep.OK() {
		t.Fatalf("without the key: %+v", rep)
	}
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEntryKeyFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit", "entry.key")
	if _, err := LoadEntryKey(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	k, created, err := LoadOrCreateEntryKey(path, 41)
	if err != nil || !created || k.FromSeq != 42 || len(k.Key) != 32 {
		t.Fatalf("create = %+v, %v, %v", k, created, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v, %v", st, err)
	}
	// Later heads do not move FromSeq: the file is made once.
	k2, created, err := LoadOrCreateEntryKey(path, 1000)
	if err != nil || created || k2.FromSeq != 42 || !bytes.Equal(k2.Key, k.Key) {
		t.Fatalf("load = %+v, %v, %v", k2, created, err)
	}
	for _, bad := range []string{"", "garbage", "-----BEGIN SILAS AUDIT ENTRY KEY-----\nFrom-Seq: 0\n\nAAAA\n-----END SILAS AUDIT ENTRY KEY-----\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadEntryKey(path); err == nil || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// FailClosed: with a public key, no head file, an empty one, or a long
// log with no checkpoint is a problem.
func TestReportFailClosed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		head      HeadState
		lastSeq   int64
		cps       int
		wantKinds []string
	}{
		{"all there", HeadPresent, 5000, 5, nil},
		{"head file missing", HeadMissing, 10, 1, []string{ProblemNoHeadFile}},
		{"head file empty", HeadEmpty, 10, 1, []string{ProblemEmptyHead}},
		{"past the threshold, no checkpoint", HeadMissing, 1001, 0, []string{ProblemNoHeadFile, ProblemNoCheckpoints}},
		{"below the threshold, no checkpoint yet", HeadPresent, 1000, 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{LastSeq: tc.lastSeq, Checkpoints: tc.cps}
			r.FailClosed(tc.head, "head.log", 1000)
			var kinds []string
			for _, p := range r.Problems {
				kinds = append(kinds, p.Kind)
			}
			if strings.Join(kinds, ",") != strings.Join(tc.wantKinds, ",") {
				t.Fatalf("problems %+v, want %v", r.Problems, tc.wantKinds)
			}
		})
	}
}

// fakeCheckpointStore is a log in memory for the Checkpointer.
type fakeCheckpointStore struct {
	rows []Row
	cps  []Checkpoint
}

func (f *fakeCheckpointStore) AuditHead(context.Context) (int64, []byte, error) {
	if len(f.rows) == 0 {
		return 0, nil, nil
	}
	r := f.rows[len(f.rows)-1]
	return r.Seq, r.Hash, nil
}

func (f *fakeCheckpointStore) LatestCheckpoint(context.Context) (int64, time.Time, bool, error) {
	if len(f.cps) == 0 {
		return 0, time.Time{}, false, nil
	}
	c := f.cps[len(f.cps)-1]
	return c.Seq, c.At, true, nil
}

func (f *fakeCheckpointStore) NewestCheckpoint(context.Context) (Checkpoint, []byte, bool, error) {
	if len(f.cps) == 0 {
		return Checkpoint{}, nil, false, nil
	}
	c := f.cps[len(f.cps)-1]
	for _, r := range f.rows {
		if r.Seq == c.Seq {
			return c, r.Hash, true, nil
		}
	}
	return c, nil, true, nil
}

func (f *fakeCheckpointStore) InsertCheckpoint(_ context.Context, c Checkpoint) error {
	f.cps = append(f.cps, c)
	return nil
}

func (f *fakeCheckpointStore) AuditRows(_ context.Context, from, upto int64, fn func(Row) error) error {
	for _, r := range f.rows {
		if r.Seq >= from && r.Seq <= upto {
			if err := fn(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// The checkpointer checks what it is about to cover and signs nothing over
// a row that is not the gateway's, or a range that does not chain.
//
// Checked to fail: with the checkRange call removed, every refusal case
// signs.
func TestCheckpointerRefusesUnMACdRows(t *testing.T) {
	t.Parallel()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	k := newEntryKey(t, 3)
	cases := []struct {
		name    string
		change  func(rows []Row) []Row
		refused int64 // 0: signed
	}{
		{"intact", func(r []Row) []Row { return r }, 0},
		{"no MAC", func(r []Row) []Row { r[13].MAC = nil; return r }, 14},
		{"bad MAC", func(r []Row) []Row { r[19].MAC = k.MAC(r[18].Hash); return r }, 20},
		{"row edited, MAC kept", func(r []Row) []Row { r[15].DataJSON = []byte(`{"i":99}`); return r }, 16},
		{"row missing", func(r []Row) []Row { return append(r[:16:16], r[17:]...) }, 17},
		{"before FromSeq, no MAC needed", func(r []Row) []Row { r[1].MAC = nil; return r }, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows := macChain(t, 20, k)
			st := &fakeCheckpointStore{rows: tc.change(rows)}
			cp, err := NewCheckpointer(context.Background(), st, CheckpointOptions{Key: key, EntryKey: k})
			if err != nil {
				t.Fatal(err)
			}
			c, err := cp.Checkpoint(context.Background())
			var ue *UnsignedError
			switch {
			case tc.refused == 0 && (err != nil || c == nil || c.Seq != 20):
				t.Fatalf("intact range: %v, %v", c, err)
			case tc.refused != 0 && (c != nil || !errors.As(err, &ue) || ue.Problem.Seq != tc.refused || len(st.cps) != 0):
				t.Fatalf("checkpoint = %v, %v; want refused at %d", c, err, tc.refused)
			}
		})
	}
	// A second checkpoint checks only what the first did not cover: the
	// row at the first one anchors the chain.
	rows := macChain(t, 30, k)
	st := &fakeCheckpointStore{rows: rows[:10]}
	cp, err := NewCheckpointer(context.Background(), st, CheckpointOptions{Key: key, EntryKey: k})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := cp.Checkpoint(context.Background()); err != nil || c.Seq != 10 {
		t.Fatalf("first: %v, %v", c, err)
	}
	st.rows = rows
	st.rows[24].MAC = nil
	if c, err := cp.Checkpoint(context.Background()); c != nil || err == nil || !strings.Contains(err.Error(), "entry 25 was not written by this gateway") {
		t.Fatalf("second: %v, %v", c, err)
	}
}

// The writer MACs every row it appends: what that adds per entry.
func BenchmarkEntryMAC(b *testing.B) {
	k := &EntryKey{Key: make([]byte, 32), FromSeq: 1}
	m := k.NewMACer()
	h := sha256.Sum256([]byte("row"))
	b.ReportAllocs()
	for b.Loop() {
		m.MAC(h[:])
	}
}

// FirstAtOnce (serve): with no checkpoint stored, the first entry is
// signed at the next look, so the head file exists from then on.
func TestCheckpointerFirstAtOnce(t *testing.T) {
	t.Parallel()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	for _, first := range []bool{false, true} {
		st := &fakeCheckpointStore{rows: chainOf(t, 1)}
		cp, err := NewCheckpointer(context.Background(), st, CheckpointOptions{Key: key, FirstAtOnce: first})
		if err != nil {
			t.Fatal(err)
		}
		c, err := cp.RunOnce(context.Background())
		if err != nil || (c != nil) != first {
			t.Fatalf("FirstAtOnce %v: checkpoint %v, %v", first, c, err)
		}
		st.rows = chainOf(t, 2)
		if c, err := cp.RunOnce(context.Background()); err != nil || c != nil {
			t.Fatalf("FirstAtOnce %v, a second entry: checkpoint %v, %v; want none yet", first, c, err)
		}
	}
}
