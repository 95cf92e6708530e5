package flowrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowjob"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
)

// Error codes the runtime gives a node (beside the machine's own).
const (
	CodeRefused     = "refused"      // not proposed: trust or policy refused it
	CodeDeclined    = "declined"     // its approval card was declined or expired
	CodeVerify      = "verification" // it ran and its verification failed
	CodeInterrupted = "interrupted"  // it may have run; never run again
	CodeUnsupported = "unsupported"  // this runtime does not run the node type yet
	CodeConfig      = "config"       // the node's config did not evaluate
	CodeStopped     = "stopped"
)

func failEv(c flow.Command, code, msg string, permanent bool, out json.RawMessage) flow.Event {
	return flow.Event{Kind: flow.EvFailed, Node: c.Node, Iteration: c.Iteration, Attempt: c.Attempt,
		Error: &flow.NodeError{Code: code, Message: msg, Permanent: permanent}, Output: out}
}

func okEv(c flow.Command, out any) flow.Event {
	b, err := json.Marshal(out)
	if err != nil {
		b = []byte(`{}`)
	}
	return flow.Event{Kind: flow.EvSucceeded, Node: c.Node, Iteration: c.Iteration, Attempt: c.Attempt, Output: b}
}

func startedEv(c flow.Command) flow.Event {
	return flow.Event{Kind: flow.EvStarted, Node: c.Node, Iteration: c.Iteration, Attempt: c.Attempt}
}

// start begins an attempt of a work node inside tx: the attempt row, then
// what the node does — a proposal, a gate's card, a wait's timer, or (data
// and system nodes) its result at once.
func (r *Runtime) start(ctx context.Context, tx *store.Tx, w *write, c flow.Command) error {
	n := w.p.f.Node(c.Node)
	// The scope (every finished node's output decoded) only for the nodes
	// that render or evaluate with it, not for a wait or a subflow: its
	// cost per transition grows with the flow. w.fr does not change in
	// here, so it is the same scope whenever it is built.
	scope := func() flow.Scope { return w.p.m.Scope(w.fr) }
	att := core.FlowAttempt{Run: w.row.ID, Node: n.ID, Iteration: c.Iteration, Attempt: c.Attempt, Type: n.Type}
	w.out.Audit(w.entry(audit.KindFlowNodeStarted, map[string]any{"node": n.ID, "type": n.Type, "iteration": c.Iteration, "attempt": c.Attempt}))
	kind, action := r.kinds[n.Type]
	switch {
	case action:
		sc := scope()
		pa, err := kind.Propose(n, sc)
		if err != nil {
			tx.QueueFlowAttempt(att)
			w.queue = append(w.queue, failEv(c, CodeConfig, err.Error(), true, nil))
			return nil
		}
		pa.Step = stepPreview(n, c, sc.Inputs) // the card's preview (issue 28)
		p, err := r.cfg.Approver.Propose(ctx, tx, ActionRequest{Run: w.row.ID, Flow: w.row.Flow, Version: w.row.Version, FlowHash: w.row.FlowHash,
			Node: n.ID, Iteration: c.Iteration, Attempt: c.Attempt, Step: fmt.Sprintf("%s/%d/%d", n.ID, c.Iteration, c.Attempt), Owner: core.FlowOwner + w.row.ID, Origin: w.origin, Action: pa})
		if err != nil {
			return err
		}
		w.out.Audit(p.Audit...)
		att.Approval = p.Approval
		tx.QueueFlowAttempt(att)
		if p.Approval == "" {
			w.queue = append(w.queue, failEv(c, CodeRefused, p.Refused, true, nil))
			return nil
		}
		w.messages += p.Messages
		if p.Approved {
			w.proposed = append(w.proposed, p)
		}
		w.queue = append(w.queue, startedEv(c))
	case n.Type == "control.gate":
		att.Card = "fgate-" + core.NewID()
		tx.QueueFlowAttempt(att)
		prompt, err := n.Templates["prompt"].Render(scope())
		if err != nil {
			w.queue = append(w.queue, failEv(c, CodeConfig, err.Error(), true, nil))
			return nil
		}
		w.out.Card(gateCard(w, n, att.Card, prompt, gateShown{}))
		w.queue = append(w.queue, startedEv(c))
	case n.Type == "agent.run":
		tx.QueueFlowAttempt(att)
		return r.startAgent(ctx, tx, w, n, c, scope())
	case n.Type == "control.subflow" || n.Type == "control.foreach":
		tx.QueueFlowAttempt(att)
		ev, err := r.spawn(ctx, tx, w, n, c, nil)
		if err != nil {
			return err
		}
		if ev != nil {
			w.queue = append(w.queue, *ev)
			return nil
		}
		w.queue = append(w.queue, startedEv(c))
		if n.Type == "control.foreach" && len(w.fr.Nodes[n.ID].Input) <= 2 {
			// No items: nothing to wait for.
			w.queue = append(w.queue, okEv(c, map[string]any{"items": []any{}, "count": 0}))
		}
	case n.Type == "control.wait":
		tx.QueueFlowAttempt(att)
		if _, until := n.Config["until"]; until {
			// Nothing is scheduled: the run waits, a row and no job, until
			// a signal names the event (/flow signal, silas flow signal);
			// the node's timeout bounds the wait.
			w.queue = append(w.queue, startedEv(c))
			return nil
		}
		d, _ := time.ParseDuration(fmt.Sprint(n.Config["duration"]))
		if d <= 0 {
			w.queue = append(w.queue, failEv(c, CodeConfig, "the duration is not positive", true, nil))
			return nil
		}
		tx.QueueFlowTimer(w.row.ID, flowjob.Timer{Node: n.ID, Iteration: c.Iteration, Attempt: c.Attempt, Kind: "wait"}, tx.Now().Add(d))
		w.queue = append(w.queue, startedEv(c))
	default:
		tx.QueueFlowAttempt(att)
		ev, err := r.inline(ctx, tx, w, n, c, scope())
		if err != nil {
			return err
		}
		w.queue = append(w.queue, ev)
	}
	return nil
}

