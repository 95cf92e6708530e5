package store

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/silas-gateway/silas/core/audit"
)

// With Options.EntryKeyFile the writer MACs every row it appends, from the
// head at the moment the key was made on; rows before it stay without one
// and the anchored check accepts them (the checkpoints cover them). A row
// appended around the writer is named.
//
// Checked to fail: with the writer's MAC left out (macs[i] never set),
// the rows after the key have none.
func TestWriterMACsEntries(t *testing.T) {
	t.Parallel()
	s, ctx, dsn := setupDSN(t, Options{})
	appendNumbered(t, ctx, s, 3) // before the key: no MAC
	keyFile := filepath.Join(t.TempDir(), "audit", "entry.key")
	w := openStore(t, dsn, Options{EntryKeyFile: keyFile})
	// Two stores at once (two processes): concurrent appends, one key.
	w2 := openStore(t, dsn, Options{EntryKeyFile: keyFile})
	hammer(t, ctx, []*Store{w, w2}, 4, 5)
	k, err := w.AuditEntryKey(ctx)
	if err != nil || k == nil || k.FromSeq != 4 {
		t.Fatalf("entry key = %+v, %v; want from seq 4", k, err)
	}
	k2, err := audit.LoadEntryKey(keyFile)
	if err != nil || k2.FromSeq != 4 || string(k2.Key) != string(k.Key) {
		t.Fatalf("entry key file = %+v, %v", k2, err)
	}
	var unmacd, total int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE mac IS NULL), count(*) FROM audit_log WHERE seq >= 4`).Scan(&unmacd, &total); err != nil {
		t.Fatal(err)
	}
	if unmacd != 0 || total == 0 {
		t.Fatalf("%d of %d rows after the key have no MAC", unmacd, total)
	}
	if rep, err := s.VerifyAuditAnchored(ctx, nil, nil, "", k); err != nil || !rep.OK() {
		t.Fatalf("verify = %+v, %v", rep, err)
	}

	// A row appended around the writer: chained, without a MAC.
	var seq int64
	var prev []byte
	if err := s.Pool().QueryRow(ctx, `SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1`).Scan(&seq, &prev); err != nil {
		t.Fatal(err)
	}
	seq++
	p, err := audit.Prepare(s.now(), audit.Entry{Kind: audit.KindApprovalApproved, Actor: "telegram:owner", Conversation: "telegram:1",
		Data: map[string]any{"approval": "ap_1", "command": "rm -rf /srv"}})
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, ctx, s, `INSERT INTO audit_log (seq, at, kind, actor, conversation, data, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		seq, p.At, string(p.Entry.Kind), p.Entry.Actor, p.Entry.Conversation, string(p.DataJSON), prev, audit.Chain(prev, p.Canonical(seq)))
	rep, err := s.VerifyAuditAnchored(ctx, nil, nil, "", k)
	if err != nil || rep.OK() || len(rep.Problems) != 1 || rep.Problems[0].Seq != seq ||
		!strings.Contains(rep.Problems[0].Message, fmt.Sprintf("entry %d was not written by this gateway", seq)) {
		t.Fatalf("verify after the append = %+v, %v", rep, err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	cp, err := audit.NewCheckpointer(ctx, w, audit.CheckpointOptions{Key: key, EntryKey: k})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := cp.Checkpoint(ctx); c != nil || err == nil {
		t.Fatalf("checkpoint over it = %v, %v", c, err)
	}
}

// What the entry MAC adds to an append (one Do of three entries, 16
// callers): compare the two sub-benchmarks.
func BenchmarkAuditAppend(b *testing.B) {
	for _, mac := range []bool{false, true} {
		b.Run(fmt.Sprintf("mac=%v", mac), func(b *testing.B) {
			opt := Options{}
			if mac {
				opt.EntryKeyFile = filepath.Join(b.TempDir(), "entry.key")
			}
			s, ctx, _ := setupDSN(b, opt)
			var next atomic.Int64
			b.SetParallelism(16 / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					err := s.Do(ctx, func(context.Context, *Tx) ([]audit.Entry, error) {
						return []audit.Entry{
							{Kind: "bench.a", Actor: "owner", Conversation: "webchat:c", Data: map[string]any{"i": i, "command": "ls -la"}},
							{Kind: "bench.b", Actor: "owner", Conversation: "webchat:c", Data: map[string]any{"i": i}},
							{Kind: "bench.c", Actor: "gateway", Conversation: "webchat:c", Data: map[string]any{"i": i, "ok": true}},
						}, nil
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
