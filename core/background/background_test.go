package background_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/background"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var quiet = slog.New(slog.DiscardHandler)

// openStore opens a store on dsn (small pool: River's client takes a
// connection for LISTEN and one per fetch).
func openStore(t *testing.T, dsn string) *store.Store {
	t.Helper()
	st, err := store.Open(t.Context(), dsn, store.Options{Logger: quiet, MaxConns: 6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// startRoom starts a room on pool and stops it when t ends (before the
// store closes: cleanups run last first).
func startRoom(t *testing.T, cfg background.Config) *background.Room {
	t.Helper()
	cfg.Logger, cfg.Testing = quiet, true
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	r, err := background.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

// eventually polls f until it returns nil or 30 s pass.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// appendEntries appends n audit entries in one transaction.
func appendEntries(t *testing.T, st *store.Store, n int) {
	t.Helper()
	err := st.Do(t.Context(), func(context.Context, *store.Tx) ([]audit.Entry, error) {
		es := make([]audit.Entry, n)
		for i := range es {
			es[i] = audit.Entry{Kind: audit.KindTurnReceived, Actor: "test", Data: map[string]any{"i": i}}
		}
		return es, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The audit checkpoint job signs the newest entry through River, and a
// graceful Stop signs what came after it (the final checkpoint).
func TestAuditCheckpointJob(t *testing.T) {
	t.Parallel()
	st := openStore(t, storetest.NewDatabase(t))
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	head := filepath.Join(t.TempDir(), "head.log")
	cp, err := audit.NewCheckpointer(t.Context(), st, audit.CheckpointOptions{Key: key, HeadFile: head, Entries: 3, Interval: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	appendEntries(t, st, 3)
	r, err := background.New(background.Config{Pool: st.Pool(), Logger: quiet, Testing: true,
		Periodic: []background.Periodic{{Name: "audit_checkpoint", Every: cp.MinInterval(),
			Run: func(ctx context.Context) error { _, err := cp.RunOnce(ctx); return err }}},
		AtStop: []func(context.Context){func(ctx context.Context) {
			if _, err := cp.Checkpoint(ctx); err != nil {
				t.Error(err)
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a checkpoint at seq 3", func() error {
		if seq, _, ok, err := st.LatestCheckpoint(t.Context()); err != nil || !ok || seq != 3 {
			return fmt.Errorf("newest checkpoint %d, %v, %v", seq, ok, err)
		}
		return nil
	})
	appendEntries(t, st, 1) // not due (Entries 3): only the stop signs it
	if err := r.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if seq, _, _, err := st.LatestCheckpoint(t.Context()); err != nil || seq != 4 {
		t.Fatalf("after a graceful stop the newest checkpoint is at %d (%v), want 4", seq, err)
	}
	if c, err := audit.ReadHead(head); err != nil || c == nil || c.Seq != 4 {
		t.Fatalf("head file = %+v, %v; want seq 4", c, err)
	}
	if n := count(t, st.Pool(), `SELECT count(*) FROM river_job WHERE kind = 'silas_audit_checkpoint' AND state = 'completed'`); n < 1 {
		t.Fatalf("completed checkpoint jobs = %d", n)
	}
}

// Two processes on one database (two rooms, two pools): River's leader
// alone inserts a periodic job, so it runs once, not once per process.
func TestPeriodicRunsOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	var runs atomic.Int32
	job := []background.Periodic{{Name: "once", Every: time.Hour, Run: func(context.Context) error { runs.Add(1); return nil }}}
	a, b := openStore(t, dsn), openStore(t, dsn)
	startRoom(t, background.Config{Pool: a.Pool(), Periodic: job})
	startRoom(t, background.Config{Pool: b.Pool(), Periodic: job})
	eventually(t, "the first run", func() error {
		if runs.Load() == 0 {
			return errors.New("not run yet")
		}
		return nil
	})
	eventually(t, "a leader", func() error {
		s, err := background.ReadState(t.Context(), a.Pool(), time.Now(), time.Hour)
		if err != nil || s.Leader == "" {
			return fmt.Errorf("leader %q, %v", s.Leader, err)
		}
		return nil
	})
	// Both started their periodic enqueuers before a leader existed or
	// after it was elected; a non-leader's would have run on start too.
	if n := count(t, a.Pool(), `SELECT count(*) FROM river_job WHERE kind = 'silas_once'`); n != 1 {
		t.Fatalf("jobs inserted = %d, want 1", n)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("runs = %d, want 1", n)
	}
}

type stepArgs struct {
	Conv string `json:"conv"`
}

func (stepArgs) Kind() string { return "test_step" }

type stepWorker struct {
	river.WorkerDefaults[stepArgs]
	done chan string
}

func (w *stepWorker) Work(_ context.Context, j *river.Job[stepArgs]) error {
	w.done <- j.Args.Conv
	return nil
}

// A job queued with Tx.QueueJob exists exactly when its transaction's
// state change does: committed together and worked, or rolled back
// together and never worked.
func TestQueueJobWithStateChange(t *testing.T) {
	t.Parallel()
	st := openStore(t, storetest.NewDatabase(t))
	w := &stepWorker{done: make(chan string, 4)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	startRoom(t, background.Config{Pool: st.Pool(), Workers: workers,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}})
	queue := func(conv string, fail bool) error {
		return st.Do(t.Context(), func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			c := core.ConversationID(conv)
			if err := tx.QueueMessage("test", core.OpSend, conv, core.OutMessage{Conversation: c, Text: "step"}); err != nil {
				return nil, err
			}
			tx.QueueJob(stepArgs{Conv: conv}, nil)
			if fail {
				return nil, errors.New("the state change fails")
			}
			return []audit.Entry{{Kind: audit.KindTurnReceived, Actor: "test", Conversation: conv}}, nil
		})
	}
	if err := queue("test:rolled-back", true); err == nil {
		t.Fatal("the failing op committed")
	}
	if err := queue("test:committed", false); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-w.done:
		if got != "test:committed" {
			t.Fatalf("worked the job of %s", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the committed job was not worked")
	}
	for conv, want := range map[string]int{"test:committed": 1, "test:rolled-back": 0} {
		if n := count(t, st.Pool(), `SELECT count(*) FROM outbox WHERE conversation = $1`, conv); n != want {
			t.Errorf("%s: outbox rows = %d, want %d", conv, n, want)
		}
		if n := count(t, st.Pool(), `SELECT count(*) FROM river_job WHERE kind = 'test_step' AND args->>'conv' = $1`, conv); n != want {
			t.Errorf("%s: jobs = %d, want %d", conv, n, want)
		}
	}
}

// A process killed mid-run leaves its job's row "running" until River's
// rescuer gives up on it (an hour): the next interval's run is inserted
// all the same. (Here the first run just does not return; the second row
// waiting behind it is what a surviving process would work.)
func TestPeriodicNotHeldByARunningRow(t *testing.T) {
	t.Parallel()
	st := openStore(t, storetest.NewDatabase(t))
	started, release := make(chan struct{}, 1), make(chan struct{})
	startRoom(t, background.Config{Pool: st.Pool(), Periodic: []background.Periodic{{Name: "held", Every: time.Second,
		Run: func(ctx context.Context) error {
			select {
			case started <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}}}})
	defer close(release)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the first run did not start")
	}
	eventually(t, "a second row while the first runs", func() error {
		if n := count(t, st.Pool(), `SELECT count(*) FROM river_job WHERE kind = 'silas_held'`); n < 2 {
			return fmt.Errorf("%d row(s)", n)
		}
		return nil
	})
}
