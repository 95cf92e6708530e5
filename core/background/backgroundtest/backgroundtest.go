// Package backgroundtest runs the background room (core/background) in
// tests: a River client on the test database working the jobs a room
// registers — an engine's task steps — as `silas serve` does, so a test of
// the whole path sees a step job queued in a state change's transaction
// worked, not a shortcut. It never runs in the binary.
package backgroundtest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/silas-gateway/silas/core/background"
)

// Start starts a room on pool working the jobs register adds (e.g. an
// engine's Jobs), polling often (new jobs also arrive by LISTEN/NOTIFY).
// stop stops it, waiting for running jobs (at most a few seconds, then
// they are cancelled); it runs at tb's end too, and only once. Stop the
// room after the engine whose jobs it works, as serve does: a step that
// finds the runtime closed leaves its task to the next start.
func Start(tb testing.TB, pool *pgxpool.Pool, register func(*river.Workers) map[string]river.QueueConfig) (stop func()) {
	tb.Helper()
	workers := river.NewWorkers()
	room, err := background.New(background.Config{Pool: pool, Workers: workers, Queues: register(workers),
		PollInterval: 100 * time.Millisecond, Testing: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	if err := room.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = room.Stop(ctx)
		})
	}
	tb.Cleanup(stop)
	return stop
}