// shellMeta are the characters that make a command need a shell.
const shellMeta = "|&;<>()$`*?[]{}~\n"

// shellAction is what /run proposes for the rendered command: its argv
// split without a shell, every check of expect after the exit code check.
// A command with shell syntax (a pipe, a redirection…) that is not
// already an explicit `sh -c …` is proposed as `sh -c <command>`, shown
// as such on the card: the policy judges the
// shell and what it runs (core/policy looks inside sh -c).
func shellAction(n *flow.Node, sc flow.Scope) (core.ProposedAction, error) {
	cmd, err := n.Templates["command"].Render(sc)
	if err != nil {
		return core.ProposedAction{}, err
	}
	cmd = strings.TrimSpace(cmd)
	argv, err := agent.Split(cmd)
	if err != nil {
		return core.ProposedAction{}, fmt.Errorf("command %q: %w", cmd, err)
	}
	explicit := len(argv) >= 2 && (argv[0] == "sh" || argv[0] == "bash") && argv[1] == "-c"
	if strings.ContainsAny(cmd, shellMeta) && !explicit {
		argv = []string{"sh", "-c", cmd}
	}
	if len(argv) == 0 {
		return core.ProposedAction{}, errors.New("the command is empty")
	}
	checks := []verify.Check{verify.ExitCodeZero()}
	extra, err := expectChecks(n.Config["expect"])
	if err != nil {
		return core.ProposedAction{}, err
	}
	checks = append(checks, extra...)
	a := core.Action{Tool: "shell", Argv: argv, Verify: checks}
	return core.ProposedAction{Action: a, Intent: render.Clip("Flow step "+n.ID+": "+a.CommandLine(), 180),
		Rationale: "A step of a flow you started. It runs without network in a sandbox and counts as done only if its checks pass."}, nil
}

// expectChecks turns an action.shell expect list (flattened checks, see
// core/flow's catalog) into verification checks.
func expectChecks(v any) ([]verify.Check, error) {
	list, _ := v.([]any)
	var out []verify.Check
	for i, it := range list {
		m, _ := it.(map[string]any)
		c := verify.Check{}
		if name, ok := m["name"].(string); ok {
			c.Name = name
		}
		if run, ok := m["run"].([]any); ok {
			for _, a := range run {
				c.Run = append(c.Run, fmt.Sprint(a))
			}
		}
		if t, ok := m["timeout_seconds"].(int64); ok {
			c.TimeoutSeconds = int(t)
		}
		exp := map[string]any{}
		for k, x := range m {
			switch k {
			case "name", "run", "timeout_seconds":
			default:
				exp[k] = x
			}
		}
		b, err := json.Marshal(exp)
		if err == nil {
			err = json.Unmarshal(b, &c.Expect)
		}
		if err != nil {
			return nil, fmt.Errorf("expect[%d]: %w", i, err)
		}
		if c.Name == "" {
			c.Name = fmt.Sprintf("expect %d", i+1)
		}
		out = append(out, c)
	}
	return out, nil
}

