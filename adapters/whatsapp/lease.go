package whatsapp

import (
	"context"
	"errors"
	"log/slog"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
)

// The device under a lease (issue 25). WhatsApp allows one connection per
// linked device: a second connection with the same keys replaces the first
// (StreamReplaced), so two `silas serve` on one database would knock each
// other off in turn. With a LeaseStore only the holder of the lease
// "whatsapp/<channel>" connects:
//
//   - before every connect the holding is checked against the database (a
//     fenced write of the holder's name under "device_holder"): a process
//     that was stopped past its lease (SIGSTOP, a paused VM) and wakes up
//     finds a newer epoch and does not connect, so it cannot replace the
//     new holder's stream;
//   - a message is acknowledged (the handler returns true) only after its
//     turn is stored and only while the lease is held; one that arrives
//     when it is gone stays unacknowledged, and WhatsApp delivers it again
//     to the holder (the turn, if stored, is a duplicate at the intake);
//   - the link state ("problem", shown by doctor) is written fenced, so a
//     stale instance cannot record "replaced" over the new holder's state;
//   - losing the lease disconnects (never a logout, which would unlink the
//     device); the StreamReplaced that follows the successor's connect is
//     then expected and neither recorded nor told to the owner.
//
// Sending needs the connection, so only the holder sends: the channel is a
// core.HeldSender, and with several instances the outbox hands a
// WhatsApp conversation over to the instance whose SendsHere is true,
// which delivers it (and, when its connection comes up, delivers what
// waited: OnSendsHere). Alone, a send while disconnected fails as "not
// connected" and the outbox retries it. Without a LeaseStore the channel
// runs as before.

// leaseName is the device lease of this channel.
func (a *Adapter) leaseName() string { return "whatsapp/" + string(a.cfg.Name) }

// runLeased connects while holding the lease, until ctx ends.
func (a *Adapter) runLeased(ctx context.Context) {
	var st lease.Store
	if a.cfg.Leases != nil {
		st = a.cfg.Leases
	}
	cfg := lease.Config{Name: a.leaseName(), Holder: a.cfg.Instance, TTL: a.cfg.LeaseTTL, Logger: a.log}
	err := lease.Hold(ctx, st, cfg, func(lctx context.Context, held *lease.Held) {
		a.mu.Lock()
		a.held = held
		a.mu.Unlock()
		if held != nil {
			a.log.Info("whatsapp: connecting under the device lease", slog.String("lease", a.leaseName()), slog.Int64("epoch", held.Epoch()))
		}
		a.connect(lctx)
		a.cli.Disconnect()
	})
	if err != nil {
		a.log.Error("whatsapp: cannot hold the device lease", slog.Any("err", err))
	}
}

// leased reports whether the channel runs under a lease.
func (a *Adapter) leased() bool { return a.cfg.Leases != nil }

// holdingLive reports whether this process may act on the device now: no
// leases, or a holding whose context has not ended.
func (a *Adapter) holdingLive() bool {
	if !a.leased() {
		return true
	}
	a.mu.Lock()
	h := a.held
	a.mu.Unlock()
	return h != nil && h.Context().Err() == nil
}

// stillHolding checks the holding against the database before a connect:
// a newer epoch (core.ErrFenced) ends it. Other errors leave the decision
// to the lease's heartbeat.
func (a *Adapter) stillHolding(ctx context.Context) bool {
	if !a.leased() {
		return true
	}
	if !a.holdingLive() {
		return false
	}
	err := a.setState(ctx, "device_holder", a.cfg.Instance)
	if errors.Is(err, core.ErrFenced) {
		a.stateWriteFailed("the device holder", err)
		return false
	}
	return ctx.Err() == nil
}

// setState writes a state key, fenced by the lease's epoch while the
// device is held under one (core.ErrFenced once a newer holder exists).
func (a *Adapter) setState(ctx context.Context, key, value string) error {
	a.mu.Lock()
	h := a.held
	a.mu.Unlock()
	if a.leased() {
		if h == nil {
			return core.ErrFenced // not holding: not this process's to write
		}
		return a.cfg.Leases.SetStateFenced(ctx, a.cfg.Name, key, value, a.leaseName(), h.Epoch())
	}
	return a.cfg.State.SetState(ctx, a.cfg.Name, key, value)
}

// stateWriteFailed logs a failed write; a fenced one means another
// instance holds the device, and this one disconnects.
func (a *Adapter) stateWriteFailed(what string, err error) {
	if errors.Is(err, core.ErrFenced) {
		a.log.Warn("whatsapp: another instance holds the device now; this one disconnects", slog.String("write", what), slog.Any("err", err))
		a.cli.Disconnect()
		return
	}
	a.log.Warn("whatsapp: "+what, slog.Any("err", err))
}

var _ core.HeldSender = (*Adapter)(nil)

// SendsHere reports whether this process can send now: it holds the
// device (or runs without leases) and is connected and logged in.
func (a *Adapter) SendsHere() bool {
	return a.holdingLive() && a.Status().Connected && a.cli.IsConnected()
}

// OnSendsHere sets f to run each time the device connects while this
// process holds it (core.HeldSender).
func (a *Adapter) OnSendsHere(f func()) {
	a.mu.Lock()
	a.sendsHere = f
	a.mu.Unlock()
}

// connectedHere runs OnSendsHere's function after a connect while held.
func (a *Adapter) connectedHere() {
	a.mu.Lock()
	f := a.sendsHere
	a.mu.Unlock()
	if f != nil && a.holdingLive() {
		f()
	}
}
