// Package flowconsent is the flow runtime's Approver (core/flowrun) for
// run consents (core/consent): an action node's proposal goes the way of
// /run — trust, policy, the signed request — and, where the policy would
// show a card, the flow execution gate (consent.Gate) decides whether one
// of the run's consents covers the step; if so the step is approved on
// the consent's behalf with its own single-use token (core/decide's
// ApproveInRun) and a line replaces the card, else the card asks — and,
// the first time a run asks for a consent it does not have, the run's
// consent card is sent beside it (Offer). A tap on that card (Taps) mints
// the consent the card states and approves, under it, the run's steps
// already waiting on their cards.
//
// flowconsent never approves what the policy blocks or does not send to
// a person, never lets a conversation's standing approval cover a flow
// step, never mints a consent without an owner's tap on a card the
// gateway signed, and does nothing at all while flows.run_writes or
// flows.automatable_execution is off (every action asks with a card, no
// consent card is offered).
package flowconsent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowrun"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/route"
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

// facts are the run's facts for a step the machine started: the runtime
// calls the Approver only when the machine starts an attempt (so the step
// is on the run's frontier, not busy, the run in progress and its flow
// pinned), and a tap approves only a step still waiting on its card.
func facts(flow, version string) consent.RunFacts {
	return consent.RunFacts{Found: true, InProgress: true, Flow: flow, FlowVersion: version, FlowFound: true,
		Step: consent.StepFacts{Found: true, Automatable: true, Ready: true}}
}

// Propose implements flowrun.Approver.
func (ap Approver) Propose(ctx context.Context, tx *store.Tx, req flowrun.ActionRequest) (propose.Step, error) {
	if !ap.Switches.Offered() || ap.Decider == nil {
		return ap.Steps.ProposeUnder(ctx, tx, req.Owner, req.Origin, req.Action, nil)
	}
	var rtx decide.RunTx = tx
	key := StepKey(req)
	var refused consent.Code
	var proposed core.ApprovalID
	under := func(ctx context.Context, _ propose.Tx, a core.ApprovalRequest) (decide.Result, string, *decide.Note, error) {
		proposed = a.ID
		r, c, code, err := ap.Decider.ApproveInRun(ctx, rtx, ap.Switches, consent.Request{Run: req.Run, Node: req.Node, Step: key},
			facts(req.Flow, req.Version), a)
		if err != nil {
			return decide.Result{}, "", nil, err
		}
		if code != "" {
			refused = code
			return decide.Result{}, "", &r.Notes[0], nil
		}
		return r, render.RunConsentLine(req.Node, c), nil, nil
	}
	p, err := ap.Steps.ProposeUnder(ctx, tx, req.Owner, req.Origin, req.Action, under)
	if errors.Is(err, decide.ErrRanBefore) {
		// Asked again (a retried job): the first execution answers, and
		// the request proposed meanwhile is withdrawn. Looked for only
		// here, not before every step: the check that found it travelled
		// with the proposal and the consents' lock, in one round trip.
		id, ok, perr := ap.Decider.PriorInRun(ctx, rtx, req.Run, key)
		if perr != nil || !ok {
			return propose.Step{}, errors.Join(err, perr)
		}
		tx.QueueWithdrawApproval(proposed)
		return propose.Step{Approval: id}, nil
	}
	if err != nil || refused == "" {
		return p, err
	}
	if refused != consent.Required {
		// The run has a consent and it did not cover this step (revoked,
		// expired, spent…): say so in plain words beside the card.
		err := tx.QueueMessage(req.Origin.Channel, core.OpSend, "r-"+core.NewID(), core.OutMessage{Conversation: req.Origin.Conversation,
			Text: render.RunRefusalLine(req.Node, refused)})
		if err != nil {
			return propose.Step{}, err
		}
		p.Messages++
		if refused == consent.Expired {
			// The run outlived its consent: its card offers a new one.
			n, entry, err := ap.reoffer(ctx, tx, req)
			if err != nil {
				return propose.Step{}, err
			}
			p.Messages += n
			if entry != nil {
				p.Audit = append(p.Audit, *entry)
			}
		}
		return p, nil
	}
	// No consent of the run covers the step: the step asks with its card,
	// and the run is offered its consent card (once).
	n, entry, err := ap.offer(ctx, tx, req)
	if err != nil {
		return propose.Step{}, err
	}
	p.Messages += n
	if entry != nil {
		p.Audit = append(p.Audit, *entry)
	}
	return p, nil
}

