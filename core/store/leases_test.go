package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

// expireLease moves a lease's expiry into the past, as the database's clock
// would after its holder stopped renewing (paused, partitioned) for longer
// than its TTL.
func expireLease(t *testing.T, s *Store, name string) {
	t.Helper()
	mustExec(t, t.Context(), s, `UPDATE leases SET expires_at = now() - interval '1 second' WHERE name = $1`, name)
}

func TestLeaseContention(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	const ttl = time.Hour
	a, ok, err := s.AcquireLease(ctx, "telegram", "A", ttl)
	if err != nil || !ok || a.Epoch != 1 || a.Holder != "A" || a.Previous != "" || a.AcquiredAt.IsZero() {
		t.Fatalf("A acquires: %+v %v %v", a, ok, err)
	}
	b, ok, err := s.AcquireLease(ctx, "telegram", "B", ttl)
	if err != nil || ok || b.Holder != "A" || b.Epoch != 1 {
		t.Fatalf("B while A holds: %+v %v %v", b, ok, err)
	}
	if other, ok, _ := s.AcquireLease(ctx, "discord/0", "B", ttl); !ok || other.Epoch != 1 {
		t.Fatalf("another name is its own lease: %+v %v", other, ok)
	}
	if a2, ok, err := s.RenewLease(ctx, a, ttl); err != nil || !ok || !a2.ExpiresAt.After(time.Now()) {
		t.Fatalf("A renews: %+v %v %v", a2, ok, err)
	}
	if _, ok, _ := s.RenewLease(ctx, core.Lease{Name: "telegram", Holder: "B", Epoch: 1}, ttl); ok {
		t.Fatal("B renewed A's lease")
	}
	if err := s.SetStateFenced(ctx, "telegram", "offset", "10", "telegram", a.Epoch); err != nil {
		t.Fatalf("A's fenced write: %v", err)
	}

	// A stops renewing past its TTL (SIGSTOP): B takes over, newer epoch.
	expireLease(t, s, "telegram")
	b, ok, err = s.AcquireLease(ctx, "telegram", "B", ttl)
	if err != nil || !ok || b.Holder != "B" || b.Epoch != 2 || b.Previous != "A" {
		t.Fatalf("B after A's expiry (a takeover from A): %+v %v %v", b, ok, err)
	}
	// A wakes: its renewal fails, its fenced write is refused, and its
	// release does not end B's lease.
	if _, ok, _ := s.RenewLease(ctx, a, ttl); ok {
		t.Fatal("the stale holder renewed")
	}
	if err := s.SetStateFenced(ctx, "telegram", "offset", "11", "telegram", a.Epoch); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("stale fenced write: %v", err)
	}
	if v, _, _ := s.GetState(ctx, "telegram", "offset"); v != "10" {
		t.Fatalf("offset = %q after the refused write", v)
	}
	if err := s.ReleaseLease(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.SetStateFenced(ctx, "telegram", "offset", "12", "telegram", b.Epoch); err != nil {
		t.Fatalf("B's fenced write: %v", err)
	}
	if _, ok, _ := s.AcquireLease(ctx, "telegram", "A", ttl); ok {
		t.Fatal("A acquired while B holds")
	}

	// B releases: A acquires at once, with a newer epoch still.
	if err := s.ReleaseLease(ctx, b); err != nil {
		t.Fatal(err)
	}
	a, ok, err = s.AcquireLease(ctx, "telegram", "A", ttl)
	if err != nil || !ok || a.Epoch != 3 || a.Previous != "" {
		t.Fatalf("A after B's release (no takeover): %+v %v %v", a, ok, err)
	}
	if err := s.SetStateFenced(ctx, "telegram", "offset", "13", "telegram", b.Epoch); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("B's write after its release: %v", err)
	}
	if err := s.SetStateFenced(ctx, "nope", "offset", "1", "nope", 1); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("fenced write under a lease never held: %v", err)
	}
	ls, err := s.Leases(ctx)
	if err != nil || len(ls) != 2 || ls[1].Name != "telegram" || ls[1].Holder != "A" || ls[1].Epoch != 3 {
		t.Fatalf("leases: %+v %v", ls, err)
	}
}

// Many instances racing for a free lease: exactly one holds it, every time.
func TestLeaseOneHolderUnderRace(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	for round := range 5 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []core.Lease
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, ok, err := s.AcquireLease(ctx, "shard", fmt.Sprintf("i%d", i), time.Hour)
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					won = append(won, l)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(won) != 1 || won[0].Epoch != int64(round+1) {
			t.Fatalf("round %d: holders %+v", round, won)
		}
		expireLease(t, s, "shard")
	}
}

// A fenced write in flight holds the lease row: a takeover waits for it,
// so the write commits under the old epoch or is refused, never after the
// new holder began.
func TestLeaseFencedWriteBlocksTakeover(t *testing.T) {
	t.Parallel()
	s, ctx := setup(t)
	a, _, _ := s.AcquireLease(ctx, "telegram", "A", time.Hour)
	expireLease(t, s, "telegram")
	inWrite, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.fenced(ctx, "telegram", a.Epoch, func(pgxTx pgx.Tx) error {
			close(inWrite)
			<-release
			_, err := pgxTx.Exec(ctx, upsertState, "telegram", "offset", "20")
			return err
		})
	}()
	<-inWrite
	acquired := make(chan core.Lease, 1)
	go func() {
		l, _, err := s.AcquireLease(ctx, "telegram", "B", time.Hour)
		if err != nil {
			t.Error(err)
		}
		acquired <- l
	}()
	select {
	case l := <-acquired:
		close(release)
		<-done
		t.Fatalf("B acquired during A's fenced write: %+v", l)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("A's write: %v", err)
	}
	if l := <-acquired; l.Holder != "B" || l.Epoch != 2 {
		t.Fatalf("B after the write: %+v", l)
	}
}
