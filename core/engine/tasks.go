package engine

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/commands"
	"github.com/silas-gateway/silas/core/store"
)

// The engine's side of the LLM agent's durable task runtime (core/tasks,
// docs/agent.md), which the engine does not import: it hands the runtime a
// person's turns that reach a task (the agent's hand-off, an answer, a tap
// on a task's card; /tasks and /stop come through the command table) as
// Tasks, an interface it owns; core/gateway builds the runtime on the
// proposing port of a task's steps (core/propose's Steps, on the same
// proposer, trust book and executor as a turn's /run). The runtime learns
// of decisions and executions from the step jobs their transactions queue,
// and reads what became of its calls from the store.

// Tasks is the task runtime as the turn pipeline uses it.
type Tasks interface {
	commands.Tasks
	// Start starts a task for the turn, inside its transaction.
	Start(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, req core.TaskRequest, o core.TaskOut) error
	// Awaiting: the conversation's task waits for this sender's answer
	// (read before the turn's transaction).
	Awaiting(ctx context.Context, st core.StoredTurn) (bool, error)
	// Answer takes the turn's text as that answer, inside its transaction.
	Answer(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, o core.TaskOut) error
	// Tap answers a tap on a task's card; Handled=false: not a task's.
	Tap(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, tap core.Tap, o core.TaskOut) (core.TaskTap, error)
	// Resume advances every unfinished task (at start, and as the sweep
	// every SweepEvery).
	Resume(ctx context.Context) error
	SweepEvery() time.Duration
	// Jobs registers the task step worker for the background room.
	Jobs(workers *river.Workers) map[string]river.QueueConfig
	// Close stops the runtime's steps, waiting until ctx ends.
	Close(ctx context.Context)
}

// startTask hands the agent's task request to the runtime, inside the
// turn's transaction.
func (e *Engine) startTask(o *outcome, req core.TaskRequest) {
	if e.tasks == nil {
		o.reply("That needs several steps, and multi-step tasks are not enabled on this gateway: ask me for one step at a time.")
		return
	}
	prev := o.inTx
	o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
		if prev != nil {
			if err := prev(ctx, tx, o); err != nil {
				return err
			}
		}
		return e.tasks.Start(ctx, tx, o.st, o.trust, req, o)
	}
}

// taskAnswer hands a plain message to the conversation's task when the
// task waits for this sender's answer (ask_user); handled: the agent is
// not asked.
func (e *Engine) taskAnswer(ctx context.Context, o *outcome) (bool, error) {
	if e.tasks == nil {
		return false, nil
	}
	waiting, err := e.tasks.Awaiting(ctx, o.st)
	if err != nil || !waiting {
		return false, err
	}
	prev := o.inTx
	o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
		if prev != nil {
			if err := prev(ctx, tx, o); err != nil {
				return err
			}
		}
		return e.tasks.Answer(ctx, tx, o.st, o.trust, o)
	}
	return true, nil
}

// FlowReplies is the flow runtime's side of a message that replies to one
// of its cards (core/flowrun): a gate's or a run's progress card. Optional
// on Config.Flows.
type FlowReplies interface {
	// Addressed: t replies to a card of a run that waits for an answer.
	Addressed(ctx context.Context, st core.StoredTurn) (bool, error)
	// AnswerReply hands the message to that run inside the turn's
	// transaction.
	AnswerReply(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, o core.TaskOut) error
}

// flowReply hands a reply to a flow's card to its run.
func (e *Engine) flowReply(ctx context.Context, o *outcome) (bool, error) {
	fr, ok := e.cfg.Flows.(FlowReplies)
	if !ok || o.st.Turn.ReplyTo == "" {
		return false, nil
	}
	if addressed, err := fr.Addressed(ctx, o.st); err != nil || !addressed {
		return false, err
	}
	prev := o.inTx
	o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
		if prev != nil {
			if err := prev(ctx, tx, o); err != nil {
				return err
			}
		}
		return fr.AnswerReply(ctx, tx, o.st, o.trust, o)
	}
	return true, nil
}

// taskTap hands a tap on a card that is not an approval or an access
// request to the runtime (a task's escalation or question card).
func (e *Engine) taskTap(ctx context.Context, tx *store.Tx, o *outcome, tap core.Tap) (core.TaskTap, error) {
	if e.tasks == nil {
		return core.TaskTap{}, nil
	}
	return e.tasks.Tap(ctx, tx, o.st, o.trust, tap, o)
}
