// Package cluster is this process's membership of the `silas serve`
// instances sharing one database (issue 25): a row in instances renewed on
// a heartbeat (Instance), whether others exist (Solo: the single-instance
// paths stay as cheap as before), whether this process may still act on
// its claims (Fresh: its own monotonic clock says the heartbeat did not
// lapse, as core/lease does for a lease), and the LISTEN/NOTIFY listener
// through which instances push web chat frames to each other's sockets,
// ask each other to stop runs and hand conversations over to the holder
// of a channel's connection (Listener).
//
// What a dead instance leaves (pending turns, executions, outbox lanes) is
// taken over by the rooms that own it, through compare-and-swap in
// core/store; this package only says who is alive. It must never: treat
// this process as alive once its monotonic clock ran past the TTL without
// a successful renewal; run SQL itself (the store does); schedule jobs
// (the heartbeat is the instance's liveness, anything job-like is River's).
package cluster

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTTL is how long an instance counts as alive without a heartbeat.
// With a heartbeat every TTL/3 and the takeover sweep every second, a
// killed instance's work is taken over within about TTL + 1 s + one
// heartbeat: inside issue 25's 10 s.
const DefaultTTL = 6 * time.Second

// Store is the storage an Instance needs (*store.Store).
type Store interface {
	Instance() string
	RegisterInstance(ctx context.Context, host string, pid int, ttl time.Duration) error
	Heartbeat(ctx context.Context, host string, pid int, ttl time.Duration) (others, alive int, err error)
	StopInstance(ctx context.Context) error
}

// Config configures an Instance.
type Config struct {
	// TTL is how long the row lasts without a heartbeat (DefaultTTL).
	TTL time.Duration
	// Every is the heartbeat interval (TTL/3).
	Every  time.Duration
	Logger *slog.Logger
}

// Instance is this process's row in instances and its heartbeat.
type Instance struct {
	st   Store
	cfg  Config
	host string
	pid  int

	mu     sync.Mutex
	lastOK time.Time // monotonic: the start of the last successful renewal
	others int
	alive  int    // others whose row has not expired
	gen    uint64 // increments when a renewal follows a lapse
	stale  bool   // the heartbeat lapsed since the last renewal

	solo   atomic.Bool
	onBeat atomic.Pointer[func(context.Context) error]
	stop   context.CancelFunc
	done   chan struct{}
}

// Start registers this instance (the store's SetInstance id) and renews it
// until Stop.
func Start(ctx context.Context, st Store, cfg Config) (*Instance, error) {
	if st.Instance() == "" {
		return nil, errors.New("cluster: the store has no instance id")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Every <= 0 {
		cfg.Every = cfg.TTL / 3
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	host, _ := os.Hostname()
	i := &Instance{st: st, cfg: cfg, host: host, pid: os.Getpid(), done: make(chan struct{})}
	begun := time.Now()
	if err := st.RegisterInstance(ctx, host, i.pid, cfg.TTL); err != nil {
		return nil, err
	}
	i.lastOK = begun
	if err := i.beat(ctx); err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	i.stop = cancel
	go i.run(hctx)
	return i, nil
}

// ID is this instance's id.
func (i *Instance) ID() string { return i.st.Instance() }

// TTL is how long the row lasts without a heartbeat.
func (i *Instance) TTL() time.Duration { return i.cfg.TTL }

// Solo reports that no other instance has a row: nobody else may hold
// or adopt this process's work, so per-conversation ownership needs no
// check. A new instance waits WaitSeen after registering before it takes
// any work, so every running instance has seen it by then.
func (i *Instance) Solo() bool { return i.solo.Load() }

// WaitSeen is how long a starting instance waits, when others exist, for
// every one of them to have seen its row (one heartbeat and a margin).
// It is 0 when none of them is alive: a stopped or killed instance's row
// sees nothing, and waiting on it only delays every restart (a paused one
// that resumes is fenced by Fresh, not by this wait).
func (i *Instance) WaitSeen() time.Duration {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.alive == 0 {
		return 0
	}
	return i.cfg.Every + i.cfg.Every/2
}

// Fresh reports whether this process may act on its claims now: its last
// successful renewal began less than TTL·2/3 ago by its monotonic clock,
// so no other instance can have taken it for dead. gen changes whenever
// the heartbeat lapsed and came back: claims made before may have been
// taken over and must be made again.
func (i *Instance) Fresh() (gen uint64, ok bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if time.Since(i.lastOK) >= i.cfg.TTL*2/3 {
		i.stale = true
		return i.gen, false
	}
	return i.gen, true
}

func (i *Instance) beat(ctx context.Context) error {
	begun := time.Now()
	cctx, cancel := context.WithTimeout(ctx, i.cfg.Every)
	defer cancel()
	others, alive, err := i.st.Heartbeat(cctx, i.host, i.pid, i.cfg.TTL)
	if err != nil {
		return err
	}
	i.mu.Lock()
	if i.stale || time.Since(i.lastOK) >= i.cfg.TTL*2/3 {
		// A pause or a partition: another instance may have adopted
		// what this one held meanwhile.
		i.gen++
		i.stale = false
		i.cfg.Logger.Warn("cluster: this instance's heartbeat lapsed; its claims are made again", slog.String("instance", i.ID()))
	}
	i.lastOK = begun
	if others != i.others {
		i.cfg.Logger.Info("cluster: instances on this database", slog.Int("others", others), slog.String("instance", i.ID()))
	}
	i.others = others
	i.alive = alive
	i.mu.Unlock()
	i.solo.Store(others == 0)
	return nil
}

// run renews this instance's row every Every. It is a heartbeat, not
// background work for River: each process must prove its own liveness,
// which a job (run by whichever process fetches it) cannot do; the same
// holds for a lease's renewal (core/lease).
func (i *Instance) run(ctx context.Context) {
	defer close(i.done)
	t := time.NewTicker(i.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := i.beat(ctx); err != nil {
			if ctx.Err() == nil {
				i.cfg.Logger.Warn("cluster: heartbeat failed", slog.Any("err", err))
			}
			continue
		}
		if f := i.onBeat.Load(); f != nil && !i.Solo() {
			// Bounded by the interval, so the next renewal is not late.
			wctx, cancel := context.WithTimeout(ctx, i.cfg.Every)
			if err := (*f)(wctx); err != nil && ctx.Err() == nil {
				i.cfg.Logger.Warn("cluster: work after the heartbeat failed; trying again at the next one", slog.Any("err", err))
			}
			cancel()
		}
	}
}

// OnBeat sets work to run after each successful renewal while other
// instances exist: the takeover of a dead instance's work (cmd/silas),
// which must not wait for River to elect a new leader when the dead one
// was it (River's periodic jobs pause up to 15 s then). It rides this
// heartbeat rather than a loop of its own; it must be safe to run on
// every instance at once (compare-and-swap in SQL).
func (i *Instance) OnBeat(f func(ctx context.Context) error) { i.onBeat.Store(&f) }

// Stop ends the heartbeat and this instance's row (the others take over
// what it left at once).
func (i *Instance) Stop(ctx context.Context) {
	i.stop()
	<-i.done
	if err := i.st.StopInstance(ctx); err != nil {
		i.cfg.Logger.Warn("cluster: could not end this instance's row; the others wait for its expiry", slog.Any("err", err))
	}
}
