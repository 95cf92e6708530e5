package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/doctor"
)

// doctorLeaseStore reads the instances and the leases (for doctor) from st.
func doctorLeaseStore(ctx context.Context, st *store.Store) []doctor.Finding {
	is, err := st.Instances(ctx)
	if err != nil {
		return []doctor.Finding{{Severity: doctor.Warn, Check: "instances", Message: fmt.Sprintf("cannot read the instances: %v (run `silas migrate`)", err)}}
	}
	ls, err := st.Leases(ctx)
	if err != nil {
		return []doctor.Finding{{Severity: doctor.Warn, Check: "leases", Message: fmt.Sprintf("cannot read the leases: %v (run `silas migrate`)", err)}}
	}
	return doctorLeases(is, ls, time.Now())
}

// doctorLeases reports the instances alive (each `silas serve` registers
// one and renews it on a heartbeat) and, for each lease, its holder —
// with the holder's host and pid when it is a registered instance —, epoch
// and age: who polls Telegram, holds the Discord gateway, the WhatsApp
// device, the Slack socket (docs/operations.md, "Running several
// instances").
func doctorLeases(is []store.InstanceRow, ls []core.Lease, now time.Time) []doctor.Finding {
	var out doctor.List
	where := map[string]string{}
	var alive []string
	for _, i := range is {
		where[i.ID] = fmt.Sprintf("%s pid %d", i.Host, i.PID)
		if i.Alive {
			alive = append(alive, fmt.Sprintf("%s (%s, up %s, seen %s ago)", i.ID, where[i.ID], age(now.Sub(i.StartedAt)), age(now.Sub(i.SeenAt))))
		}
	}
	if len(alive) == 0 {
		out.Add(doctor.Info, "instances", "none alive (no `silas serve` is running)")
	} else {
		out.Add(doctor.OK, "instances", "%d alive: %s", len(alive), strings.Join(alive, "; "))
	}
	if len(ls) == 0 {
		out.Add(doctor.Info, "leases", "none yet (`silas serve` takes one per channel connection that must have a single consumer)")
		return out
	}
	for _, l := range ls {
		holder := l.Holder
		if w, ok := where[l.Holder]; ok {
			holder += " on " + w
		}
		switch {
		case lease.Live(l, now):
			out.Add(doctor.OK, "lease", "%s: held by %s, epoch %d, for %s (renewed %s ago)", l.Name, holder, l.Epoch,
				age(now.Sub(l.AcquiredAt)), age(now.Sub(l.RenewedAt)))
		case l.Holder != "":
			out.Add(doctor.Info, "lease", "%s: free — the holding of %s (epoch %d) expired %s ago without a release (stopped, crashed or cut off); the next instance takes it over",
				l.Name, holder, l.Epoch, age(now.Sub(l.ExpiresAt)))
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
