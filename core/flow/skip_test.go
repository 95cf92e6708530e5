package flow

import (
	"testing"
	"time"
)

// A person's skip (EvSkip, /flow skip): only a node on the frontier at its
// current attempt is skipped; a running attempt is stopped; the run goes
// on past the node (its plain edges fire), while an edge whose when reads
// the skipped node's output is skipped, never failing the node.
func TestPersonSkip(t *testing.T) {
	src := hdr + `nodes:
  - {id: a, type: action.shell, config: {command: x}}
  - {id: b, type: action.shell, config: {command: y}, policy: {retry: {max_attempts: 2, backoff: 1s}}}
  - {id: c, type: action.shell, config: {command: z}}
  - {id: d, type: system.log, config: {message: hi}}
edges:
  - {from: a, to: b}
  - {from: b, to: c}
  - {from: b, to: d, when: "nodes.b.exit_code == 0"}
`
	f, err := Parse("t.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMachine(f)
	t0 := time.Unix(0, 0)
	step := func(r *Run, ev Event) (*Run, Transition) {
		t.Helper()
		ev.At = t0
		r2, tr, err := m.Step(r, ev)
		if err != nil {
			t.Fatal(err)
		}
		return r2, tr
	}
	r, _, err := m.Start(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a pending node is not skipped", func(t *testing.T) {
		r1, tr := step(r, Event{Kind: EvSkip, Node: "b", Reason: "policy"})
		if tr.Ignored == "" || r1.Nodes["b"].Status != NodePending {
			t.Fatalf("pending b skipped: %+v %s", tr, r1.Nodes["b"].Status)
		}
	})
	t.Run("a stale attempt is not skipped", func(t *testing.T) {
		_, tr := step(r, Event{Kind: EvSkip, Node: "a", Attempt: 7, Reason: "policy"})
		if tr.Ignored == "" {
			t.Fatalf("stale skip taken: %+v", tr)
		}
	})
	// a is running (its card waiting): skipping it stops the attempt and
	// starts b.
	r, tr := step(r, Event{Kind: EvSkip, Node: "a", Attempt: 1, Reason: "not_applicable"})
	if r.Nodes["a"].Status != NodeSkipped || len(tr.Commands) != 2 || tr.Commands[0].Kind != CmdStop || tr.Commands[1].Kind != CmdStart || tr.Commands[1].Node != "b" {
		t.Fatalf("skip a: %s %+v", r.Nodes["a"].Status, tr.Commands)
	}
	if string(r.Nodes["a"].Output) != `{"reason":"not_applicable","skipped":true}` {
		t.Fatalf("a's output = %s", r.Nodes["a"].Output)
	}
	// b fails once and waits to retry: a skip in backoff stops nothing.
	r, _ = step(r, Event{Kind: EvFailed, Node: "b", Attempt: 1, Error: &NodeError{Code: "verification", Message: "no"}})
	if r.Nodes["b"].Status != NodeBackoff {
		t.Fatalf("b = %s", r.Nodes["b"].Status)
	}
	r, tr = step(r, Event{Kind: EvSkip, Node: "b", Attempt: 1, Reason: "blocked_dependency"})
	if r.Nodes["b"].Status != NodeSkipped || len(tr.Commands) != 1 || tr.Commands[0].Kind != CmdStart || tr.Commands[0].Node != "c" {
		t.Fatalf("skip b: %s %+v", r.Nodes["b"].Status, tr.Commands)
	}
	if r.Nodes["d"].Status != NodeSkipped || r.Status != RunRunning {
		t.Fatalf("d (its when reads b) = %s, run %s", r.Nodes["d"].Status, r.Status)
	}
	t.Run("a finished node is not skipped", func(t *testing.T) {
		_, tr := step(r, Event{Kind: EvSkip, Node: "b", Attempt: 1, Reason: "policy"})
		if tr.Ignored == "" {
			t.Fatalf("skipped twice: %+v", tr)
		}
	})
	r, _ = step(r, Event{Kind: EvSucceeded, Node: "c", Attempt: 1})
	if r.Status != RunSucceeded || r.Failed {
		t.Fatalf("run = %s", r.Status)
	}
}