// Plan is the grant a run's consent card offers: every action.shell node
// of the pinned flow whose program is fixed in the flow file — the first
// word of its command, not a ${{ }} placeholder, without shell syntax and
// never a shell, an interpreter or a wrapper — running offline, up to
// medium risk, one use (and one unit) per attempt its retry policy allows.
// ok=false when no node qualifies (no card is offered).
func Plan(run core.FlowRun) (consent.RunGrant, bool, error) {
	f, err := flow.Parse(run.File, run.Document, flow.Options{Model: true})
	if err != nil {
		return consent.RunGrant{}, false, fmt.Errorf("flowconsent: run %s: its pinned flow: %w", run.ID, err)
	}
	g := consent.RunGrant{Run: run.ID, Flow: run.Flow, FlowVersion: run.Version, Tool: "shell", MaxRisk: "medium",
		Lanes: []string{consent.LaneOffline}}
	for _, n := range f.Nodes {
		if n.Type != "action.shell" {
			continue
		}
		prog, ok := fixedProgram(n)
		if !ok {
			continue
		}
		g.Nodes = append(g.Nodes, n.ID)
		if !slices.Contains(g.Programs, prog) {
			g.Programs = append(g.Programs, prog)
		}
		g.MaxUses += max(1, n.Policy.Retry.MaxAttempts)
	}
	g.CostCap = g.MaxUses * consent.UnitsPerAction
	return g, len(g.Nodes) > 0, nil
}

// shellMeta is core/flowrun's: a command with any of these (once its
// placeholders are filled) runs as `sh -c`, which no consent covers.
const shellMeta = "|&;<>()$`*?[]{}~\n\"'\\"

// fixedProgram is the program an action.shell node runs, when the flow
// file fixes it.
func fixedProgram(n *flow.Node) (string, bool) {
	cmd, _ := n.Config["command"].(string)
	// The placeholders' values are not known before the run gets there:
	// they may add arguments (a rendered value with shell syntax makes
	// the step `sh -c`, which the gate refuses, and the card asks).
	fixed := cmd
	for {
		i := strings.Index(fixed, "${{")
		if i < 0 {
			break
		}
		j := strings.Index(fixed[i:], "}}")
		if j < 0 {
			return "", false
		}
		fixed = fixed[:i] + "x" + fixed[i+j+2:]
	}
	words := strings.Fields(cmd)
	if len(words) == 0 || strings.Contains(words[0], "${{") || strings.ContainsAny(fixed, shellMeta) || policy.Opaque(words[0]) {
		return "", false
	}
	return words[0], true
}

// offer sends run's consent card, once, to the conversation the run was
// started from: the messages queued and its audit entry (none when the
// run was offered one already, or nothing in it could be covered).
func (ap Approver) offer(ctx context.Context, tx *store.Tx, req flowrun.ActionRequest) (int, *audit.Entry, error) {
	done, err := tx.HasRunConsentOffer(ctx, req.Run)
	if err != nil || done {
		return 0, nil, err
	}
	g, plan, ch, conv, ok, err := ap.planned(ctx, tx, req)
	if err != nil || !ok {
		return 0, nil, err
	}
	o, note, err := ap.Decider.OfferRun(ap.Switches, g, conv)
	if err != nil {
		return 0, nil, err
	}
	if fresh, err := tx.OfferRunConsent(ctx, o); err != nil || !fresh {
		return 0, nil, err
	}
	c := render.RunConsentOffer(o.Grant, o.Grant.TTL)
	if err := tx.QueueMessage(ch, core.OpSend, string(c.ID), core.OutMessage{Conversation: conv, Card: c}); err != nil {
		return 0, nil, err
	}
	n := 1
	if plan.Routed {
		note.Data["routed_to"] = string(conv)
		err := tx.QueueMessage(req.Origin.Channel, core.OpSend, "r-"+core.NewID(), core.OutMessage{Conversation: req.Origin.Conversation,
			Text: render.RunConsentRoutedLine(flowrun.ShortID(req.Run), plan.Copies[0].Identity, ch)})
		if err != nil {
			return 0, nil, err
		}
		n++
	}
	return n, &audit.Entry{Kind: note.Kind, Actor: string(req.Origin.Sender), Conversation: string(req.Origin.Conversation), Data: note.Data}, nil
}

