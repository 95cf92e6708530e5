package flowrun

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/store"
)

// Child runs: a control.subflow node runs another flow as a run of its
// own, a control.foreach node one run per item (at most max_parallel at
// once). A child is an ordinary run — stored, stepped by its own jobs,
// its actions proposed with cards in the same conversation, in the name
// of the same requester — that names its parent's step; it posts no
// progress card or summary of its own (the parent's card shows the node
// running), and its end queues the parent's step job in the same
// transaction. The child's flow is looked up, and pinned, when the child
// starts.

// CodeChild is the code of a subflow or foreach node whose child run
// failed or was cancelled.
const CodeChild = "child"

func stepKey(node string, iteration, attempt int) string {
	return fmt.Sprintf("%s/%d/%d", node, iteration, attempt)
}

// childBound is how many children of a foreach run at once.
func (r *Runtime) childBound(n *flow.Node) int {
	if m, ok := n.Config["max_parallel"].(int64); ok && m > 0 {
		return int(m)
	}
	return r.cfg.MaxParallel
}

// spawn starts the children a subflow or foreach attempt c still needs,
// inside tx; children are the ones it already has. A problem that no
// retry can fix (no such flow, inputs it refuses) is the attempt's
// failure event.
func (r *Runtime) spawn(ctx context.Context, tx *store.Tx, w *write, n *flow.Node, c flow.Command, children []core.FlowRun) (*flow.Event, error) {
	bad := func(msg string) (*flow.Event, error) {
		ev := failEv(c, CodeConfig, msg, true, nil)
		return &ev, nil
	}
	name := fmt.Sprint(n.Config["flow"])
	f, doc, err := r.cfg.Catalog.Lookup(name)
	if err != nil {
		return bad(err.Error())
	}
	var inputs []map[string]any
	if n.Type == "control.subflow" {
		if len(children) > 0 {
			return nil, nil
		}
		in := map[string]any{}
		sc := w.p.m.Scope(w.fr)
		for k, e := range n.Exprs {
			key, ok := strings.CutPrefix(k, "inputs.")
			if !ok {
				continue
			}
			v, err := e.Eval(sc)
			if err != nil {
				ev := failEv(c, flow.CodeExpression, err.Error(), true, nil)
				return &ev, nil
			}
			in[key] = v
		}
		inputs = append(inputs, in)
	} else {
		var items []any
		if ns := w.fr.Nodes[n.ID]; ns != nil && len(ns.Input) > 0 {
			if err := json.Unmarshal(ns.Input, &items); err != nil {
				return bad("items: " + err.Error())
			}
		}
		as, _ := n.Config["as"].(string)
		if as == "" {
			as = "item"
		}
		running := 0
		for _, ch := range children {
			if !ch.Final() {
				running++
			}
		}
		for i := len(children); i < len(items) && running < r.childBound(n); i++ {
			inputs = append(inputs, map[string]any{as: items[i]})
			running++
		}
	}
	for i, in := range inputs {
		child, err := NewRun(f, doc, w.origin, in, r.cfg.MaxParallel)
		if err != nil {
			return bad(err.Error())
		}
		child.Parent, child.ParentStep, child.ParentIndex = w.row.ID, stepKey(n.ID, c.Iteration, c.Attempt), len(children)+i
		tx.QueueInsertFlowRun(child)
		tx.QueueFlowStep(child.ID)
	}
	return nil, nil
}

// childOutcome is a subflow or foreach attempt's event once its children
// decided it; more says a foreach can start more children now.
func (r *Runtime) childOutcome(w *write, a core.FlowAttempt, children []core.FlowRun) (ev flow.Event, ok, more bool) {
	c := flow.Command{Node: a.Node, Iteration: a.Iteration, Attempt: a.Attempt}
	n := w.p.f.Node(a.Node)
	if n == nil {
		return ev, false, false
	}
	for _, ch := range children {
		if ch.Final() && ch.Status != string(flow.RunSucceeded) {
			reason := ch.Reason
			if reason == "" {
				reason = ch.Status
			}
			msg := fmt.Sprintf("flow %s (run %s) %s: %s", ch.Flow, ShortID(ch.ID), ch.Status, reason)
			if n.Type == "control.foreach" {
				msg = fmt.Sprintf("item %d: %s", ch.ParentIndex, msg)
			}
			return failEv(c, CodeChild, msg, true, nil), true, false
		}
	}
	want := 1
	if n.Type == "control.foreach" {
		var items []any
		if ns := w.fr.Nodes[n.ID]; ns != nil {
			_ = json.Unmarshal(ns.Input, &items)
		}
		want = len(items)
	}
	done := 0
	for _, ch := range children {
		if ch.Final() {
			done++
		}
	}
	if done < want || len(children) < want {
		return ev, false, len(children) < want && len(children)-done < r.childBound(n)
	}
	if n.Type == "control.subflow" {
		return okEv(c, map[string]any{"outputs": childOutputs(children[0])}), true, false
	}
	outs := make([]any, 0, len(children))
	for _, ch := range children {
		outs = append(outs, childOutputs(ch))
	}
	return okEv(c, map[string]any{"items": outs, "count": len(outs)}), true, false
}

// childOutputs are a finished child's node outputs, by node id.
func childOutputs(ch core.FlowRun) map[string]any {
	out := map[string]any{}
	fr, err := flow.DecodeRun(ch.State)
	if err != nil {
		return out
	}
	for id, ns := range fr.Nodes {
		if ns.Status != flow.NodeSucceeded || len(ns.Output) == 0 {
			continue
		}
		var v any
		if json.Unmarshal(ns.Output, &v) == nil {
			out[id] = v
		}
	}
	return out
}

// cancelChildren queues a cancel for every child of the attempt that has
// not ended (its step was stopped, or it failed on another child).
func cancelChildren(ctx context.Context, tx *store.Tx, run string, a core.FlowAttempt, reason string) error {
	children, err := tx.ChildFlowRuns(ctx, run, stepKey(a.Node, a.Iteration, a.Attempt))
	if err != nil {
		return err
	}
	for _, ch := range children {
		if !ch.Final() {
			tx.QueueFlowCancel(ch.ID, reason)
		}
	}
	return nil
}

// spawnAll starts, inside tx, the children w's running foreach attempts
// may start now (a child ended and freed a slot).
func (r *Runtime) spawnAll(ctx context.Context, tx *store.Tx, w *write) error {
	if !w.more {
		return nil
	}
	for _, n := range w.p.f.Nodes {
		ns := w.fr.Nodes[n.ID]
		if n.Type != "control.foreach" || ns == nil || ns.Status != flow.NodeRunning {
			continue
		}
		children, err := tx.ChildFlowRuns(ctx, w.row.ID, stepKey(n.ID, ns.Iteration, ns.Attempt))
		if err != nil {
			return err
		}
		ev, err := r.spawn(ctx, tx, w, n, flow.Command{Node: n.ID, Iteration: ns.Iteration, Attempt: ns.Attempt}, children)
		if err != nil {
			return err
		}
		if ev != nil {
			w.queue = append(w.queue, *ev)
		}
	}
	return nil
}
