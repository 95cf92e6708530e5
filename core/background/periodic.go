package background

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
)

// kindPrefix starts every periodic job's River kind.
const kindPrefix = "silas_"

// periodicArgs are the (empty) arguments of a periodic job; the kind names
// the job. The worker is registered per kind with river.AddWorkerArgs, so
// one type serves every periodic job.
type periodicArgs struct{ kind string }

func (a periodicArgs) Kind() string { return a.kind }

// insertOpts are a periodic job's: one attempt (the next interval is the
// retry), and unique per interval, so a leader that changes mid-interval
// adds no second row. Not unique while running: a process killed mid-run
// leaves its row "running" until River's rescuer discards it (an hour),
// and that must not stop the job meanwhile. A run slower than its
// interval may therefore overlap the next; every Run is safe to.
func insertOpts(p Periodic) *river.InsertOpts {
	return &river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByPeriod: p.Every}}
}

// periodicWorker runs one Periodic.
type periodicWorker struct {
	river.WorkerDefaults[periodicArgs]
	p   Periodic
	log *slog.Logger
}

func (w *periodicWorker) Work(ctx context.Context, _ *river.Job[periodicArgs]) error {
	if err := w.p.Run(ctx); err != nil {
		if ctx.Err() == nil {
			w.log.Error("background job failed", slog.String("job", w.p.Name), slog.Any("err", err))
		}
		return err
	}
	return nil
}

func (w *periodicWorker) Timeout(*river.Job[periodicArgs]) time.Duration {
	if w.p.Timeout > 0 {
		return w.p.Timeout
	}
	return time.Minute
}
