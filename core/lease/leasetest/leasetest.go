// Package leasetest helps adapters test their work under a lease: a lease
// store the test can cut this process off from, as a partition or a
// database that stops answering would.
//
// It must never be imported outside tests.
package leasetest

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
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