// reoffer opens a run's consent card again, once, when the consent its
// tap minted has expired and the run still asks for one: the card (the
// same message, edited back to its buttons) states a fresh grant for the
// same steps, signed for the conversation it was answered in. A declined
// card is never offered again (the owner chose a card per step), nor is a
// consent whose uses or cost cap are spent: those limits were the owner's.
// Nothing is offered when the card's conversation is no longer where the
// router would send it.
func (ap Approver) reoffer(ctx context.Context, tx *store.Tx, req flowrun.ActionRequest) (int, *audit.Entry, error) {
	old, err := tx.RunConsentOffer(ctx, req.Run)
	if errors.Is(err, core.ErrNotFound) || (err == nil && (old.Status != consent.OfferAccepted || old.Consent == "")) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	cs, err := tx.RunConsents(ctx, req.Run, old.Consent)
	if err != nil {
		return 0, nil, fmt.Errorf("flowconsent: offer again for run %s: %w", req.Run, err)
	}
	i := slices.IndexFunc(cs, func(c consent.Consent) bool { return c.ID == old.Consent })
	if i < 0 || !cs[i].RevokedAt.IsZero() || tx.Now().Before(cs[i].ExpiresAt) {
		return 0, nil, nil
	}
	prev := cs[i]
	g, _, ch, conv, ok, err := ap.planned(ctx, tx, req)
	if err != nil || !ok || string(conv) != old.Conversation {
		return 0, nil, err
	}
	o, note, err := ap.Decider.OfferRun(ap.Switches, g, conv)
	if err != nil {
		return 0, nil, err
	}
	if fresh, err := tx.ReofferRunConsent(ctx, o, old.Consent); err != nil || !fresh {
		return 0, nil, err
	}
	c := render.RunConsentOffer(o.Grant, o.Grant.TTL)
	c.Outcome = "Your consent " + prev.Short() + "… expired; this card offers a new one."
	if err := tx.QueueMessage(ch, core.OpUpdate, string(c.ID), core.OutMessage{Conversation: conv, Card: c}); err != nil {
		return 0, nil, err
	}
	note.Data["again"], note.Data["expired"] = true, prev.ID
	return 1, &audit.Entry{Kind: note.Kind, Actor: string(req.Origin.Sender), Conversation: string(req.Origin.Conversation), Data: note.Data}, nil
}

// planned is the grant a run's consent card offers and where it goes:
// ok=false when nothing in the run could be covered, or no owner can
// receive the card (the step's own card says why, or was refused
// unroutable: a consent card nobody can tap is not sent).
func (ap Approver) planned(ctx context.Context, tx *store.Tx, req flowrun.ActionRequest) (consent.RunGrant, route.Plan, core.ChannelName, core.ConversationID, bool, error) {
	run, err := tx.LockFlowRun(ctx, req.Run)
	if err != nil {
		return consent.RunGrant{}, route.Plan{}, "", "", false, fmt.Errorf("flowconsent: consent card of run %s: %w", req.Run, err)
	}
	g, ok, err := Plan(run)
	if err != nil || !ok {
		return g, route.Plan{}, "", "", false, err
	}
	plan, err := ap.route(ctx, req, g)
	switch {
	case err != nil || plan.Refused != "":
		return g, plan, "", "", false, err
	case plan.Routed:
		return g, plan, plan.Copies[0].Channel, plan.Copies[0].Conversation, true, nil
	}
	return g, plan, req.Origin.Channel, req.Origin.Conversation, true, nil
}

