package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/doctor"
)

// doctorLeaseStore reads the leases (for doctor) from st.
func doctorLeaseStore(ctx context.Context, st *store.Store) []doctor.Finding {
	ls, err := st.Leases(ctx)
	if err != nil {
		return []doctor.Finding{{Severity: doctor.Warn, Check: "leases", Message: fmt.Sprintf("cannot read the leases: %v (run `silas migrate`)", err)}}
	}
	return doctorLeases(ls, time.Now())
}

// doctorLeases reports the instances alive as the leases show them (each
// process holding a lease renews it every TTL/3; one that holds none is
// not seen here) and, for each lease, its holder, epoch and age: who polls
// Telegram, holds the Discord gateway, the WhatsApp device, the Slack
// socket (docs/operations.md, "Running several instances").
func doctorLeases(ls []core.Lease, now time.Time) []doctor.Finding {
	var out doctor.List
	if len(ls) == 0 {
		out.Add(doctor.Info, "leases", "none yet (`silas serve` takes one per channel connection that must have a single consumer)")
		return out
	}
	var alive []string
	for _, l := range ls {
		if lease.Live(l, now) && !slices.Contains(alive, l.Holder) {
			alive = append(alive, l.Holder)
		}
	}
	if len(alive) == 0 {
		out.Add(doctor.Info, "instances", "none alive holding a lease (no `silas serve` is running, or none has a leased connection)")
	} else {
		out.Add(doctor.OK, "instances", "%d alive holding leases: %s", len(alive), strings.Join(alive, ", "))
	}
	for _, l := range ls {
		switch {
		case lease.Live(l, now):
			out.Add(doctor.OK, "lease", "%s: held by %s, epoch %d, for %s (renewed %s ago)", l.Name, l.Holder, l.Epoch,
				age(now.Sub(l.AcquiredAt)), age(now.Sub(l.RenewedAt)))
		case l.Holder != "":
			out.Add(doctor.Info, "lease", "%s: free — %s's holding (epoch %d) expired %s ago without a release (stopped, crashed or cut off); the next instance takes it over",
				l.Name, l.Holder, l.Epoch, age(now.Sub(l.ExpiresAt)))
		default:
			out.Add(doctor.Info, "lease", "%s: free — released %s ago (epoch %d)", l.Name, age(now.Sub(l.ExpiresAt)), l.Epoch)
		}
	}
	return out
}

// age is d rounded for reading: seconds below a minute, then minutes.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}
