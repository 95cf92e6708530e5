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
	"github.com/silas-gateway/silas/core/engine"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/storetest"
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

// sweepCounter is a task runtime that only counts Resume calls.
type sweepCounter struct {
	engine.TaskRuntime
	n atomic.Int32
}

func (s *sweepCounter) Resume(context.Context) error { s.n.Add(1); return nil }
func (s *sweepCounter) SweepEvery() time.Duration    { return time.Hour }

// With a task runtime, the task sweep is a River job too: it calls Resume
// once more after Run's own call at start.
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
	pol, _ := policy.New(nil)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	eng, err := engine.New(engine.Config{Store: st, Channels: []core.Channel{newFakeChannel()}, Agent: agent.Command{}, Sandbox: sb,
		Verifier: &verify.Runner{Commands: engine.SandboxChecks{Sandbox: sb}}, Policy: pol, Key: key, Owners: []core.IdentityID{owner},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rt := &sweepCounter{}
	eng.SetTasks(rt)
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Run(ctx, time.Second) }()
	t.Cleanup(func() { cancel(); <-done; sb.Close(); st.Close() })
	<-eng.Ready()
	if n := rt.n.Load(); n != 1 {
		t.Fatalf("Resume calls at start = %d, want 1", n)
	}
	jobs := eng.Maintenance()
	if got := jobNames(jobs); !slices.Equal(got, []string{"card_expiry", "outbox_scan", "task_sweep"}) {
		t.Fatalf("maintenance jobs = %v", got)
	}
	startRoom(t, st, jobs)
	deadline := time.Now().Add(30 * time.Second)
	for rt.n.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the task sweep job did not run")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
