package decide

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
)

// The port the flows runtime calls for a step under a run consent
// (core/consent's Gate). In the transaction that moves the run:
//
//  1. PriorInRun: when (run, step) already ran under a consent, answer
//     with that execution — never propose it again (a retried job, a
//     restart after SIGKILL between the use and the run);
//  2. otherwise propose the step's action as always (the request, its
//     card), then ApproveInRun: the gate decides, and when it allows, the
//     action gets its own single-use token, and the consent's use, the
//     in-flight row, the approval with the token and its nonce are
//     written in one statement — all in that transaction;
//     when it refuses, nothing changes but the audited refusal, and the
//     card asks.
//
// MintRun is the tap on a run's consent card.

// RunTx is the part of the flows runtime's transaction a step under a
// run consent is decided in (core/store's Tx).
type RunTx interface {
	Tx
	// RunConsents reads, locked, the run's consents and the one named.
	RunConsents(ctx context.Context, run, named string) ([]consent.Consent, error)
	// LockRunStep is RunConsents and, read after the lock, whether (run,
	// step) already ran under a consent, in one round trip.
	LockRunStep(ctx context.Context, run, named, step string) ([]consent.Consent, bool, error)
	// InFlight finds the first execution of (run, step) under a consent.
	InFlight(ctx context.Context, run, step, consentID string) (core.ApprovalID, string, bool, error)
	// ApproveStepUnderConsent counts the consent's use by compare-and-swap
	// on its limits, records the in-flight row, approves the request with
	// its token and consumes the token's nonce — in one statement, each
	// part only when the one before it took effect (consent.StepUsed).
	ApproveStepUnderConsent(ctx context.Context, u consent.StepUse) (consent.StepUsed, error)
}

// ErrInFlightRace: another transaction ran the same (run, step) under a
// consent between PriorInRun and ApproveInRun. Roll back and ask again:
// PriorInRun then answers with that execution.
var ErrInFlightRace = errors.New("decide: this flow step already runs under a consent (another transaction was first); ask again")

// ErrRanBefore is ErrInFlightRace as ApproveInRun finds it before
// writing anything: the step's in-flight row, read under the consents'
// lock, says it ran. Nothing of the use was written; the request just
// proposed may be withdrawn and the first execution (PriorInRun) given
// as the answer, in this same transaction. Any other ErrInFlightRace
// must fail the transaction.
var ErrRanBefore = fmt.Errorf("%w (seen before anything was written)", ErrInFlightRace)

// PriorInRun returns the approval of the first execution of run's step
// under a consent, if any.
func (d *Decider) PriorInRun(ctx context.Context, tx RunTx, run, step string) (core.ApprovalID, bool, error) {
	id, _, ok, err := tx.InFlight(ctx, run, step, "")
	if err != nil {
		return "", false, fmt.Errorf("decide: prior execution of %s/%s: %w", run, step, err)
	}
	return id, ok, nil
}

// ApproveInRun approves a — the request just proposed in tx for r's step
// — under one of the run's consents, when the gate allows it (sw, the
// run's facts): the consent's use counted, the token minted and consumed,
// the in-flight row written, the token's entries naming the consent. The
// request's own action and risk are what the gate checks (r's are
// replaced), so a request never runs under a consent checked for another
// action. On a refusal nothing changes but the Result's consent.refused
// note, which the caller writes with the rest of the transaction's
// entries, and the request keeps its card.
func (d *Decider) ApproveInRun(ctx context.Context, tx RunTx, sw consent.Switches, r consent.Request, run consent.RunFacts, a core.ApprovalRequest) (Result, consent.Consent, consent.Code, error) {
	fail := func(err error) (Result, consent.Consent, consent.Code, error) {
		return Result{}, consent.Consent{}, "", fmt.Errorf("decide: approve %s under a run consent: %w", a.ID, err)
	}
	if err := RequestIntact(d.pub, a); err != nil {
		return fail(err)
	}
	if err := json.Unmarshal(a.ActionCanonical, &r.Action); err != nil {
		return fail(err)
	}
	r.Op, r.Risk = consent.OpRun, a.Risk
	// The in-flight row is read after the consents' lock (one round
	// trip): a step that ran meanwhile is seen.
	cs, ran, err := tx.LockRunStep(ctx, r.Run, r.Consent, r.Step)
	if err != nil {
		return fail(err)
	}
	if ran {
		return fail(ErrRanBefore)
	}
	now := tx.Now()
	c, code := consent.Gate(sw, d.pub, r, run, cs, now)
	if code != "" {
		return refusedInRun(r, a, code), consent.Consent{}, code, nil
	}
	// The gate allowed it: the action's own single-use token, then — in
	// one statement, everything in this transaction — the use counted,
	// the in-flight row, the request approved with the token and its
	// nonce consumed. Anything short of all of it fails the transaction,
	// so a use that ran nothing is never committed.
	by := core.IdentityID("consent:" + c.ID)
	tok, raw, err := d.mint(a, by, now)
	if err != nil {
		return fail(err)
	}
	u, err := tx.ApproveStepUnderConsent(ctx, consent.StepUse{Consent: c.ID, Units: r.Units(), Run: r.Run, Step: r.Step, Approval: a.ID,
		By: by, Token: raw, Nonce: tok.Token.Nonce, TokenID: tok.Token.TokenID})
	switch {
	case err != nil:
		return fail(err)
	case !u.Used:
		// Read locked a moment ago: only the clock can have moved.
		return refusedInRun(r, a, consent.Expired), consent.Consent{}, consent.Expired, nil
	case !u.Claimed:
		return fail(ErrInFlightRace)
	case !u.Approved:
		return fail(fmt.Errorf("consent %s: the request was no longer open", c.ID))
	case !u.Fresh:
		return fail(errReplay)
	}
	c.Uses, c.Units = u.Uses, u.Units
	res, err := d.approved(tx, a, by, tok, raw, nil)
	if err != nil {
		return fail(err)
	}
	for _, n := range res.Notes {
		n.Data["consent"] = c.ID
	}
	res.note(audit.KindConsentUsed, map[string]any{"consent": c.ID, "approval": string(a.ID), "run": r.Run, "node": r.Node, "step": r.Step,
		"uses": c.Uses, "max_uses": c.MaxUses, "units": c.Units, "cost_cap": c.CostCap})
	return res, c, "", nil
}

