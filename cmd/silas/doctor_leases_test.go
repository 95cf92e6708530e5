package main

import (
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/doctor"
)

// Doctor names the instances alive and, for each lease, its holder, epoch
// and age, or why it is free.
func TestDoctorLeases(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 26, 19, 0, 0, 0, time.UTC)
	held := core.Lease{Name: "telegram/telegram", Holder: "a:1:aa", Epoch: 3, AcquiredAt: now.Add(-90 * time.Second),
		RenewedAt: now.Add(-time.Second), ExpiresAt: now.Add(5 * time.Second)}
	expired := core.Lease{Name: "discord/discord", Holder: "b:2:bb", Epoch: 7, AcquiredAt: now.Add(-time.Hour),
		RenewedAt: now.Add(-time.Minute), ExpiresAt: now.Add(-54 * time.Second)}
	released := core.Lease{Name: "slack/slack", Epoch: 2, ExpiresAt: now.Add(-10 * time.Minute)}
	a := store.InstanceRow{ID: "a:1:aa", Host: "hosta", PID: 1, StartedAt: now.Add(-time.Hour), SeenAt: now.Add(-time.Second), Alive: true}
	b := store.InstanceRow{ID: "b:2:bb", Host: "hostb", PID: 2, StartedAt: now.Add(-2 * time.Hour), SeenAt: now.Add(-time.Minute)}
	for _, tc := range []struct {
		name string
		is   []store.InstanceRow
		ls   []core.Lease
		want []string // one substring per finding, in order
		sev  []doctor.Severity
	}{
		{"none", nil, nil, []string{"none alive", "none yet"}, []doctor.Severity{doctor.Info, doctor.Info}},
		{"held, expired, released", []store.InstanceRow{b, a}, []core.Lease{held, expired, released},
			[]string{"1 alive: a:1:aa (hosta pid 1, up 1h0m0s, seen 1s ago)", "telegram/telegram: held by a:1:aa on hosta pid 1, epoch 3, for 2m0s", "discord/discord: free — the holding of b:2:bb on hostb pid 2 (epoch 7) expired 54s ago", "slack/slack: free — released 10m0s ago (epoch 2)"},
			[]doctor.Severity{doctor.OK, doctor.OK, doctor.Info, doctor.Info}},
		{"nobody alive", nil, []core.Lease{expired}, []string{"none alive", "discord/discord: free"}, []doctor.Severity{doctor.Info, doctor.Info}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := doctorLeases(tc.is, tc.ls, now)
			if len(fs) != len(tc.want) {
				t.Fatalf("findings %+v", fs)
			}
			for i, f := range fs {
				if !strings.Contains(f.Message, tc.want[i]) || f.Severity != tc.sev[i] {
					t.Errorf("finding %d: %v %q; want %v with %q", i, f.Severity, f.Message, tc.sev[i], tc.want[i])
				}
			}
		})
	}
}