// route plans where a run's consent card goes, as core/route plans an
// approval card (the routing helper's Router, asked the same way): where
// the run was started when someone there may give it (an owner), else to
// an owner's direct conversation — the first copy the plan names, so the
// card is one message with one tap, answered in that conversation — or
// nowhere (Refused) when no owner can receive it. Zero Plan without a
// router: where the run was started.
func (ap Approver) route(ctx context.Context, req flowrun.ActionRequest, g consent.RunGrant) (route.Plan, error) {
	if ap.Steps.Router == nil || ap.Steps.Trust == nil {
		return route.Plan{}, nil
	}
	trust, _ := ap.Steps.Trust.Of(ctx, req.Origin)
	// Only an owner gives a run its consent: the card is planned as an
	// owner's card of the grant's risk, requested by the run's requester.
	a := core.ApprovalRequest{Channel: req.Origin.Channel, Conversation: req.Origin.Conversation, Requester: req.Origin.Sender,
		Approvers: []string{"role:owner"}, Risk: g.MaxRisk}
	plan, err := ap.Steps.Router.Plan(ctx, a, trust)
	if err != nil {
		return route.Plan{}, fmt.Errorf("flowconsent: route the consent card of run %s: %w", req.Run, err)
	}
	if plan.Routed && len(plan.Copies) == 0 {
		plan.Routed = false
	}
	return plan, nil
}

// Questions is a tap handler inside the tap turn's transaction (the
// engine's Questions: the flows runtime's gate cards).
type Questions interface {
	Tap(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, tap core.Tap, out core.TaskOut) (core.TaskTap, error)
}

// Taps answers a tap on a run's consent card, and hands every other card
// to Next (the flows runtime's gates; nil: none).
type Taps struct {
	Approver Approver
	Next     Questions
}

