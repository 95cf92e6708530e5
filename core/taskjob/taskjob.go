// Package taskjob names the River job that advances one of the LLM agent's
// durable tasks (core/tasks): its kind, arguments, queue and insert
// options. It is a leaf so that the rooms whose state changes call for a
// task step — the decider (a declined task approval), the executor (a task
// approval's execution settled) and the task runtime itself — queue the
// job in their own transaction (store.Tx.QueueTaskStep) without importing
// the runtime and, through it, the model client.
//
// It never works a job (core/tasks registers the worker) and holds no
// guarantee: a step job is a wake-up, safe twice or late.
package taskjob

import "github.com/riverqueue/river"

// Queue is the River queue task steps run in.
const Queue = "task_steps"

// Args are a task step job's arguments: the task to advance.
type Args struct {
	Task string `json:"task"`
}

// Kind is the River kind of a task step.
func (Args) Kind() string { return "silas_task_step" }

// Opts are a task step's insert options. Not unique: River's unique jobs
// dedupe against "running" rows too (it cannot leave running out of
// ByState), so a wake-up queued while a step runs would be dropped and the
// step would miss what was just written. A duplicate is harmless instead:
// the runtime's single-flight folds it into the running step in its
// process, and across processes the compare-and-swap on the task row's
// Rev drops the stale write. A few attempts cover a database error; the
// task sweep covers the rest.
func Opts() *river.InsertOpts {
	return &river.InsertOpts{Queue: Queue, MaxAttempts: 3}
}