// stop ends a running attempt: an action's open card is declined and a
// running execution killed after commit (recorded interrupted, never run
// again); a gate's card says it was cancelled.
func (r *Runtime) stop(ctx context.Context, tx *store.Tx, w *write, c flow.Command) error {
	a, err := tx.FlowAttempt(ctx, w.row.ID, c.Node, c.Iteration, c.Attempt)
	if errors.Is(err, core.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if a.Status != "running" {
		return nil
	}
	e, _ := json.Marshal(flow.NodeError{Code: CodeStopped, Message: c.Reason})
	tx.QueueFlowAttemptEnd(core.FlowAttempt{Run: a.Run, Node: a.Node, Iteration: a.Iteration, Attempt: a.Attempt, Status: "stopped", Error: e})
	w.out.Audit(w.entry(audit.KindFlowNodeFinished, map[string]any{"node": a.Node, "iteration": a.Iteration, "attempt": a.Attempt,
		"status": "stopped", "reason": c.Reason}))
	switch {
	case a.Type == "control.subflow" || a.Type == "control.foreach":
		return cancelChildren(ctx, tx, w.row.ID, a, "its parent's step was stopped: "+c.Reason)
	case a.Type == "agent.run":
		return r.stopAgent(ctx, tx, w, a)
	case a.Approval != "":
		ar, err := tx.GetApproval(ctx, a.Approval)
		if err != nil {
			return err
		}
		if ar.Status != core.ApprovalPending && ar.Status != core.ApprovalConfirming {
			// Approved: its execution, if it runs here or anywhere, is
			// killed after commit and recorded interrupted.
			w.stop = append(w.stop, a.Approval)
			return nil
		}
		ok, err := tx.TransitionApproval(ctx, a.Approval, []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming}, core.ApprovalDeclined, StoppedBy, nil)
		if err != nil || !ok {
			return err
		}
		ar.Status, ar.DecidedBy = core.ApprovalDeclined, StoppedBy
		w.out.Update(render.Approval(ar, nil, 0))
		w.out.Audit(audit.Entry{Kind: audit.KindApprovalDeclined, Actor: "silas", Conversation: string(w.row.Conversation),
			Data: map[string]any{"approval": string(a.Approval), "run": w.row.ID, "reason": "flow step stopped: " + c.Reason}})
	case a.Card != "":
		n := w.p.f.Node(a.Node)
		prompt, _ := n.Templates["prompt"].Render(w.p.m.Scope(w.fr))
		w.out.Update(gateCard(w, n, a.Card, prompt, gateShown{cancelled: "Cancelled: " + c.Reason}))
	}
	return nil
}

// StoppedBy is recorded as the decider of an action node's approval closed
// because its run or step was stopped.
const StoppedBy core.IdentityID = "silas:flow-stopped"

