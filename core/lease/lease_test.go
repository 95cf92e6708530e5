package lease

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var _ Store = (*store.Store)(nil)

func setup(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.Context(), storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// pausable is a Store whose renewals can be frozen, as when the process is
// stopped (SIGSTOP, a paused VM) in the middle of renewing.
type pausable struct {
	Store
	mu     sync.Mutex
	paused chan struct{} // non-nil: renewals wait for it to close
}

func (p *pausable) RenewLease(ctx context.Context, l core.Lease, ttl time.Duration) (core.Lease, bool, error) {
	p.mu.Lock()
	ch := p.paused
	p.mu.Unlock()
	if ch != nil {
		<-ch // stopped: not even the context's deadline is noticed
	}
	return p.Store.RenewLease(ctx, l, ttl)
}

func (p *pausable) pause() {
	p.mu.Lock()
	p.paused = make(chan struct{})
	p.mu.Unlock()
}

func (p *pausable) resume() {
	p.mu.Lock()
	close(p.paused)
	p.paused = nil
	p.mu.Unlock()
}

func holder(t *testing.T, st Store, id string, ttl time.Duration) *Holder {
	t.Helper()
	h, err := New(st, Config{Name: "telegram", Holder: id, TTL: ttl, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Two holders contend: one holds, the other waits; after the release the
// other holds it under a newer epoch. Renewals keep it well past its TTL.
func TestTwoHoldersContend(t *testing.T) {
	t.Parallel()
	st := setup(t)
	const ttl = 2 * time.Second
	a, b := holder(t, st, "A", ttl), holder(t, st, "B", ttl)
	ga, err := a.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Held, 1)
	go func() {
		g, err := b.Acquire(t.Context())
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	// Two TTLs pass: A keeps renewing, B keeps waiting.
	time.Sleep(2 * ttl)
	select {
	case g := <-got:
		t.Fatalf("B acquired while A holds: %+v", g.Lease())
	default:
	}
	if ga.Context().Err() != nil {
		t.Fatalf("A lost a renewed lease: %v", context.Cause(ga.Context()))
	}
	ga.Release(t.Context())
	if !errors.Is(ga.Context().Err(), context.Canceled) {
		t.Fatal("A's context not cancelled by the release")
	}
	gb := <-got
	if gb.Epoch() != ga.Epoch()+1 {
		t.Fatalf("B's epoch %d after A's %d", gb.Epoch(), ga.Epoch())
	}
	gb.Release(t.Context())
}

// A holder stopped past its TTL (SIGSTOP): the other takes over with a
// higher epoch; when the stopped one wakes, its fenced write is refused and
// its context reports the loss.
func TestStoppedHolderIsFencedOut(t *testing.T) {
	t.Parallel()
	st := setup(t)
	const ttl = 500 * time.Millisecond
	pa := &pausable{Store: st}
	a, b := holder(t, pa, "A", ttl), holder(t, st, "B", ttl)
	ga, err := a.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetStateFenced(t.Context(), "telegram", "offset", "1", "telegram", ga.Epoch()); err != nil {
		t.Fatalf("holder's fenced write: %v", err)
	}
	pa.pause()
	gb, err := b.Acquire(t.Context()) // returns once A's lease expired in the database
	if err != nil {
		t.Fatal(err)
	}
	if gb.Epoch() <= ga.Epoch() {
		t.Fatalf("B's epoch %d, A's %d", gb.Epoch(), ga.Epoch())
	}
	// A wakes. Whatever it was about to write with its epoch is refused,
	// even before its heartbeat noticed the loss.
	if err := st.SetStateFenced(t.Context(), "telegram", "offset", "2", "telegram", ga.Epoch()); !errors.Is(err, core.ErrFenced) {
		t.Fatalf("stale holder's write: %v", err)
	}
	pa.resume()
	<-ga.Context().Done()
	if !errors.Is(context.Cause(ga.Context()), ErrLost) {
		t.Fatalf("A's context ended with %v, want ErrLost", context.Cause(ga.Context()))
	}
	ga.Release(t.Context()) // must not end B's lease
	if err := st.SetStateFenced(t.Context(), "telegram", "offset", "3", "telegram", gb.Epoch()); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}
	if gb.Context().Err() != nil {
		t.Fatal("B lost the lease when A released")
	}
	if v, _, _ := st.GetState(t.Context(), "telegram", "offset"); v != "3" {
		t.Fatalf("offset %q", v)
	}
	gb.Release(t.Context())
}

// Run runs the work only while holding; after a loss it acquires again.
func TestRunReacquiresAfterLoss(t *testing.T) {
	t.Parallel()
	st := setup(t)
	h := holder(t, st, "A", 500*time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	epochs := make(chan int64, 4)
	done := make(chan error, 1)
	go func() {
		done <- h.Run(ctx, func(wctx context.Context, g *Held) error {
			epochs <- g.Epoch()
			<-wctx.Done()
			return wctx.Err()
		})
	}()
	first := <-epochs
	// Someone takes the lease from under it (an operator, or a holder
	// after a partition): the work's context ends, Run acquires again.
	if _, err := st.Pool().Exec(t.Context(), `UPDATE leases SET holder = 'B', epoch = epoch + 1 WHERE name = 'telegram'`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(t.Context(), `UPDATE leases SET expires_at = now() WHERE name = 'telegram'`); err != nil {
		t.Fatal(err)
	}
	second := <-epochs
	if second <= first+1 {
		t.Fatalf("epochs %d then %d", first, second)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestConfigRefusesARenewalSlowerThanTheTTL(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{Holder: "A"},
		{Name: "x"},
		{Name: "x", Holder: "A", TTL: time.Second, RenewEvery: time.Second},
	} {
		if _, err := New(nil, c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

type timedStore struct {
	Store
	ttl, renew time.Duration
}

func (s timedStore) LeaseTiming() (time.Duration, time.Duration) { return s.ttl, s.renew }

// The configured timing (cluster.lease_ttl, cluster.heartbeat_interval)
// reaches a holder through its store unless the holder names its own.
func TestTimingFromStore(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name              string
		st                Store
		ttl               time.Duration
		wantTTL, wantEach time.Duration
	}{
		{"untimed store", struct{ Store }{}, 0, DefaultTTL, DefaultTTL / 3},
		{"store's timing", timedStore{ttl: 3 * time.Second, renew: 500 * time.Millisecond}, 0, 3 * time.Second, 500 * time.Millisecond},
		{"store's ttl, renewal derived", timedStore{ttl: 3 * time.Second}, 0, 3 * time.Second, time.Second},
		{"store without timing", timedStore{renew: time.Second}, 0, DefaultTTL, DefaultTTL / 3},
		{"holder's own ttl", timedStore{ttl: 3 * time.Second, renew: 500 * time.Millisecond}, 9 * time.Second, 9 * time.Second, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := New(tt.st, Config{Name: "x", Holder: "h", TTL: tt.ttl})
			if err != nil {
				t.Fatal(err)
			}
			if h.cfg.TTL != tt.wantTTL || h.cfg.RenewEvery != tt.wantEach {
				t.Fatalf("ttl %s renew %s; want %s, %s", h.cfg.TTL, h.cfg.RenewEvery, tt.wantTTL, tt.wantEach)
			}
		})
	}
}
