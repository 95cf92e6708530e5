package engine_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/engine"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// nullChannel accepts every send and edit at once.
type nullChannel struct{ n atomic.Int64 }

func (*nullChannel) Name() core.ChannelName { return "test" }
func (*nullChannel) Run(ctx context.Context, _ core.Inbox) error {
	<-ctx.Done()
	return nil
}
func (c *nullChannel) Send(context.Context, core.OutMessage) (core.MessageRef, error) {
	return core.MessageRef(fmt.Sprintf("m%d", c.n.Add(1))), nil
}
func (*nullChannel) Update(context.Context, core.MessageRef, core.OutMessage) error { return nil }

// BenchmarkTurnToReply measures the turn pipeline end to end on PostgreSQL:
// parallel Deliver of plain-text turns spread over many conversations, each
// answered by the command agent, until every turn's reply is enqueued
// (engine Hooks.TurnDone). The database is pgtest's (TEST_DATABASE_URL,
// DATABASE_URL, or a throwaway cluster that runs with fsync off), so these
// figures are optimistic about commit cost; cmd/silas-load measures with
// durable commits.
func BenchmarkTurnToReply(b *testing.B) {
	const convs = 500
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.Open(ctx, pgtest.NewDatabase(b), store.Options{MaxConns: 16})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	pol, err := policy.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	var target atomic.Int64
	target.Store(-1)
	finished := make(chan struct{}, 1)
	eng, err := gateway.New(gateway.Config{
		Store: st, Channels: []core.Channel{&nullChannel{}}, Agent: agent.Command{}, Sandbox: sb, Policy: pol, Key: key,
		Owners: []core.IdentityID{owner},
		Hooks: engine.Hooks{TurnDone: func(int64, core.ConversationID) {
			if done.Add(1) == target.Load() {
				finished <- struct{}{}
			}
		}},
	})
	if err != nil {
		b.Fatal(err)
	}
	runDone := make(chan struct{})
	go func() { defer close(runDone); eng.Run(ctx, 10*time.Second) }()
	<-eng.Ready()
	defer func() {
		cancel()
		<-runDone
		st.Close()
	}()

	var next atomic.Int64
	deliver := func() error {
		i := next.Add(1)
		conv := core.ConversationID(fmt.Sprintf("test:c%d", i%convs))
		_, err := eng.Deliver(ctx, core.Turn{Channel: "test", Conversation: conv, Sender: owner, EventID: fmt.Sprintf("e%d", i),
			Text: "hello, what can you do?", Evidence: core.Evidence{Authenticated: true, Method: "bench"}})
		return err
	}
	// Warm up the pool, prepared statements and the outbox.
	for range 64 {
		if err := deliver(); err != nil {
			b.Fatal(err)
		}
	}
	for done.Load() < 64 {
		time.Sleep(time.Millisecond)
	}

	base := done.Load()
	target.Store(base + int64(b.N))
	b.SetParallelism(64) // 64 × GOMAXPROCS senders: Deliver waits for a group commit
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := deliver(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		b.Fatalf("only %d of %d turns completed", done.Load()-base, b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "turns/s")
}