// refusedInRun is a step's refusal under a run consent: nothing changed
// but its consent.refused note.
func refusedInRun(r consent.Request, a core.ApprovalRequest, code consent.Code) Result {
	res := Result{}
	res.note(audit.KindConsentRefused, map[string]any{"approval": string(a.ID), "run": r.Run, "node": r.Node, "step": r.Step,
		"code": string(code), "words": code.Words()})
	return res
}

// ErrNotOffered: run consents are off (flows.run_writes and
// flows.automatable_execution), or the tapper is not an owner.
var ErrNotOffered = errors.New("decide: a run consent is not offered (flows.run_writes and flows.automatable_execution are off, or the tapper is not an owner)")

// MintRun is an owner's tap on a run's consent card: the consent g
// describes, in conversation conv, signed, with its consent.minted note,
// for the caller to store (InsertConsent) in the tap's transaction.
func (d *Decider) MintRun(tx Tx, sw consent.Switches, g consent.RunGrant, conv core.ConversationID, by core.IdentityID, trust core.Trust) (consent.Consent, Note, error) {
	if !sw.Offered() || trust != core.TrustOwner {
		return consent.Consent{}, Note{}, ErrNotOffered
	}
	c, err := consent.ForRun(core.NewID(), g, string(conv), string(by), tx.Now(), d.runLimits())
	if err != nil {
		return consent.Consent{}, Note{}, fmt.Errorf("decide: run consent for %s: %w", g.Run, err)
	}
	if err := consent.Sign(d.cfg.Key, &c); err != nil {
		return consent.Consent{}, Note{}, err
	}
	return c, Note{Kind: audit.KindConsentMinted, Data: map[string]any{"consent": c.ID, "scope": string(c.Scope), "run": c.Run,
		"flow": c.Flow, "flow_version": c.FlowVersion, "nodes": c.Nodes, "programs": c.Programs,
		"argv": (core.Action{Argv: c.Argv}).CommandLine(), "max_risk": string(c.MaxRisk), "lanes": c.Lanes, "max_uses": c.MaxUses,
		"cost_cap": c.CostCap, "expires_at": c.ExpiresAt.Format(time.RFC3339)}}, nil
}

// runLimits are consents.* for a run consent: when standing approvals
// outside flows are off (consents.enabled), a run consent still lasts the
// documented default (1 h, 24 h at most).
func (d *Decider) runLimits() consent.Limits {
	lim := d.cfg.Standing
	if lim.TTL <= 0 {
		lim = consent.Limits{TTL: time.Hour, MaxTTL: 24 * time.Hour}
	}
	return lim
}

// OfferRun is a run's consent card as the flows runtime sends it: g with
// its time set (consents.default_ttl, bounded by consents.max_ttl), signed
// with the gateway key so the tap mints exactly what the card states, and
// its consent.offered note. Nothing is offered while the flow switches are
// off.
func (d *Decider) OfferRun(sw consent.Switches, g consent.RunGrant, conv core.ConversationID) (consent.Offer, Note, error) {
	if !sw.Offered() {
		return consent.Offer{}, Note{}, ErrNotOffered
	}
	lim := d.runLimits()
	if g.TTL <= 0 {
		g.TTL = lim.TTL
	}
	g.TTL = min(g.TTL, lim.MaxTTL)
	o := consent.Offer{Run: g.Run, Conversation: string(conv), Grant: g, Status: consent.OfferOpen}
	if err := consent.SignOffer(d.cfg.Key, &o); err != nil {
		return consent.Offer{}, Note{}, err
	}
	return o, Note{Kind: audit.KindConsentOffered, Data: map[string]any{"run": g.Run, "flow": g.Flow, "flow_version": g.FlowVersion,
		"nodes": g.Nodes, "programs": g.Programs, "max_risk": string(g.MaxRisk), "lanes": g.Lanes, "max_uses": g.MaxUses,
		"cost_cap": g.CostCap, "ttl": g.TTL.String()}}, nil
}

// OfferIntact reports whether o is an offer this gateway signed.
func (d *Decider) OfferIntact(o consent.Offer) bool { return consent.VerifyOffer(d.pub, o) }
