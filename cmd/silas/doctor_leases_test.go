package main

import (
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
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
	for _, tc := range []struct {
		name string
		ls   []core.Lease
		want []string // one substring per finding, in order
		sev  []doctor.Severity
	}{
		{"none", nil, []string{"none yet"}, []doctor.Severity{doctor.Info}},
		{"held, expired, released", []core.Lease{held, expired, released},
			[]string{"1 alive holding leases: a:1:aa", "telegram/telegram: held by a:1:aa, epoch 3, for 2m0s", "discord/discord: free — b:2:bb's holding (epoch 7) expired 54s ago", "slack/slack: free — released 10m0s ago (epoch 2)"},
			[]doctor.Severity{doctor.OK, doctor.OK, doctor.Info, doctor.Info}},
		{"nobody alive", []core.Lease{expired}, []string{"none alive", "discord/discord: free"}, []doctor.Severity{doctor.Info, doctor.Info}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := doctorLeases(tc.ls, now)
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
