package cluster

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
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

// TestBacklog: what waits for the publisher comes out in the order given,
// up to maxBacklog; past it a push is refused (and the caller warns),
// and taking everything makes room again.
func TestBacklog(t *testing.T) {
	b := backlog{ready: make(chan struct{}, 1)}
	for i := range maxBacklog {
		if !b.push(frame{conv: core.ConversationID(strconv.Itoa(i))}) {
			t.Fatalf("push %d refused below the bound", i)
		}
	}
	if b.push(frame{conv: "over"}) {
		t.Fatal("a push past maxBacklog was queued")
	}
	select {
	case <-b.ready:
	default:
		t.Fatal("no ready token after pushes")
	}
	got := b.take()
	if len(got) != maxBacklog {
		t.Fatalf("took %d frames, want %d", len(got), maxBacklog)
	}
	for i, f := range got {
		if want := core.ConversationID(strconv.Itoa(i)); f.conv != want {
			t.Fatalf("frame %d is %q, want %q (order lost)", i, f.conv, want)
		}
	}
	if len(b.take()) != 0 {
		t.Fatal("take left frames behind")
	}
	if !b.push(frame{conv: "again"}) {
		t.Fatal("a push after take was refused")
	}
}
