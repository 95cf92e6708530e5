// Package flowconsent is the flow runtime's Approver (core/flowrun) for
// run consents (core/consent): an action node's proposal goes the way of
// /run — trust, policy, the signed request — and, where the policy would
// show a card, the flow execution gate (consent.Gate) decides whether one
// of the run's consents covers the step; if so the step is approved on
// the consent's behalf with its own single-use token (core/decide's
// ApproveInRun) and a line replaces the card, else the card asks.
//
// flowconsent never approves what the policy blocks or does not send to
// a person, never lets a conversation's standing approval cover a flow
// step, and does nothing at all while flows.run_writes or
// flows.automatable_execution is off (every action asks with a card).
package flowconsent

import (
	"context"
	"fmt"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/flowrun"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
)

// Approver approves action nodes under the run's consents.
type Approver struct {
	// Steps is the proposing port (without standing approvals: those are
	// a conversation's, never a flow's).
	Steps    propose.Steps
	Decider  *decide.Decider
	Switches consent.Switches
}

var _ flowrun.Approver = Approver{}

// StepKey is the in-flight key of an attempt: node, iteration, attempt.
func StepKey(req flowrun.ActionRequest) string {
	return fmt.Sprintf("%s/%d/%d", req.Node, req.Iteration, req.Attempt)
}

// Propose implements flowrun.Approver. The runtime calls it only when
// the machine starts an attempt, so the step is on the run's frontier,
// not busy, the run in progress and its flow pinned: those facts are the
// machine's and are passed to the gate as such.
func (ap Approver) Propose(ctx context.Context, tx *store.Tx, req flowrun.ActionRequest) (propose.Step, error) {
	if !ap.Switches.Offered() || ap.Decider == nil {
		return ap.Steps.ProposeUnder(ctx, tx, req.Owner, req.Origin, req.Action, nil)
	}
	var rtx decide.RunTx = tx
	key := StepKey(req)
	if id, ok, err := ap.Decider.PriorInRun(ctx, rtx, req.Run, key); err != nil || ok {
		// Asked again (a retried job): the first execution answers.
		return propose.Step{Approval: id}, err
	}
	facts := consent.RunFacts{Found: true, InProgress: true, Flow: req.Flow, FlowVersion: req.Version, FlowFound: true,
		Step: consent.StepFacts{Found: true, Automatable: true, Ready: true}}
	under := func(ctx context.Context, _ propose.Tx, a core.ApprovalRequest) (decide.Result, string, *decide.Note, error) {
		r, c, code, err := ap.Decider.ApproveInRun(ctx, rtx, ap.Switches, consent.Request{Run: req.Run, Node: req.Node, Step: key}, facts, a)
		if err != nil {
			return decide.Result{}, "", nil, err
		}
		if code != "" {
			return decide.Result{}, "", &r.Notes[0], nil
		}
		return r, render.RunConsentLine(req.Node, c), nil, nil
	}
	return ap.Steps.ProposeUnder(ctx, tx, req.Owner, req.Origin, req.Action, under)
}
