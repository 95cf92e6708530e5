// Package lease holds a named lease (core.Lease) for this process: the
// right to be the one `silas serve` on the database doing something that
// must have a single consumer (Telegram long polling, a Discord shard). A
// Holder acquires the lease, renews it at a fraction of its TTL while held,
// and reports its loss by cancelling the context it handed out; the epoch
// it exposes fences the durable writes that depend on holding it (the
// store refuses them once a newer epoch exists: core.ErrFenced).
//
// The renewal goroutine is the lease's heartbeat and lives exactly as long
// as one holding; it is not a job, and anything job-like belongs on River
// (core/background).
//
// This package must never: treat the lease as held once its own
// (monotonic) clock says the TTL may have run out without a renewal; do
// the leased work itself; run SQL (the store does, behind Store).
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/silas-gateway/silas/core"
)

// Store is the storage a Holder needs (*store.Store implements it).
type Store interface {
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (core.Lease, bool, error)
	RenewLease(ctx context.Context, l core.Lease, ttl time.Duration) (core.Lease, bool, error)
	ReleaseLease(ctx context.Context, l core.Lease) error
}

// StateStore is a Store that also writes channel state fenced by a
// lease's epoch (*store.Store): what the adapters holding a lease need.
type StateStore interface {
	Store
	// SetStateFenced writes a channel state value unless a newer epoch
	// of the lease exists (then core.ErrFenced).
	SetStateFenced(ctx context.Context, ch core.ChannelName, key, value, lease string, epoch int64) error
}

// ErrLost is the cause of a held context's cancellation when the lease was
// lost: a renewal found it expired or taken, or this process's clock ran
// past the TTL without a successful renewal (a pause, a partition).
var ErrLost = errors.New("lease: lost")

// DefaultTTL is a lease's lifetime without renewal. With the default
// renewal (a third of it) and retry (a fifth), a holder killed outright is
// replaced within TTL + TTL/5 = 7.2 s, inside issue 25's 10 s.
const DefaultTTL = 6 * time.Second

// Config configures a Holder.
type Config struct {
	// Name is the lease's name ("telegram", "discord/0").
	Name string
	// Holder is this process's instance id, unique per process start.
	Holder string
	// TTL is how long the lease lasts without renewal (the Store's
	// LeaseTiming when it is Timed, else DefaultTTL).
	TTL time.Duration
	// RenewEvery is how often a held lease is renewed (TTL/3): two
	// renewals may fail before it is lost.
	RenewEvery time.Duration
	// RetryEvery is how often Acquire tries while another process holds
	// the lease (TTL/5).
	RetryEvery time.Duration
	Logger     *slog.Logger
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.RenewEvery <= 0 {
		c.RenewEvery = c.TTL / 3
	}
	if c.RetryEvery <= 0 {
		c.RetryEvery = c.TTL / 5
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Name == "":
		return errors.New("lease: a name is needed")
	case c.Holder == "":
		return errors.New("lease: a holder (instance id) is needed")
	case c.RenewEvery >= c.TTL:
		return fmt.Errorf("lease %s: renewing every %s does not keep a %s lease", c.Name, c.RenewEvery, c.TTL)
	}
	return nil
}

// Holder acquires and holds one named lease for this process.
type Holder struct {
	st  Store
	cfg Config
	log *slog.Logger
}

// Timed is a Store that says the lease timing this process was configured
// with (*store.Store: cluster.lease_ttl, cluster.heartbeat_interval).
type Timed interface {
	LeaseTiming() (ttl, renew time.Duration)
}

// timedBy fills a zero TTL (and then a zero RenewEvery) from st's timing:
// the adapters that hold leases name no timing of their own, so the
// configured one reaches them through the store they hold leases in.
func (c Config) timedBy(st Store) Config {
	t, ok := st.(Timed)
	if !ok || c.TTL > 0 {
		return c
	}
	c.TTL, c.RenewEvery = t.LeaseTiming()
	if c.TTL <= 0 {
		c.RenewEvery = 0 // a renewal without its TTL is not kept alone
	}
	return c
}

// New returns a Holder of cfg.Name for cfg.Holder.
func New(st Store, cfg Config) (*Holder, error) {
	cfg = cfg.timedBy(st).WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Holder{st: st, cfg: cfg, log: cfg.Logger.With(slog.String("lease", cfg.Name))}, nil
}

// Acquire blocks until this process holds the lease (trying every
// RetryEvery while another does) or ctx ends. The lease is then renewed
// until Release or its loss; Held.Context is cancelled either way, and
// with ctx.
func (h *Holder) Acquire(ctx context.Context) (*Held, error) {
	for {
		start := time.Now()
		l, ok, err := h.st.AcquireLease(ctx, h.cfg.Name, h.cfg.Holder, h.cfg.TTL)
		if err != nil && ctx.Err() == nil {
			h.log.Warn("lease: cannot acquire", slog.Any("err", err))
		}
		if err == nil && ok {
			if counted(l, h.cfg.Holder) {
				h.log.Warn("lease taken over: its previous holder did not release it", slog.Int64("epoch", l.Epoch),
					slog.String("previous", l.Previous))
			} else {
				h.log.Info("lease acquired", slog.Int64("epoch", l.Epoch))
			}
			return h.hold(ctx, l, start), nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lease %s: %w", h.cfg.Name, context.Cause(ctx))
		case <-time.After(h.cfg.RetryEvery):
		}
	}
}

