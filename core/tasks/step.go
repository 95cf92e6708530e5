package tasks

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/silas-gateway/silas/core/taskjob"
)

// A task step as a River job (core/background). The transaction of every
// state change that calls for a step queues one (store.Tx.QueueTaskStep):
// a task started, stopped, answered or steered here, a task approval
// declined (core/decide), its execution settled (core/execute). The worker
// shares the in-process single-flight with the sweep, so a step queued
// while one runs makes that one go round once more — never a second
// concurrent step of the same task in this process (its model calls would
// repeat, only for the loser's write to be dropped).

// QueueSteps is the River queue task steps run in.
const QueueSteps = taskjob.Queue

// StepArgs are a task step job's arguments: the task to advance.
type StepArgs = taskjob.Args

// StepOpts are a task step's insert options (taskjob.Opts says why they
// are not unique).
func StepOpts() *river.InsertOpts { return taskjob.Opts() }

// stepFetchCooldown is the least time between two fetches of task steps.
const stepFetchCooldown = 10 * time.Millisecond

// Jobs registers the task_step worker on workers and returns its queue,
// for the background room (background.Config.Workers and Queues).
func (r *Runtime) Jobs(workers *river.Workers) map[string]river.QueueConfig {
	river.AddWorker(workers, &stepWorker{r: r})
	// A person waits on a step woken by a tap: fetch soon after River's
	// insert NOTIFY instead of River's default 100 ms cooldown between
	// fetches (a fetch is one indexed query; steps are few).
	return map[string]river.QueueConfig{QueueSteps: {MaxWorkers: 20, FetchCooldown: stepFetchCooldown}}
}

type stepWorker struct {
	river.WorkerDefaults[StepArgs]
	r *Runtime
}

// Work advances the task until it waits or ends, in the job's goroutine.
// A failed advance is logged and left to the sweep.
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
