// Package leasetest helps adapters test their work under a lease: a lease
// store the test can cut this process off from, as a partition or a
// database that stops answering would, and what running two instances of
// a channel in one test takes (a recording inbox, Run, Wait).
//
// It must never be imported outside tests.
package leasetest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/storetest"
)

// ErrCut is what a cut-off store answers.
var ErrCut = errors.New("leasetest: cut off from the database")

// CutOff is a lease.StateStore whose acquire and renew fail while Cut is
// set: the holder then loses its lease by its own clock (lease.ErrLost)
// while another process, not cut off, takes it over once it expires in the
// database. Fenced writes still reach the database, so a test can check
// that the cut-off holder's writes are refused after the takeover.
type CutOff struct {
	lease.StateStore
	Cut atomic.Bool
}

// AcquireLease implements lease.Store.
func (c *CutOff) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (core.Lease, bool, error) {
	if c.Cut.Load() {
		return core.Lease{}, false, ErrCut
	}
	return c.StateStore.AcquireLease(ctx, name, holder, ttl)
}

// RenewLease implements lease.Store.
func (c *CutOff) RenewLease(ctx context.Context, l core.Lease, ttl time.Duration) (core.Lease, bool, error) {
	if c.Cut.Load() {
		return l, false, ErrCut
	}
	return c.StateStore.RenewLease(ctx, l, ttl)
}

// Inbox is a core.Inbox recording the turns delivered to it (each event
// once, as the core's intake stores them).
type Inbox struct {
	mu    sync.Mutex
	turns []core.Turn
}

// Deliver implements core.Inbox.
func (in *Inbox) Deliver(_ context.Context, t core.Turn) (core.DeliverResult, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, s := range in.turns {
		if s.EventID == t.EventID {
			return core.DeliverResult{Duplicate: true}, nil
		}
	}
	in.turns = append(in.turns, t)
	return core.DeliverResult{Seq: int64(len(in.turns))}, nil
}

// Turns are the turns delivered, in order.
func (in *Inbox) Turns() []core.Turn {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]core.Turn(nil), in.turns...)
}

// Has reports whether a turn whose event id contains id was delivered.
func (in *Inbox) Has(id string) bool {
	for _, t := range in.Turns() {
		if strings.Contains(string(t.EventID), id) {
			return true
		}
	}
	return false
}

// Run runs ch until the test ends (then waits for it to return): one
// instance of the channel, as a `silas serve` would run it.
func Run(t testing.TB, ch core.Channel, in core.Inbox) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ch.Run(ctx, in) }()
	t.Cleanup(func() { cancel(); <-done })
}

// Wait polls cond until it holds, failing the test after 30 s.
func Wait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Store opens a fresh database (a throwaway one of internal/pgtest) that
// the test's instances share, closed when the test ends.
func Store(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(t.Context(), storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}