// inline does a data or system node's work now and returns its outcome.
func (r *Runtime) inline(ctx context.Context, tx *store.Tx, w *write, n *flow.Node, c flow.Command, sc flow.Scope) (flow.Event, error) {
	expr := func(k string) (any, error) { return n.Exprs[k].Eval(sc) }
	bad := func(err error) (flow.Event, error) {
		return failEv(c, flow.CodeExpression, err.Error(), true, nil), nil
	}
	switch n.Type {
	case "system.log":
		msg, err := n.Templates["message"].Render(sc)
		if err != nil {
			return bad(err)
		}
		r.log.Info("flow log", slog.String("run", w.row.ID), slog.String("node", n.ID), slog.String("message", msg))
		w.out.Audit(w.entry(audit.KindFlowLog, map[string]any{"node": n.ID, "message": render.Clip(msg, 500)}))
		return okEv(c, map[string]any{"ok": true, "message": msg}), nil
	case "data.template":
		s, err := n.Templates["template"].Render(sc)
		if err != nil {
			return bad(err)
		}
		return okEv(c, map[string]any{"text": s}), nil
	case "data.json.parse":
		v, err := expr("text")
		if err != nil {
			return bad(err)
		}
		s, ok := v.(string)
		var out any
		if !ok || json.Unmarshal([]byte(s), &out) != nil {
			return failEv(c, CodeConfig, "text is not a JSON document", true, nil), nil
		}
		return okEv(c, map[string]any{"value": out}), nil
	case "data.json.stringify":
		v, err := expr("value")
		if err != nil {
			return bad(err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return bad(err)
		}
		return okEv(c, map[string]any{"text": string(b)}), nil
	case "data.map", "data.filter":
		v, err := expr("list")
		if err != nil {
			return bad(err)
		}
		list, ok := v.([]any)
		if !ok {
			return failEv(c, flow.CodeExpression, "list is not a list", true, nil), nil
		}
		key := map[string]string{"data.map": "expr", "data.filter": "when"}[n.Type]
		out := []any{}
		for i, it := range list {
			isc := sc
			isc.Item, isc.Index = it, i
			x, err := n.Exprs[key].Eval(isc)
			if err != nil {
				return bad(err)
			}
			if n.Type == "data.map" {
				out = append(out, x)
			} else if keep, _ := x.(bool); keep {
				out = append(out, it)
			}
		}
		return okEv(c, map[string]any{"list": out}), nil
	case "data.pick":
		v, err := expr("object")
		if err != nil {
			return bad(err)
		}
		obj, _ := v.(map[string]any)
		out := map[string]any{}
		keys, _ := n.Config["keys"].([]any)
		for _, k := range keys {
			if x, ok := obj[fmt.Sprint(k)]; ok {
				out[fmt.Sprint(k)] = x
			}
		}
		return okEv(c, map[string]any{"object": out}), nil
	case "data.set":
		v, err := expr("object")
		if err != nil {
			return bad(err)
		}
		val, err := expr("value")
		if err != nil {
			return bad(err)
		}
		obj, _ := v.(map[string]any)
		root := map[string]any{}
		for k, x := range obj {
			root[k] = x
		}
		cur := root
		parts := strings.Split(fmt.Sprint(n.Config["path"]), ".")
		for _, p := range parts[:len(parts)-1] {
			next, ok := cur[p].(map[string]any)
			cp := map[string]any{}
			if ok {
				for k, x := range next {
					cp[k] = x
				}
			}
			cur[p] = cp
			cur = cp
		}
		cur[parts[len(parts)-1]] = val
		return okEv(c, map[string]any{"object": root}), nil
	case "data.validate":
		v, err := expr("value")
		if err != nil {
			return bad(err)
		}
		schema, err := flow.CompileSchema(n.Config["schema"])
		if err != nil {
			return failEv(c, CodeConfig, "schema: "+err.Error(), true, nil), nil
		}
		// As JSON: the schema judges the value a later node would read.
		var inst any
		if b, err := json.Marshal(v); err != nil || json.Unmarshal(b, &inst) != nil {
			return failEv(c, CodeConfig, "value is not JSON", true, nil), nil
		}
		errs := []string{}
		if err := schema.Validate(inst); err != nil {
			errs = append(errs, render.Clip(err.Error(), 500))
		}
		// An invalid value is an output, not a failure: the flow routes
		// on nodes.<id>.valid (GitHub Actions' and n8n's "if" after a check).
		return okEv(c, map[string]any{"valid": len(errs) == 0, "errors": errs}), nil
	case "system.state.get":
		v, err := tx.FlowState(ctx, w.row.Flow, fmt.Sprint(n.Config["key"]))
		if errors.Is(err, core.ErrNotFound) {
			return okEv(c, map[string]any{"value": nil, "found": false}), nil
		}
		if err != nil {
			return flow.Event{}, err
		}
		var x any
		_ = json.Unmarshal(v, &x)
		return okEv(c, map[string]any{"value": x, "found": true}), nil
	case "system.state.set":
		v, err := expr("value")
		if err != nil {
			return bad(err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return bad(err)
		}
		tx.QueueSetFlowState(w.row.Flow, fmt.Sprint(n.Config["key"]), b)
		return okEv(c, map[string]any{"ok": true}), nil
	}
	return failEv(c, CodeUnsupported, n.Type+" is not run by this runtime yet (docs/flows.md § Not yet)", true, nil), nil
}
