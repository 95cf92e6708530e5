package engine_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/background"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tasks"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/storetest"
	"github.com/silas-gateway/silas/internal/taskwire"
)

// startRoom runs the engine's maintenance in a background room (River on
// the store's pool) until t ends.
func startRoom(t *testing.T, st *store.Store, jobs []background.Periodic) {
	t.Helper()
	r, err := background.New(background.Config{Pool: st.Pool(), Periodic: jobs, Logger: slog.New(slog.DiscardHandler),
		Testing: true, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
}

func jobNames(jobs []background.Periodic) []string {
	var names []string
	for _, j := range jobs {
		names = append(names, j.Name)
	}
	return names
}

// Card expiry and the outbox's recovery scan run as River jobs: a card
// whose time ran out shows "expired" with nobody tapping it, and a message
// only the database knows of (queued by another process) is delivered.
func TestMaintenanceJobsOnRiver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/run echo late")
	c := b.pendingCard(t, "echo late")
	b.clock.Add(5*time.Minute + time.Second)
	err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		return nil, tx.QueueMessage("test", core.OpSend, "from-the-cli", core.OutMessage{Conversation: "test:chat", Text: "queued elsewhere"})
	})
	if err != nil {
		t.Fatal(err)
	}
	jobs := b.eng.Maintenance()
	if got := jobNames(jobs); !slices.Equal(got, []string{"card_expiry", "outbox_scan"}) {
		t.Fatalf("maintenance jobs = %v", got)
	}
	startRoom(t, b.st, jobs)
	b.waitStatus(t, c.ID, cards.StatusExpired)
	b.ch.waitFor(t, "the message queued elsewhere", func(m []core.OutMessage) bool { return textContaining(m, "queued elsewhere") })
	if b.executions(t) != 0 {
		t.Fatal("expired card ran")
	}
}

// advanceFailures counts the task runtime's "advance failed" records.
type advanceFailures struct {
	slog.Handler
	n *atomic.Int32
}

func (h advanceFailures) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "task: advance failed" {
		h.n.Add(1)
	}
	return nil
}
func (h advanceFailures) Enabled(context.Context, slog.Level) bool { return true }
func (h advanceFailures) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h advanceFailures) WithGroup(string) slog.Handler            { return h }

// With a task runtime, the task sweep is a River job too: an unfinished
// task is advanced again after Run's own resume at start. (The task's
// stored state is unreadable, so each advance fails and logs it: the
// count of those is the count of advances.)
func TestTaskSweepJobOnRiver(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		tx.QueueInsertTask(core.Task{ID: "task-1", Channel: "test", Conversation: "test:chat", Requester: owner, Origin: []byte(`{}`),
			Goal: "sweep me", State: "planning", Machine: []byte(`"unreadable"`), Limits: []byte(`{}`)})
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var advances atomic.Int32
	pol, _ := policy.New(nil)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	eng, err := gateway.New(gateway.Config{Store: st, Channels: []core.Channel{newFakeChannel()}, Agent: agent.Command{}, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}}, Policy: pol, Key: key, Owners: []core.IdentityID{owner},
		Logger: slog.New(advanceFailures{n: &advances}), Tasks: taskwire.Runtime(tasks.Config{Sweep: time.Hour})})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Run(ctx, time.Second) }()
	t.Cleanup(func() { cancel(); <-done; sb.Close(); st.Close() })
	<-eng.Ready()
	waitFor := func(n int32) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for advances.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("advances = %d, want %d", advances.Load(), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor(1) // Run's resume at start
	jobs := eng.Maintenance()
	if got := jobNames(jobs); !slices.Equal(got, []string{"card_expiry", "outbox_scan", "task_sweep"}) || jobs[2].Every != time.Hour {
		t.Fatalf("maintenance jobs = %v (task sweep every %s)", got, jobs[len(jobs)-1].Every)
	}
	startRoom(t, st, jobs)
	waitFor(2) // the sweep, run by River at the room's start
}
