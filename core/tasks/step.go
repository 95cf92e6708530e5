package tasks

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// A task step as a River job (core/background): the preparation for
// queueing a step inside the transaction of the state change that calls
// for it (store.Tx.QueueJob) instead of kicking the runtime after commit.
// The worker shares the in-process single-flight with the kicks, so a
// step queued while one runs makes that one go round once more — never a
// second concurrent step of the same task in this process (its model
// calls would repeat, only for the loser's write to be dropped).

// QueueSteps is the River queue task steps run in.
const QueueSteps = "task_steps"

// StepArgs are a task_step job's arguments: the task to advance.
type StepArgs struct {
	Task string `json:"task"`
}

// Kind is the River kind of a task step.
func (StepArgs) Kind() string { return "silas_task_step" }

// StepOpts are a task step's insert options. Not unique: River's unique
// jobs dedupe against "running" rows too (it cannot leave running out of
// ByState), so a wake-up queued while a step runs would be dropped and
// the step would miss what was just written. A duplicate is harmless
// instead: the single-flight folds it into the running step in this
// process, and across processes the compare-and-swap on the task row's
// Rev drops the stale write. A few attempts cover a database error; the
// task sweep covers the rest.
func StepOpts() *river.InsertOpts {
	return &river.InsertOpts{Queue: QueueSteps, MaxAttempts: 3}
}

// Jobs registers the task_step worker on workers and returns its queue,
// for the background room (background.Config.Workers and Queues).
func (r *Runtime) Jobs(workers *river.Workers) map[string]river.QueueConfig {
	river.AddWorker(workers, &stepWorker{r: r})
	return map[string]river.QueueConfig{QueueSteps: {MaxWorkers: 20}}
}

type stepWorker struct {
	river.WorkerDefaults[StepArgs]
	r *Runtime
}

// Work advances the task until it waits or ends, as a kick does, but in
// the job's goroutine. A failed advance is logged and left to the sweep,
// as a kick's is.
func (w *stepWorker) Work(ctx context.Context, j *river.Job[StepArgs]) error {
	w.r.step(ctx, j.Args.Task)
	return nil
}

// Timeout: none of River's. A step waits on the model, whose client has
// its own timeouts; the runtime's Close bounds a step at shutdown.
func (w *stepWorker) Timeout(*river.Job[StepArgs]) time.Duration { return -1 }

// claim registers a step of task id unless one runs (then that one goes
// round once more) or Close began (the task resumes from its row at the
// next start). ok: the caller runs the step and calls r.jobs.Done.
func (r *Runtime) claim(id string) (ok bool) {
	if id == "" {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.running[id]; ok {
		j.again = true
		return false
	}
	if r.closing {
		return false
	}
	r.running[id] = &taskJob{}
	r.jobs.Add(1)
	return true
}

// step runs task id's step in the caller's goroutine, until ctx or the
// runtime's work context ends.
func (r *Runtime) step(ctx context.Context, id string) {
	if !r.claim(id) {
		return
	}
	defer r.jobs.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(r.work, cancel)
	defer stop()
	r.runTask(ctx, id)
}
