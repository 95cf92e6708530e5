package flowrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
)

// Step requests: /flow skip <run> <step> <reason> and /flow done <run>
// <step>, a person's request to move a run past one of its steps. The
// flow execution gate (core/consent's Gate, a pure function) decides from
// the run as the machine sees it, read in the turn's transaction with the
// run's row locked; a refusal is audited (consent.refused with its code)
// and answered in plain words, and changes nothing; an accepted request
// becomes the machine's event, stored in the same transaction.
//
// A request never marks work done on a person's word: a done is accepted
// for an action (or any node with a verification) only once its
// execution verified — the event is the executor's verified outcome, as
// the step job would deliver it — and, without evidence, only for a wait
// (the person says what it waited for happened). A gate is answered, not
// marked done. A skip stops the step's attempt while it only waits (its
// card is closed); a step being executed cannot be skipped.

// Skip answers /flow skip <run> <step> <reason>, inside the turn's
// transaction.
func (r *Runtime) Skip(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, out core.TaskOut) error {
	f := strings.Fields(arg)
	if len(f) != 3 {
		return r.refuseStep(st, consent.Request{Op: consent.OpSkip}, "", consent.BadRequest, out,
			"Usage: /flow skip <run> <step> <reason>, the reason one of "+strings.Join(consent.SkipReasons, ", ")+".")
	}
	return r.stepRequest(ctx, tx, st, trust, consent.Request{Op: consent.OpSkip, Run: f[0], Node: f[1], SkipReason: f[2]}, out)
}

// Done answers /flow done <run> <step>, inside the turn's transaction.
func (r *Runtime) Done(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, out core.TaskOut) error {
	f := strings.Fields(arg)
	if len(f) != 2 {
		return r.refuseStep(st, consent.Request{Op: consent.OpDone}, "", consent.BadRequest, out,
			"Usage: /flow done <run> <step> — a wait, or a step whose verification passed.")
	}
	return r.stepRequest(ctx, tx, st, trust, consent.Request{Op: consent.OpDone, Run: f[0], Node: f[1]}, out)
}

// refuseStep audits and answers a refused step request.
func (r *Runtime) refuseStep(st core.StoredTurn, req consent.Request, run string, code consent.Code, out core.TaskOut, usage string) error {
	data := map[string]any{"op": string(req.Op), "node": render.Clip(req.Node, 64), "code": string(code)}
	if run != "" {
		data["run"] = run
	}
	if req.SkipReason != "" {
		data["reason"] = render.Clip(req.SkipReason, 64)
	}
	out.Audit(audit.Entry{Kind: audit.KindConsentRefused, Actor: string(st.Turn.Sender), Conversation: string(st.Turn.Conversation), Data: data})
	verb := "skipped"
	if req.Op == consent.OpDone {
		verb = "marked done"
	}
	line := fmt.Sprintf("Not %s: %s (%s).", verb, code.Words(), code)
	if usage != "" {
		line += " " + usage
	}
	out.Reply("%s", line)
	return nil
}

