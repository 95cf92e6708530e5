package telegram

import (
	"context"
	"log/slog"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
)

// Polling under a lease (issue 25, groundwork). Telegram allows one
// getUpdates consumer per bot: with several `silas serve` on one database,
// only the holder of the lease "telegram/<channel>" polls, and the offset
// it stores carries the lease's epoch, so a holder that was paused past
// its lease (and woke up after another took over) cannot move the offset
// back or past what the new holder handled. Losing the lease cancels the
// poll; the update being delivered is not acknowledged and the next holder
// delivers it again (a duplicate the core's intake recognises).
//
// The single-instance advisory lock still stands: today the lease changes
// nothing but the wait after a crash (a restarted instance polls once the
// crashed one's lease expired, lease.DefaultTTL at most).

// LeaseStore is what polling under a lease needs (*store.Store).
type LeaseStore interface {
	lease.Store
	// SetStateFenced writes a channel state value unless a newer epoch
	// of the lease exists (then core.ErrFenced).
	SetStateFenced(ctx context.Context, ch core.ChannelName, key, value, lease string, epoch int64) error
}

// leaseName is the polling lease of this channel.
func (a *Adapter) leaseName() string { return "telegram/" + string(a.cfg.Name) }

// pollLeased polls while holding the lease, until ctx ends; without a
// LeaseStore it polls as before.
func (a *Adapter) pollLeased(ctx context.Context, in core.Inbox) {
	cfg := lease.Config{Name: a.leaseName(), Holder: a.instance, TTL: a.cfg.LeaseTTL, Logger: a.log}
	err := lease.Hold(ctx, leaseStore(a.cfg.Leases), cfg, func(lctx context.Context, held *lease.Held) {
		if held != nil {
			a.log.Info("telegram: polling under the lease", slog.String("lease", a.leaseName()), slog.Int64("epoch", held.Epoch()))
		}
		a.poll(lctx, in, held)
	})
	if err != nil {
		a.log.Error("telegram: cannot poll under a lease", slog.Any("err", err))
	}
}

// leaseStore is ls as a lease.Store, nil when there is none (a nil
// LeaseStore must not become a non-nil interface holding nothing).
func leaseStore(ls LeaseStore) lease.Store {
	if ls == nil {
		return nil
	}
	return ls
}

// setOffsetState writes an offset key: fenced by the lease's epoch while
// polling under one.
func (a *Adapter) setOffsetState(ctx context.Context, held *lease.Held, key, v string) error {
	if held == nil {
		return a.setState(ctx, key, v)
	}
	return a.cfg.Leases.SetStateFenced(ctx, a.cfg.Name, key, v, a.leaseName(), held.Epoch())
}
