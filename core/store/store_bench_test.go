package store

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/silas-gateway/silas/core/audit"
)

// BenchmarkDoInsertTurn measures group-commit throughput: concurrent callers
// each store a turn and append one audit entry through Do, on real
// PostgreSQL. ops/s is the figure to compare; ops/tx is the mean batch size
// the writer achieved. (The pgtest throwaway cluster runs with fsync off, so
// a real server's commits are slower and batches correspondingly larger.)
func BenchmarkDoInsertTurn(b *testing.B) {
	for _, perProc := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", perProc*runtime.GOMAXPROCS(0)), func(b *testing.B) {
			s, ctx := setup(b)
			var next atomic.Int64
			b.SetParallelism(perProc)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ev := fmt.Sprintf("ev%d", next.Add(1))
					err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
						seq, dup, err := tx.InsertTurn(ctx, testTurn("bench", ev))
						if err != nil || dup {
							return nil, err
						}
						return []audit.Entry{{Kind: "turn.received", Actor: "bench:user1", Conversation: "bench:chat1",
							Data: map[string]any{"seq": seq, "event": ev}}}, nil
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			if txs := queryInt(b, ctx, s, `SELECT count(DISTINCT at) FROM audit_log`); txs > 0 {
				b.ReportMetric(float64(b.N)/float64(txs), "ops/tx")
			}
			if n := queryInt(b, ctx, s, `SELECT count(*) FROM turns`); n != int64(b.N) {
				b.Fatalf("%d turns stored, want %d", n, b.N)
			}
		})
	}
}