// stepRequest decides req in tx and, when the gate allows it, writes the
// step's event.
func (r *Runtime) stepRequest(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, req consent.Request, out core.TaskOut) error {
	var (
		facts consent.RunFacts
		w     *write
		ev    *flow.Event // a done's evidence: the verified outcome
	)
	req.Step = req.Node
	if consent.ValidName(req.Run) {
		found, err := r.st.FindFlowRun(ctx, st.Turn.Conversation, req.Run)
		switch {
		case errors.Is(err, core.ErrNotFound):
		case err != nil:
			return err
		default:
			run, err := tx.LockFlowRun(ctx, found.ID)
			if err != nil {
				return err
			}
			if !mayCommand(run, st.Turn.Sender, trust) {
				out.Reply("Only %s or an owner can steer run %s; nothing was changed.", run.Requester, ShortID(run.ID))
				return nil
			}
			facts = consent.RunFacts{Found: true, InProgress: !run.Final(), Flow: run.Flow, FlowVersion: run.Version}
			w, err = r.decode(run)
			if err != nil {
				r.log.Warn("flowrun: step request: the run's pinned flow", slog.String("run", run.ID), slog.Any("err", err))
			} else {
				facts.FlowFound = true
				if facts.Step, ev, err = r.stepFacts(ctx, tx, w, req); err != nil {
					return err
				}
				if ns := w.fr.Nodes[req.Node]; ns != nil {
					req.Step = stepKey(req.Node, ns.Iteration, ns.Attempt)
				}
			}
		}
	}
	runID := ""
	if w != nil {
		runID = w.row.ID
	}
	if _, code := consent.Gate(r.cfg.Switches, nil, req, facts, nil, tx.Now()); code != "" {
		return r.refuseStep(st, req, runID, code, out, "")
	}
	ns := w.fr.Nodes[req.Node]
	by := string(st.Turn.Sender)
	w.out = out
	data := map[string]any{"node": req.Node, "iteration": ns.Iteration, "attempt": ns.Attempt, "by": by}
	if req.Op == consent.OpSkip {
		outp, err := json.Marshal(map[string]any{"skipped": true, "reason": req.SkipReason, "by": by})
		if err != nil {
			return err
		}
		w.queue = []flow.Event{{Kind: flow.EvSkip, Node: req.Node, Iteration: ns.Iteration, Attempt: ns.Attempt, Reason: req.SkipReason, Output: outp}}
		data["reason"] = req.SkipReason
		out.Audit(w.entry(audit.KindFlowStepSkipped, data))
		out.Reply("%s", fmt.Sprintf("Skipped %s of run %s (%s); the run goes on past it.", req.Node, ShortID(w.row.ID), req.SkipReason))
		return r.commitTurn(ctx, tx, w, out)
	}
	if ev == nil {
		// A wait: the person says what it waited for happened.
		outp, err := json.Marshal(map[string]any{"waited": "done", "by": by})
		if err != nil {
			return err
		}
		ev = &flow.Event{Kind: flow.EvSucceeded, Node: req.Node, Iteration: ns.Iteration, Attempt: ns.Attempt, Output: outp}
	} else {
		data["evidence"] = "verified"
	}
	w.queue = []flow.Event{*ev}
	out.Audit(w.entry(audit.KindFlowStepDone, data))
	out.Reply("%s", fmt.Sprintf("Marked %s of run %s done; the run goes on.", req.Node, ShortID(w.row.ID)))
	return r.commitTurn(ctx, tx, w, out)
}

// stepFacts is req's step as the gate sees it: on the frontier when it is
// ready, running or waiting to retry (a done, without evidence, only for
// a running wait); busy while its action is approved (executing), its
// child runs run or its agent works; evidence required for every node but a wait (a gate's
// is a person's answer). For an action with a verified execution, ev is
// that outcome.
func (r *Runtime) stepFacts(ctx context.Context, tx *store.Tx, w *write, req consent.Request) (consent.StepFacts, *flow.Event, error) {
	n := w.p.f.Node(req.Node)
	if n == nil {
		return consent.StepFacts{}, nil, nil
	}
	kind, action := r.kinds[n.Type]
	sf := consent.StepFacts{Found: true, Automatable: action, EvidenceRequired: n.Type != "control.wait", HumanReview: n.Type == "control.gate"}
	ns := w.fr.Nodes[n.ID]
	if ns == nil {
		return sf, nil, nil // the run has not started
	}
	switch ns.Status {
	case flow.NodeReady, flow.NodeBackoff:
		sf.Ready = sf.EvidenceRequired || req.Op != consent.OpDone
	case flow.NodeRunning:
		sf.Ready = true
	}
	if ns.Status != flow.NodeRunning {
		return sf, nil, nil
	}
	if n.Type == "control.subflow" || n.Type == "control.foreach" || n.Type == "agent.run" {
		// Work in progress of its own (child runs, the agent's task).
		sf.Busy = true
		return sf, nil, nil
	}
	if !action {
		return sf, nil, nil
	}
	a, err := tx.FlowAttempt(ctx, w.row.ID, n.ID, ns.Iteration, ns.Attempt)
	if errors.Is(err, core.ErrNotFound) || (err == nil && a.Approval == "") {
		return sf, nil, nil
	}
	if err != nil {
		return sf, nil, err
	}
	ap, err := tx.GetApproval(ctx, a.Approval)
	if err != nil {
		return sf, nil, err
	}
	sf.Busy = ap.Status != core.ApprovalPending && ap.Status != core.ApprovalConfirming
	ev, ok, err := r.actionOutcome(ctx, a, kind.Output)
	if err != nil || !ok || ev.Kind != flow.EvSucceeded {
		return sf, nil, err
	}
	sf.Verified = true
	return sf, &ev, nil
}