// Tap implements the engine's Questions. Only an owner answers a run's
// consent card, once, in the conversation it was sent to (elsewhere the
// card is unknown); "allow_run" mints the consent the card states —
// signed, stored, audited — and approves under it the run's steps
// waiting on their cards, each with its own single-use token; "decline"
// leaves every step asking.
func (t Taps) Tap(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, tap core.Tap, out core.TaskOut) (core.TaskTap, error) {
	run, ok := strings.CutPrefix(string(tap.Card), render.RunConsentCardPrefix)
	if !ok || t.Approver.Decider == nil {
		if t.Next == nil {
			return core.TaskTap{}, nil
		}
		return t.Next.Tap(ctx, tx, st, trust, tap, out)
	}
	o, err := tx.RunConsentOffer(ctx, run)
	if errors.Is(err, core.ErrNotFound) || (err == nil && o.Conversation != string(st.Turn.Conversation)) {
		return core.TaskTap{}, nil // another conversation's card is unknown here
	}
	if err != nil {
		return core.TaskTap{}, err
	}
	ap := t.Approver
	refuse := func(reason, msg string) (core.TaskTap, error) {
		return core.TaskTap{Handled: true, Refused: reason, Toast: msg}, nil
	}
	switch {
	case tap.Choice != render.RunConsentChoice && tap.Choice != "decline":
		return refuse("bad_choice", "Unknown choice: nothing was changed.")
	case trust != core.TrustOwner:
		return refuse("not_owner", "Only the owner can give a run its consent; nothing was changed.")
	case o.Status != consent.OfferOpen:
		return refuse("already_decided", "That consent card was already answered: nothing was changed.")
	case !ap.Switches.Offered():
		return refuse(string(consent.RunWritesDisabled), "Not given: "+consent.RunWritesDisabled.Words()+".")
	case !ap.Decider.OfferIntact(o):
		out.Audit(audit.Entry{Kind: audit.KindConsentRefused, Actor: string(st.Turn.Sender), Conversation: string(st.Turn.Conversation),
			Data: map[string]any{"run": run, "code": string(consent.BadSignature), "offer": true}})
		return refuse(string(consent.BadSignature), "Not given: the consent card was altered after it was sent and no longer verifies.")
	}
	flowRun, err := tx.LockFlowRun(ctx, run)
	if err != nil {
		return core.TaskTap{}, fmt.Errorf("flowconsent: consent card of run %s: %w", run, err)
	}
	card := render.RunConsentOffer(o.Grant, o.Grant.TTL)
	card.Choices = nil
	if tap.Choice == "decline" {
		// The offer is locked (RunConsentOffer); should the decision
		// still lose, the card is not edited to a state that did not
		// happen.
		if ok, err := tx.DecideRunConsentOffer(ctx, run, consent.OfferDeclined, "", st.Turn.Sender); err != nil {
			return core.TaskTap{}, err
		} else if !ok {
			return refuse("already_decided", "That consent card was already answered: nothing was changed.")
		}
		card.Status, card.Outcome = cards.StatusDeclined, "Declined: each step of the run asks with its own card."
		out.Update(card)
		out.Audit(audit.Entry{Kind: audit.KindConsentDeclined, Actor: string(st.Turn.Sender), Conversation: string(st.Turn.Conversation),
			Data: map[string]any{"run": run}})
		return core.TaskTap{Handled: true, Toast: "Each step of the run asks with its own card."}, nil
	}
	if flowRun.Final() {
		return refuse(string(consent.RunNotInProgress), "Not given: "+consent.RunNotInProgress.Words()+".")
	}
	c, note, err := ap.Decider.MintRun(tx, ap.Switches, o.Grant, st.Turn.Conversation, st.Turn.Sender, trust)
	if err != nil {
		return core.TaskTap{}, err
	}
	if err := tx.InsertConsent(ctx, c); err != nil {
		return core.TaskTap{}, err
	}
	if _, err := tx.DecideRunConsentOffer(ctx, run, consent.OfferAccepted, c.ID, st.Turn.Sender); err != nil {
		return core.TaskTap{}, err
	}
	entry := func(n decide.Note) audit.Entry {
		return audit.Entry{Kind: n.Kind, Actor: string(st.Turn.Sender), Conversation: string(st.Turn.Conversation), Data: n.Data}
	}
	out.Audit(entry(note))
	card.Status, card.Outcome = cards.StatusApproved, "Given: consent "+c.Short()+"… (/consents lists it, with Revoke)."
	out.Update(card)
	// The steps already waiting on their cards run under it now.
	steps, err := tx.OpenRunSteps(ctx, run)
	if err != nil {
		return core.TaskTap{}, err
	}
	var rtx decide.RunTx = tx
	for _, s := range steps {
		a, err := tx.GetApproval(ctx, s.Approval)
		if err != nil {
			return core.TaskTap{}, err
		}
		if a.Task != core.FlowOwner+run {
			continue
		}
		key := fmt.Sprintf("%s/%d/%d", s.Node, s.Iteration, s.Attempt)
		r, used, code, err := ap.Decider.ApproveInRun(ctx, rtx, ap.Switches, consent.Request{Run: run, Node: s.Node, Step: key, Consent: c.ID},
			facts(flowRun.Flow, flowRun.Version), a)
		if err != nil {
			return core.TaskTap{}, err
		}
		for _, n := range r.Notes {
			out.Audit(entry(n))
		}
		if code != "" {
			// Not covered (another program, a shell…): its card asks.
			out.Reply("%s", render.RunRefusalLine(s.Node, code))
			continue
		}
		for _, u := range r.Updates {
			out.Update(u)
		}
		out.Reply("%s", render.RunConsentLine(s.Node, used))
		id := a.ID
		out.After(func() { ap.Steps.Proposed(propose.Step{Approval: id, Approved: true}) })
	}
	return core.TaskTap{Handled: true, Toast: "Consent given: the run's steps it covers run without a card."}, nil
}
