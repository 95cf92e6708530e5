package flowrun

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
)

// fakeAgents stands in for the task runtime: it stores a plain task row
// naming the run and step, as core/tasks does, and records stops.
type fakeAgents struct {
	mu      sync.Mutex
	started []core.FlowTask
	stopped []string
}

func (f *fakeAgents) StartFlowTask(_ context.Context, tx *store.Tx, req core.FlowTask, _ core.TaskOut) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, req)
	k := core.Task{ID: core.NewID(), Channel: req.Origin.Channel, Conversation: req.Origin.Conversation, Requester: req.Origin.Sender,
		Origin: []byte(`{}`), Goal: req.Goal, State: "planning", Machine: []byte(`{}`), Limits: []byte(`{}`),
		FlowRun: req.Run, FlowStep: req.Step, FlowTools: req.Tools}
	tx.QueueInsertTask(k)
	return k.ID, nil
}

func (f *fakeAgents) StopFlowTask(_ context.Context, _ *store.Tx, run, step, _ string, _ core.TaskOut) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, run+"/"+step)
	return nil
}

func (f *fakeAgents) SayToFlowTask(context.Context, *store.Tx, string, string, string, string, core.TaskOut) (bool, error) {
	return false, nil
}

const agentFlow = `name: ag
version: "1"
inputs:
  what: {type: string, default: the disk}
nodes:
  - id: look
    type: agent.run
    config:
      goal: "check ${{ inputs.what }}"
      tools: [shell]
      max_steps: 3
  - id: after
    type: system.log
    config:
      message: "${{ nodes.look.result }}"
edges:
  - {from: look, to: after}
`

// agent.run: the node starts one task with its rendered goal, tools and
// budget; while the task runs the run waits (the sweep leaves it alone);
// the task's end — even one whose step job was lost — advances it, the
// task's summary being the node's output; a stopped task fails the node
// (code agent); stopping the run stops the task; without the task runtime
// the node fails as unsupported.
func TestAgentRunNode(t *testing.T) {
	t.Parallel()
	ag := &fakeAgents{}
	b := setup(t, map[string]string{"ag.yaml": agentFlow}, func(c *Config) { c.Agents, c.Options.Model = ag, true; c.Catalog = withModel(c.Catalog) })
	run := b.start(t, "ag")
	if got := b.statuses(t, run); got != "look=running after=pending" {
		t.Fatalf("after start: %s", got)
	}
	if len(ag.started) != 1 || ag.started[0].Goal != "check the disk" || ag.started[0].Step != "look/0/1" || ag.started[0].MaxSteps != 3 ||
		strings.Join(ag.started[0].Tools, ",") != "shell" || ag.started[0].Origin.Sender != owner {
		t.Fatalf("task asked for: %+v", ag.started)
	}
	sweep := func() int {
		list, err := b.st.FlowRunsToSweep(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	if n := sweep(); n != 0 {
		t.Fatalf("a run waiting on its running task is swept (%d)", n)
	}
	b.advance(t, run, nil) // a wake-up before the task ended changes nothing
	if got := b.statuses(t, run); got != "look=running after=pending" {
		t.Fatalf("before the task ended: %s", got)
	}
	// The task ends; its step job is lost: the sweep finds the run.
	if _, err := b.st.Pool().Exec(b.ctx, `UPDATE tasks SET state = 'done', summary = 'Done: Check the disk ✓' WHERE flow_run = $1`, run); err != nil {
		t.Fatal(err)
	}
	if n := sweep(); n != 1 {
		t.Fatalf("the sweep lists %d runs after the task ended, want 1", n)
	}
	if err := b.rt.Resume(b.ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.statuses(t, run); got != "look=succeeded after=succeeded" {
		t.Fatalf("after the task: %s", got)
	}
	if out := b.output(t, run, "look"); out["result"] != "Done: Check the disk ✓" || out["task"] == "" {
		t.Fatalf("look = %v", out)
	}
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'flow.log' AND data->>'message' = 'Done: Check the disk ✓'`); n != 1 {
		t.Fatalf("the next node did not read the agent's result (%d)", n)
	}

	// A task that stops fails the node with code agent; stopping the run
	// stops a running task.
	stopped := b.start(t, "ag")
	if _, err := b.st.Pool().Exec(b.ctx, `UPDATE tasks SET state = 'stopped', reason = 'budget exhausted' WHERE flow_run = $1`, stopped); err != nil {
		t.Fatal(err)
	}
	b.advance(t, stopped, nil)
	if got := b.statuses(t, stopped); got != "look=failed after=cancelled" {
		t.Fatalf("stopped task: %s", got)
	}
	if n := b.count(t, `SELECT count(*) FROM flow_attempts WHERE run_id = $1 AND error->>'code' = 'agent' AND error->>'message' LIKE '%budget exhausted%'`, stopped); n != 1 {
		t.Fatalf("the node's error does not say the task stopped (%d)", n)
	}
	running := b.start(t, "ag")
	b.inTurn(t, func(ctx context.Context, tx *store.Tx, o core.TaskOut) error {
		st := core.StoredTurn{Seq: 9, Turn: origin()}
		return b.rt.Stop(ctx, tx, st, core.TrustOwner, ShortID(running), o)
	})
	b.drain(t)
	if !strings.Contains(strings.Join(ag.stopped, " "), running+"/look/0/1") {
		t.Fatalf("the run's stop did not stop its task: %v", ag.stopped)
	}

	// No task runtime: the node fails, saying why.
	nb := setup(t, map[string]string{"ag.yaml": agentFlow}, func(c *Config) { c.Options.Model = true; c.Catalog = withModel(c.Catalog) })
	lone := nb.start(t, "ag")
	if got := nb.statuses(t, lone); got != "look=failed after=cancelled" {
		t.Fatalf("without the task runtime: %s", got)
	}
	if n := nb.count(t, `SELECT count(*) FROM flow_attempts WHERE error->>'code' = 'unsupported' AND error->>'message' LIKE '%agent.kind: llm%'`); n != 1 {
		t.Fatalf("the node's error does not say why (%d)", n)
	}
}

// withModel is cat with flows loaded as with a model configured.
func withModel(cat Catalog) Catalog {
	d := cat.(Dirs)
	d.Options.Model = true
	return d
}