// Held is one holding of the lease.
type Held struct {
	h      *Holder
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once

	mu    sync.Mutex
	lease core.Lease
}

func (h *Holder) hold(parent context.Context, l core.Lease, start time.Time) *Held {
	ctx, cancel := context.WithCancelCause(parent)
	g := &Held{h: h, ctx: ctx, cancel: cancel, stop: make(chan struct{}), done: make(chan struct{}), lease: l}
	go g.renew(start.Add(h.cfg.TTL))
	return g
}

// Context is cancelled when the lease is lost (cause ErrLost), released,
// or the context given to Acquire ends. Work that needs the lease runs
// under it.
func (g *Held) Context() context.Context { return g.ctx }

// Lease is the lease as last acquired or renewed.
func (g *Held) Lease() core.Lease {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lease
}

// Epoch is the fencing epoch every durable write that depends on holding
// the lease carries.
func (g *Held) Epoch() int64 { return g.Lease().Epoch }

// renew keeps the lease until stop, its loss, or the parent's end.
// deadline is when the lease may have expired by this process's monotonic
// clock: the start of the last successful acquire or renew plus the TTL
// (the database's expiry is measured from later, so this errs early).
func (g *Held) renew(deadline time.Time) {
	defer close(g.done)
	cfg := g.h.cfg
	next := cfg.RenewEvery
	for {
		t := time.NewTimer(min(next, time.Until(deadline)))
		select {
		case <-g.stop:
			t.Stop()
			return
		case <-g.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if !time.Now().Before(deadline) {
			g.lose("no renewal within the TTL")
			return
		}
		start := time.Now()
		rctx, cancel := context.WithDeadline(g.ctx, deadline)
		l, ok, err := g.h.st.RenewLease(rctx, g.Lease(), cfg.TTL)
		cancel()
		switch {
		case err != nil:
			// Retry sooner: the lease is still ours until the deadline.
			if g.ctx.Err() == nil {
				g.h.log.Warn("lease: renewal failed, retrying", slog.Any("err", err))
			}
			next = cfg.RenewEvery / 3
		case !ok:
			g.lose("expired or taken over")
			return
		default:
			g.mu.Lock()
			g.lease = l
			g.mu.Unlock()
			deadline, next = start.Add(cfg.TTL), cfg.RenewEvery
		}
	}
}

func (g *Held) lose(why string) {
	g.h.log.Warn("lease lost", slog.Int64("epoch", g.Epoch()), slog.String("why", why))
	g.cancel(ErrLost)
}

// Release stops renewing and, if the lease is still held, ends it in the
// database so another process need not wait for its expiry. It cancels
// Context; calling it again does nothing.
func (g *Held) Release(ctx context.Context) {
	g.once.Do(func() {
		close(g.stop)
		<-g.done
		lost := context.Cause(g.ctx) == ErrLost
		g.cancel(context.Canceled)
		if lost {
			return
		}
		if err := g.h.st.ReleaseLease(ctx, g.Lease()); err != nil {
			g.h.log.Warn("lease: release failed; it expires instead", slog.Any("err", err))
			return
		}
		g.h.log.Info("lease released", slog.Int64("epoch", g.Epoch()))
	})
}

// Run holds the lease whenever it can and runs work while it does, until
// ctx ends (then it returns nil). work gets the held context; when the
// lease is lost, work should return, and Run acquires it again. An error
// from work while the lease is still held ends Run with it.
func (h *Holder) Run(ctx context.Context, work func(ctx context.Context, held *Held) error) error {
	for {
		g, err := h.Acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		werr := work(g.Context(), g)
		lost := context.Cause(g.Context()) == ErrLost
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		g.Release(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case lost:
			continue
		case werr != nil:
			return fmt.Errorf("lease %s: %w", h.cfg.Name, werr)
		}
	}
}

// Hold runs work under the lease cfg.Name whenever this process holds it,
// until ctx ends (Run; work should return once its context ends). Without
// a store it runs work once, directly, with a nil Held: one instance and
// no leases, as before issue 25. It returns when ctx ends, or at once when
// cfg is unusable (the error).
func Hold(ctx context.Context, st Store, cfg Config, work func(ctx context.Context, held *Held)) error {
	if st == nil {
		work(ctx, nil)
		return nil
	}
	h, err := New(st, cfg)
	if err != nil {
		return err
	}
	return h.Run(ctx, func(ctx context.Context, held *Held) error {
		work(ctx, held)
		return nil
	})
}
