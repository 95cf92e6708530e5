package flowrun

import (
	"context"
	"errors"
	"fmt"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/store"
)

// agent.run: the LLM agent's executor on a goal, as a task of the task
// runtime (core/tasks) that names the run and its step. The task is an
// ordinary one — its plan card, every tool call proposed through the
// core's port with a card and a single-use token unless the policy allows
// it, the plan's checks run by the gateway, its summary — so the flow adds
// no way around the gate. Its end queues the run's step job in the
// transaction that ends it; the step reads the task's row.

// Agents is the task runtime as an agent.run node uses it (core/tasks'
// Runtime); nil when no model is configured (a flow with an agent.run
// node then does not load).
type Agents interface {
	StartFlowTask(ctx context.Context, tx *store.Tx, req core.FlowTask, o core.TaskOut) (string, error)
	StopFlowTask(ctx context.Context, tx *store.Tx, run, step, by string, o core.TaskOut) error
	SayToFlowTask(ctx context.Context, tx *store.Tx, run, step, text, by string, o core.TaskOut) (bool, error)
}

// CodeAgent is the code of an agent.run node whose task stopped without
// its goal verified (by a person, its budget, or the executor giving up).
// It is not permanent: a retry starts a new task.
const CodeAgent = "agent"

// startAgent starts attempt c of agent.run node n inside tx.
func (r *Runtime) startAgent(ctx context.Context, tx *store.Tx, w *write, n *flow.Node, c flow.Command, sc flow.Scope) error {
	if r.cfg.Agents == nil {
		w.queue = append(w.queue, failEv(c, CodeUnsupported, "agent.run needs the LLM agent (agent.kind: llm), and none is configured", true, nil))
		return nil
	}
	goal, err := n.Templates["goal"].Render(sc)
	if err != nil {
		w.queue = append(w.queue, failEv(c, CodeConfig, err.Error(), true, nil))
		return nil
	}
	req := core.FlowTask{Run: w.row.ID, Step: stepKey(n.ID, c.Iteration, c.Attempt), Origin: w.origin, Goal: goal}
	if list, ok := n.Config["tools"].([]any); ok {
		for _, t := range list {
			req.Tools = append(req.Tools, fmt.Sprint(t))
		}
	}
	if m, ok := n.Config["max_steps"].(int64); ok {
		req.MaxSteps = int(m)
	}
	if _, err := r.cfg.Agents.StartFlowTask(ctx, tx, req, w.out); err != nil {
		w.queue = append(w.queue, failEv(c, CodeConfig, err.Error(), true, nil))
		return nil
	}
	w.queue = append(w.queue, startedEv(c))
	return nil
}

// agentOutcome is an agent.run attempt's event once its task ended: done
// (its plan's checks passed, verified by the gateway) is a success whose
// output is the task's summary; stopped is a failure.
func (r *Runtime) agentOutcome(ctx context.Context, a core.FlowAttempt) (flow.Event, bool, error) {
	k, err := r.st.FlowTask(ctx, a.Run, stepKey(a.Node, a.Iteration, a.Attempt))
	if errors.Is(err, core.ErrNotFound) {
		return flow.Event{}, false, nil
	}
	if err != nil || !k.Final() {
		return flow.Event{}, false, err
	}
	c := flow.Command{Node: a.Node, Iteration: a.Iteration, Attempt: a.Attempt}
	if k.State != "done" {
		reason := k.Reason
		if reason == "" {
			reason = "it stopped"
		}
		return failEv(c, CodeAgent, fmt.Sprintf("the agent's task %s stopped without its goal verified: %s", k.ID, reason), false, nil), true, nil
	}
	// The summary is the gateway's report (what ran, which checks passed);
	// only the plan's title in it is the model's words.
	return okEv(c, map[string]any{"result": redactText(k.Summary), "task": k.ID}), true, nil
}

// stopAgent stops the task of a stopped agent.run attempt (its cards
// close, its running actions are killed after commit).
func (r *Runtime) stopAgent(ctx context.Context, tx *store.Tx, w *write, a core.FlowAttempt) error {
	if r.cfg.Agents == nil {
		return nil
	}
	return r.cfg.Agents.StopFlowTask(ctx, tx, w.row.ID, stepKey(a.Node, a.Iteration, a.Attempt), string(StoppedBy), w.out)
}

// sayToAgent passes a person's words to the run's running agent.run
// nodes whose task asks a question (message injection); ok=false when
// none asks.
func (r *Runtime) sayToAgent(ctx context.Context, tx *store.Tx, w *write, text string, by core.IdentityID, out core.TaskOut) (bool, error) {
	if r.cfg.Agents == nil {
		return false, nil
	}
	for _, n := range w.p.f.Nodes {
		ns := w.fr.Nodes[n.ID]
		if n.Type != "agent.run" || ns == nil || ns.Status != flow.NodeRunning {
			continue
		}
		ok, err := r.cfg.Agents.SayToFlowTask(ctx, tx, w.row.ID, stepKey(n.ID, ns.Iteration, ns.Attempt), text, string(by), out)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}
