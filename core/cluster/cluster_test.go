package cluster

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// fakeStore answers the heartbeat with fixed counts of other rows.
type fakeStore struct{ others, alive int }

func (f *fakeStore) Instance() string { return "test:1" }
func (f *fakeStore) RegisterInstance(context.Context, string, int, time.Duration) error {
	return nil
}
func (f *fakeStore) Heartbeat(context.Context, string, int, time.Duration) (int, int, error) {
	return f.others, f.alive, nil
}
func (f *fakeStore) StopInstance(context.Context) error { return nil }

// TestWaitSeen: a starting instance waits one heartbeat and a margin only
// for others that are alive; rows of stopped or killed instances (still
// there until taken over) see nothing and must not delay a restart.
func TestWaitSeen(t *testing.T) {
	for _, tc := range []struct {
		name          string
		others, alive int
		solo          bool
		wait          time.Duration
	}{
		{"alone", 0, 0, true, 0},
		{"only dead rows", 2, 0, false, 0},
		{"one alive", 2, 1, false, 150 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst, err := Start(context.Background(), &fakeStore{tc.others, tc.alive},
				Config{TTL: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Stop(context.Background())
			if inst.Solo() != tc.solo {
				t.Errorf("Solo() = %v, want %v", inst.Solo(), tc.solo)
			}
			if got := inst.WaitSeen(); got != tc.wait {
				t.Errorf("WaitSeen() = %v, want %v", got, tc.wait)
			}
		})
	}
}
