package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
)

// Tasks started by a flow's agent.run node (core/flowrun, docs/flows.md):
// an ordinary task — plan card, every tool call proposed through the
// core's port with its own card and token, the plan's checks, the
// summary — that names the run and its step. The runtime treats it as
// any other task; only its end also queues the run's step job (casTask),
// and the node reads what became of it from the row.

// StartFlowTask starts the task of an agent.run attempt inside tx (the
// flow step's transaction) and returns its id. Its own messages (the plan
// card, approval cards, the summary) go to the run's conversation, as a
// task's do.
func (r *Runtime) StartFlowTask(ctx context.Context, tx *store.Tx, req core.FlowTask, o Out) (string, error) {
	goal := clipText(req.Goal, 1000)
	if goal == "" {
		return "", errors.New("the goal is empty")
	}
	lim := r.cfg.Limits
	if n := int64(req.MaxSteps); n > 0 && (lim.ToolCalls == 0 || n < lim.ToolCalls) {
		lim.ToolCalls = n
	}
	m, _ := task.Start()
	t := req.Origin
	origin := core.Turn{Channel: t.Channel, Conversation: t.Conversation, Sender: t.Sender, SenderName: t.SenderName, ChatKind: t.ChatKind,
		Evidence: t.Evidence, EventID: t.EventID, At: t.At}
	om, err1 := json.Marshal(origin)
	mm, err2 := json.Marshal(m)
	lm, err3 := json.Marshal(lim)
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", fmt.Errorf("tasks: flow task: %w", err)
	}
	k := core.Task{ID: core.NewID(), Channel: t.Channel, Conversation: t.Conversation, Requester: t.Sender, Origin: om, Goal: goal,
		State: string(m.State), Machine: mm, Limits: lm, FlowRun: req.Run, FlowStep: req.Step, FlowTools: slices.Clone(req.Tools)}
	tx.QueueInsertTask(k)
	o.Audit(audit.Entry{Kind: audit.KindTaskCreated, Actor: string(t.Sender), Conversation: string(t.Conversation),
		Data: map[string]any{"task": k.ID, "goal": clipText(goal, 300), "flow_run": req.Run, "flow_step": req.Step}})
	tx.QueueTaskStep(k.ID)
	return k.ID, nil
}

// StopFlowTask stops the task of an agent.run attempt that was stopped (a
// timeout, /flow stop, fail-fast), inside tx: its open cards close and its
// running executions are killed after commit (recorded interrupted, never
// run again), writing what it shows to o. A task that already ended, or
// none, changes nothing.
func (r *Runtime) StopFlowTask(ctx context.Context, tx *store.Tx, run, step, by string, o Out) error {
	k, err := tx.LockFlowTask(ctx, run, step)
	if errors.Is(err, core.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if k.Final() {
		return nil
	}
	return r.taskUserEvent(ctx, tx, o, k, task.Event{Kind: task.UserStop}, by)
}

// SayToFlowTask passes text to the task of an agent.run attempt when it
// waits for an answer to its question (message injection: /flow say, a
// reply to the run's card), inside the turn's transaction. ok=false: the
// task asks nothing now, and nothing was passed on.
func (r *Runtime) SayToFlowTask(ctx context.Context, tx *store.Tx, run, step, text, by string, o Out) (bool, error) {
	k, err := tx.LockFlowTask(ctx, run, step)
	if errors.Is(err, core.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	err = r.answer(ctx, tx, o, k, text, by, "flow")
	if errors.Is(err, errNoQuestion) {
		return false, nil
	}
	return err == nil, err
}

// flowToolAllowed says whether a flow task may call tool (no list: all).
// Asking the person and reading back its own output act on nothing, so a
// list never takes them away.
func flowToolAllowed(k core.Task, tool string) bool {
	return len(k.FlowTools) == 0 || tool == llm.ToolAskUser || tool == llm.ToolReadOutput || slices.Contains(k.FlowTools, tool)
}

// flowWake queues the step of the flow run that started k, in the
// transaction that ends k.
func flowWake(tx *store.Tx, k core.Task) {
	if k.FlowRun != "" && k.Final() {
		tx.QueueFlowStep(k.FlowRun)
	}
}
