package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// BenchmarkTapTransaction is the start of a tap's transaction, one
// transaction after another: its turn stored inline and its card's
// request and route read (GetApprovalRoute), then COMMIT. read=with-insert
// is a tap (the read travels with the insert: two round trips with the
// commit); read=apart is the same with the read in a round trip of its
// own (three), as every tap was before. It reports the round trips, this
// process's CPU (getrusage) and the PostgreSQL server's (its processes'
// /proc times, when the cluster is local as under pgtestrun) per
// transaction. Run the two alternately, several times:
//
//	go run ./internal/pgtest/pgtestrun go test -run XXX -bench TapTransaction -benchtime 3000x -count 4 ./core/store
func BenchmarkTapTransaction(b *testing.B) {
	rt := &roundTrips{}
	s, ctx, _ := setupDSN(b, Options{QueryTracer: rt})
	mustDo(b, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		tx.QueueApproval(testApproval("ap1", tx.Now()))
		return nil, tx.QueueApprovalRoutes([]core.ApprovalRoute{
			{Approval: "ap1", Channel: "webchat", Conversation: "webchat:local", MessageKey: "ap1", Kind: core.RouteStatus}})
	})
	server := serverCPU(b, ctx, s)
	k := 0
	for _, tap := range []bool{true, false} {
		name := "read=with-insert"
		if !tap {
			name = "read=apart"
		}
		b.Run(name, func(b *testing.B) {
			trips, cpu, pg := rt.count(), selfCPU(), server()
			for range b.N {
				k++
				ev := fmt.Sprintf("bench-%d", k)
				turn := testTurn("webchat", ev)
				if tap {
					turn = tapTurn(ev, "webchat:local", "ap1")
				}
				turn.Text = ""
				err := s.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
					if _, _, err := tx.InsertInlineTurn(ctx, turn); err != nil {
						return nil, err
					}
					_, _, _, err := tx.GetApprovalRoute(ctx, "ap1", "webchat:local")
					return nil, err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rt.count()-trips)/float64(b.N), "round-trips/op")
			b.ReportMetric(float64(selfCPU()-cpu)/1e3/float64(b.N), "cpu-µs/op")
			if pg >= 0 {
				b.ReportMetric(float64(server()-pg)/1e3/float64(b.N), "pg-cpu-µs/op")
			}
		})
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU returns a reading of the CPU time of s's PostgreSQL server
// (the postmaster and its children), or of -1 when its data directory is
// not on this machine.
func serverCPU(b *testing.B, ctx context.Context, s *Store) func() time.Duration {
	var dir string
	if err := s.Pool().QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		b.Fatal(err)
	}
	pid, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return func() time.Duration { return -1 }
	}
	pm := strings.TrimSpace(strings.SplitN(string(pid), "\n", 2)[0])
	return func() time.Duration {
		ents, _ := os.ReadDir("/proc")
		var ticks int64
		for _, e := range ents {
			st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			s := string(st)
			f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // f[1]: the parent
			if e.Name() != pm && f[1] != pm {
				continue
			}
			u, _ := strconv.ParseInt(f[11], 10, 64)
			k, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + k
		}
		return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ 100
	}
}
