package slack

import (
	"context"
	"log/slog"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
)

// Socket Mode under a lease (issue 25). Slack hands each event to one of
// an app's open Socket Mode connections (up to 10), so sockets on several
// instances would each get a share. That could be made correct — the
// core's intake is idempotent on the event id, so a redelivery to another
// socket is a no-op — but two things it cannot keep: the order of the
// messages of one conversation (two instances delivering concurrently may
// store them in either order), and the clear signal that a socket nobody
// owns is eating events (hello's num_connections > 1, which this adapter
// warns about and the fake Slack treats as a breach). So Silas holds one
// socket per app: only the holder of the lease "slack/<channel>" opens
// it. The other instances serve the HTTP endpoints and send (the Web API
// needs no socket), and take over within the lease's TTL when the holder
// dies.
//
// Nothing Socket Mode stores depends on the lease (there is no cursor:
// Slack redelivers every unacknowledged envelope), so there is no fenced
// write; what must not outlive the lease is the acknowledgement, and an
// envelope whose delivery ends after the lease was lost is not
// acknowledged — Slack gives it to the new holder's socket, where it is a
// duplicate at the intake if it had been stored. Losing the lease closes
// the socket with a close handshake, so Slack stops counting it before the
// successor connects.
//
// HTTP mode (Events API requests) needs no lease: any instance serves them.

// leaseName is the Socket Mode lease of this channel.
func (a *Adapter) leaseName() string { return "slack/" + string(a.cfg.Name) }

// runSocketLeased runs Socket Mode while holding the lease, until ctx
// ends; without a lease store it runs it as before.
func (a *Adapter) runSocketLeased(ctx context.Context, in core.Inbox) {
	cfg := lease.Config{Name: a.leaseName(), Holder: a.cfg.Instance, TTL: a.cfg.LeaseTTL, Logger: a.log}
	err := lease.Hold(ctx, a.cfg.Leases, cfg, func(lctx context.Context, held *lease.Held) {
		if held != nil {
			a.log.Info("slack: opening Socket Mode under the lease", slog.String("lease", a.leaseName()), slog.Int64("epoch", held.Epoch()))
		}
		a.runSocket(lctx, in)
	})
	if err != nil {
		a.log.Error("slack: cannot hold the Socket Mode lease", slog.Any("err", err))
	}
}
