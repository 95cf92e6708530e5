package engine

import (
	"context"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/commands"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tasks"
)

// The engine's side of the LLM agent's durable task runtime (core/tasks,
// docs/agent.md). The runtime is built with the engine (Config.Tasks) on
// the engine's proposing port, taskActions, so every tool call of a task
// passes the same propose → policy → card → token → sandbox → verify path
// as /run, inside the task step's own transaction. The engine hands the
// runtime a person's turns that reach a task (the agent's hand-off, an
// answer, a tap on a task's card; /tasks and /stop come through the
// command table) and tells it when an approval's decision or execution
// changed; the runtime reads what became of its calls from the store.

// taskActions is the engine as the task runtime's proposing port.
type taskActions struct{ e *Engine }

var _ tasks.Actions = taskActions{}

// Propose is propose for a task's origin turn, inside the task's
// transaction: the request, its card and — when policy allows — its
// approval are written in tx; the messages go to origin's conversation.
func (p taskActions) Propose(ctx context.Context, tx *store.Tx, task string, origin core.Turn, pa core.ProposedAction) (tasks.Proposal, error) {
	e := p.e
	trust, _ := e.trust.Of(ctx, origin)
	o := outcome{st: core.StoredTurn{Turn: origin}, trust: trust}
	if pr := e.propose(&o, pa); pr.Request == nil {
		// Not proposed: refused (trust), blocked by policy or malformed.
		return tasks.Proposal{Refused: pr.Refused, Audit: o.audit}, nil
	}
	for _, a := range o.appr {
		a.Task = task
		tx.QueueApproval(a)
	}
	if o.inTx != nil {
		// propose sets inTx only to approve on the policy's behalf.
		if err := o.inTx(ctx, tx, &o); err != nil {
			return tasks.Proposal{}, err
		}
	}
	for _, c := range o.cards {
		if err := tx.QueueMessage(origin.Channel, core.OpSend, string(c.ID), core.OutMessage{Conversation: origin.Conversation, Card: c}); err != nil {
			return tasks.Proposal{}, err
		}
	}
	for _, c := range o.updates {
		if err := tx.QueueMessage(origin.Channel, core.OpUpdate, string(c.ID), core.OutMessage{Conversation: origin.Conversation, Card: c}); err != nil {
			return tasks.Proposal{}, err
		}
	}
	// approve's only after-commit work is starting the execution.
	return tasks.Proposal{Approval: o.appr[0].ID, Approved: len(o.after) > 0, Messages: len(o.cards) + len(o.updates), Audit: o.audit}, nil
}

// Proposed starts the execution of an action policy approved, once its
// transaction committed (as approve's after-commit work does for a turn).
func (p taskActions) Proposed(pr tasks.Proposal) {
	e := p.e
	if !pr.Approved {
		return
	}
	if e.holdExecution == nil || !e.holdExecution(pr.Approval) {
		e.startExecution(pr.Approval)
	}
}

// StopRuns kills the running executions of a stopped task.
func (p taskActions) StopRuns(ids []core.ApprovalID) { p.e.exec.Stop(ids) }

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

// taskTap hands a tap on a card that is not an approval or an access
// request to the runtime (a task's escalation or question card).
func (e *Engine) taskTap(ctx context.Context, tx *store.Tx, o *outcome, tap core.Tap) (tasks.Tapped, error) {
	if e.tasks == nil {
		return tasks.Tapped{}, nil
	}
	return e.tasks.Tap(ctx, tx, o.st, o.trust, tap, o)
}

// commandTasks is the task runtime as the command table asks it; nil (no
// runtime) when tasks are not enabled.
func (e *Engine) commandTasks() commands.Tasks {
	if e.tasks == nil {
		return nil
	}
	return e.tasks
}
