// Package flowjob names the River job that advances a durable flow run
// (core/flowrun): its kind, arguments, queue and insert options. It is a
// leaf, like core/taskjob, so that the rooms whose state changes call for
// a flow step — the decider (an action node's approval declined), the
// executor (its execution settled) and the flow runtime itself — queue the
// job in their own transaction (store.Tx.QueueFlowStep) without importing
// the runtime.
//
// It never works a job (core/flowrun registers the worker) and holds no
// guarantee: a step job is a wake-up, or a timer, safe twice or late — the
// compare-and-swap on the run's seq and the state machine's stale-event
// rule drop whatever a duplicate would repeat.
package flowjob

import (
	"time"

	"github.com/riverqueue/river"
)

// Queue is the River queue flow steps run in.
const Queue = "flow_steps"

// Timer is a timer the run asked for, delivered by a scheduled job.
type Timer struct {
	Node      string `json:"node"`
	Iteration int    `json:"iteration"`
	Attempt   int    `json:"attempt"`
	// Kind is the state machine's timer kind ("timeout", "backoff") or
	// the runtime's own "wait" (a control.wait node's duration).
	Kind string `json:"kind"`
}

// Signal is an event delivered to a run's control.wait nodes waiting
// `until` it (`silas flow signal`).
type Signal struct {
	Event string `json:"event"`
	Data  string `json:"data,omitempty"`
	By    string `json:"by"`
}

// Args are a flow step job's arguments: the run to advance and, for a
// scheduled job, the timer it delivers, or the signal it carries.
type Args struct {
	Run    string  `json:"run"`
	Timer  *Timer  `json:"timer,omitempty"`
	Signal *Signal `json:"signal,omitempty"`
	// Cancel, when set, cancels the run with this reason (a child run
	// whose parent's step was stopped or failed).
	Cancel string `json:"cancel,omitempty"`
}

// Kind is the River kind of a flow step.
func (Args) Kind() string { return "silas_flow_step" }

// Opts are a wake-up's insert options. Not unique, for the reason
// core/taskjob gives: a wake-up queued while a step runs must not be
// dropped.
func Opts() *river.InsertOpts {
	return &river.InsertOpts{Queue: Queue, MaxAttempts: 5}
}

// At are a timer's insert options: the job becomes available at t.
func At(t time.Time) *river.InsertOpts {
	o := Opts()
	o.ScheduledAt = t
	return o
}
