package discord

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
)

// The gateway under a lease (issue 25). Discord accepts a second IDENTIFY
// with the same token and shard, and then dispatches every event to both
// sessions: two `silas serve` on one database would each deliver every
// message (the core's intake drops the duplicate, but both would race to
// move the catch-up cursors). So with a LeaseStore only the holder of the
// lease "discord/<channel>" (one shard: Silas never shards) connects, runs
// the worker and the catch-up, and every durable write of the gateway —
// the conversations' catch-up cursors and the session id — carries the
// lease's epoch and is refused once a newer holder exists (core.ErrFenced).
//
// Taking over: the new holder reloads the cursors its predecessor stored,
// IDENTIFYs (discordgo keeps a session's id and sequence in unexported
// fields, so a process cannot RESUME another's session) and, on READY,
// catches up each conversation over REST from those cursors: what was sent
// while nobody held the lease is delivered once and in order.
//
// Losing the lease (renewal refused, no renewal within the TTL, or a
// fenced write refused) ends the holding: the worker stops, and the
// session is closed with 4000, not 1000/1001 — a normal close is how a
// client ends a session, which is for a shutdown only (the lease is then
// released, so the successor need not wait for its expiry). Nothing that
// would end or confuse the successor's session is sent: the old holder's
// socket is simply gone, and what it had queued but not delivered is
// dropped (the successor's catch-up fetches it again).
//
// Interactions in http mode arrive at whichever instance the load balancer
// picks and need no lease.

// leaseName is the gateway lease of this channel.
func (a *Adapter) leaseName() string { return "discord/" + string(a.cfg.Name) }

// holding is what the current holding of the lease needs besides its
// context: the cancel that ends it when a write was fenced.
type holding struct {
	mu   sync.Mutex
	stop context.CancelCauseFunc
}

func (h *holding) set(stop context.CancelCauseFunc) {
	h.mu.Lock()
	h.stop = stop
	h.mu.Unlock()
}

// fenced ends the holding after a write was refused for a newer epoch.
func (h *holding) fenced(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop != nil {
		h.stop(err)
	}
}

// runLeased runs the gateway (worker and session) while holding the lease,
// until ctx ends; without a LeaseStore it runs it as before.
func (a *Adapter) runLeased(ctx context.Context, in core.Inbox) {
	var st lease.Store
	if a.cfg.Leases != nil {
		st = a.cfg.Leases
	}
	cfg := lease.Config{Name: a.leaseName(), Holder: a.instance, TTL: a.cfg.LeaseTTL, Logger: a.log}
	err := lease.Hold(ctx, st, cfg, func(lctx context.Context, held *lease.Held) {
		if held != nil {
			a.takeOver(lctx, held)
		}
		hctx, stop := context.WithCancelCause(lctx)
		defer stop(nil)
		a.hold.set(stop)
		defer a.hold.set(nil)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.worker(hctx, in)
		}()
		a.runGateway(hctx, ctx)
		stop(nil)
		wg.Wait()
	})
	if err != nil {
		a.log.Error("discord: cannot hold the gateway lease", slog.Any("err", err))
	}
}

// takeOver starts a holding: what an earlier holding of this process left
// queued is dropped (its catch-up cursors may have moved on meanwhile, and
// handling it before the catch-up could move a cursor past messages not
// yet delivered), the cursors are read as the previous holder stored them,
// and the writes carry the new epoch.
func (a *Adapter) takeOver(ctx context.Context, held *lease.Held) {
	for drained := false; !drained; {
		select {
		case <-a.queue:
		default:
			drained = true
		}
	}
	a.convs.fence.Store(&fence{st: a.cfg.Leases, name: a.leaseName(), epoch: held.Epoch()})
	if err := a.convs.load(ctx); err != nil {
		a.log.Warn("discord: could not reload the conversation records; catching up from the ones in memory", slog.Any("err", err))
	}
	a.log.Info("discord: connecting under the gateway lease", slog.String("lease", a.leaseName()), slog.Int64("epoch", held.Epoch()))
}

// stateWriteFailed handles a failed durable write of the gateway: when a
// newer holder of the lease exists, this holding ends.
func (a *Adapter) stateWriteFailed(log *slog.Logger, what string, err error) {
	if errors.Is(err, core.ErrFenced) {
		log.Warn("discord: another instance holds the gateway now; this one disconnects", slog.String("write", what), slog.Any("err", err))
		a.hold.fenced(err)
		return
	}
	log.Warn("discord: could not store the "+what, slog.Any("err", err))
}

// instanceOf is the holder name of this adapter.
func instanceOf(cfg Config) string { return cmp.Or(cfg.Instance, core.NewID()) }
