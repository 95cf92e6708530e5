package background

import (
	"context"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// kindPrefix starts every periodic job's River kind.
const kindPrefix = "silas_"

// periodicArgs are the (empty) arguments of a periodic job; the kind names
// the job. The worker is registered per kind with river.AddWorkerArgs, so
// one type serves every periodic job.
type periodicArgs struct{ kind string }

func (a periodicArgs) Kind() string { return a.kind }

// periodicInsertOpts: one attempt (the next interval is the retry), and
// at most one row per kind waiting or running. A leader that changes
// mid-interval, or a run slower than the interval, then adds nothing.
var periodicInsertOpts = &river.InsertOpts{
	Queue:       QueueMaintenance,
	MaxAttempts: 1,
	UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
		rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
		rivertype.JobStateRetryable, rivertype.JobStateScheduled,
	}},
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
