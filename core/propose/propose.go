// Package propose is the proposer: one action the agent (or a task's
// step) proposes, with the proposer's trust, becomes either a refusal that
// says why, or an approval request — policy evaluated, the request signed
// as proposed and its card drawn — that a person decides by a tap or, when
// policy allows the action, the gateway approves on the policy's behalf
// through the decider, so execution still passes through a signed,
// single-use token.
//
// propose never writes or commits anything itself (the caller queues the
// request and its card in its own transaction), never executes, never
// talks to a platform, and never approves an action the policy does not
// allow: a person's approval is the decider's, on a tap.
package propose

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/render"
)

// Approver approves a request on the policy's behalf, inside the caller's
// transaction (core/decide's Decider).
type Approver interface {
	Approve(ctx context.Context, tx decide.Tx, a core.ApprovalRequest, by core.IdentityID) (decide.Result, error)
}

// Config wires a Proposer. Key, Policy and Approver are required.
type Config struct {
	// Key signs each request as proposed.
	Key    ed25519.PrivateKey
	Policy *policy.Policy
	// Approver approves what policy allows.
	Approver Approver
	// ApprovalTTL is how long a card can be decided (default 5 minutes).
	ApprovalTTL time.Duration
	// Preview is how much of a long output a card shows.
	Preview int
	// PreviewLink, when set, is the secure page showing a request's whole
	// preview ("" while there is none): a card whose preview is longer
	// than it shows links to it.
	PreviewLink func(core.ApprovalID) string
	// StandingTTL is how long a standing approval given from a card lasts
	// (its "Allow this for 1 h" choice, core/decide); 0: not offered.
	StandingTTL time.Duration
	Now         func() time.Time
}

// Proposer turns proposed actions into approval requests.
type Proposer struct{ cfg Config }

// New checks cfg, fills defaults and builds a Proposer.
func New(cfg Config) (*Proposer, error) {
	if len(cfg.Key) != ed25519.PrivateKeySize || cfg.Policy == nil || cfg.Approver == nil {
		return nil, errors.New("propose: Key, Policy and Approver are required")
	}
	if cfg.ApprovalTTL <= 0 {
		cfg.ApprovalTTL = 5 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Proposer{cfg: cfg}, nil
}

// Proposal is what proposing one action produced, as a plain value: the
// caller writes the request, its card and the notes in its transaction.
type Proposal struct {
	// Request is the signed approval request; nil: not proposed.
	Request *core.ApprovalRequest
	// Card is the request's card.
	Card *cards.Card
	// Reply is what the proposer is told when the action was not
	// proposed ("" when it was).
	Reply string
	// Refused is why it was not proposed, for a task's record: the reply,
	// or the policy's own words when policy blocks the action.
	Refused string
	// Notes are the proposal's audit entries; the caller writes them with
	// the proposer as actor, in its conversation.
	Notes []decide.Note
	// Decision labels the policy's decision for metrics ("external" when
	// trust refused it; "" when policy was not asked).
	Decision string
	// Auto is the rule that allows the action: approve it on the policy's
	// behalf (Approve) in the transaction that queued the request.
	Auto string
}

func (p *Proposal) note(kind audit.Kind, data map[string]any) {
	p.Notes = append(p.Notes, decide.Note{Kind: kind, Data: data})
}

// refuse records why pa was not proposed: msg for the proposer and, for a
// task's record, the policy's block when it blocks the action anyway.
func (pr *Proposer) refuse(p Proposal, trust core.Trust, a core.Action, format string, args ...any) Proposal {
	p.Reply = fmt.Sprintf(format, args...)
	p.Refused = p.Reply
	if trust != core.TrustExternal {
		if res := pr.cfg.Policy.Evaluate(a); res.Decision == policy.Blocked {
			p.Refused = "blocked by policy: " + blockReason(res)
		}
	}
	return p
}

func blockReason(res policy.Result) string {
	if res.Reason == "" {
		return "the risk policy blocks it"
	}
	return res.Reason
}

// Propose applies trust and policy to one action proposed in st (seq 0:
// a task's step) by someone of the given trust and, unless it is refused,
// prepares its signed approval request and card.
func (pr *Proposer) Propose(st core.StoredTurn, trust core.Trust, pa core.ProposedAction) Proposal {
	t := st.Turn
	a := pa.Action
	line := a.CommandLine()
	var p Proposal
	if trust == core.TrustExternal {
		p.Decision = "external"
		p.note(audit.KindPolicyRefused, map[string]any{"seq": st.Seq, "reason": "external trust", "tool": a.Tool})
		return pr.refuse(p, trust, a, "I can't run actions for you: your identity (%s) is not trusted here. The owner can pair it with `silas pair`.", t.Sender)
	}
	if !complete(a) {
		return pr.refuse(p, trust, a, "That action is incomplete, so I did not propose it.")
	}
	for i, c := range a.Verify {
		if err := c.Validate(); err != nil {
			return pr.refuse(p, trust, a, "Verification check %d is invalid (%v), so I did not propose the action.", i+1, err)
		}
	}
	res := pr.cfg.Policy.Evaluate(a)
	p.Decision = string(res.Decision)
	p.note(audit.KindPolicyDecided, map[string]any{"seq": st.Seq, "tool": a.Tool, "command": line, "decision": string(res.Decision),
		"risk": string(res.Risk), "rule": res.Rule})
	if res.Decision == policy.Blocked {
		p.Reply = fmt.Sprintf("Blocked: `%s` — %s. Nothing was run.", line, blockReason(res))
		p.Refused = "blocked by policy: " + blockReason(res)
		return p
	}
	canonical, err := a.Canonical()
	if err != nil {
		return pr.refuse(p, trust, a, "I could not prepare that action: %v.", err)
	}
	hash, _ := a.Hash()
	now := pr.cfg.Now()
	req := core.ApprovalRequest{
		ID: core.ApprovalID(core.NewID()), Channel: t.Channel, Conversation: t.Conversation, Requester: t.Sender, TurnSeq: st.Seq,
		ActionCanonical: canonical, ActionHash: hash, Intent: pa.Intent, Rationale: pa.Rationale, Risk: res.Risk,
		Approvers: res.Approvers, Status: core.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(pr.cfg.ApprovalTTL),
		Preview: render.Preview(a, pa.Step),
	}
	if res.Decision == policy.Allow {
		// Allowed by policy: the gateway approves on the policy's behalf, so
		// execution still passes through a signed, single-use token.
		req.Approvers = []string{"policy:" + res.Rule}
	}
	// Signed as proposed: a tap decides only this request, as stored now.
	if err := decide.SignRequest(pr.cfg.Key, &req); err != nil {
		return pr.refuse(p, trust, a, "I could not prepare that action: %v.", err)
	}
	p.Request, p.Card = &req, render.Approval(req, nil, pr.cfg.Preview)
	if res.Decision == policy.Allow {
		p.Auto = res.Rule
		p.note(audit.KindApprovalRequested, map[string]any{"approval": string(req.ID), "command": line, "risk": string(req.Risk), "auto": true})
		return p
	}
	p.Card = render.OfferStanding(p.Card, req, pr.cfg.StandingTTL)
	if pr.cfg.PreviewLink != nil && p.Card.Link == nil && render.PreviewClipped(req) {
		if u := pr.cfg.PreviewLink(req.ID); u != "" {
			p.Card.Link = &cards.Link{Label: "Full preview", URL: u}
		}
	}
	p.note(audit.KindApprovalRequested, map[string]any{"approval": string(req.ID), "command": line, "risk": string(req.Risk),
		"approvers": req.Approvers, "expires_at": req.ExpiresAt.UTC().Format(time.RFC3339)})
	return p
}

// complete: the action names what it runs — a program, or an MCP server's
// tool with the pinned definition it is bound to (and nothing of a
// program, which an MCP call never runs).
func complete(a core.Action) bool {
	if a.Tool == core.ToolMCP {
		return a.Server != "" && a.Name != "" && a.DefinitionHash != "" && len(a.Argv) == 0 && len(a.Secrets) == 0 && !a.Network
	}
	return a.Tool != "" && len(a.Argv) > 0 && a.Server == "" && a.Name == "" && len(a.Arguments) == 0 && a.DefinitionHash == "" && !a.ReadOnlyHint
}

// Approve approves an allowed proposal (Auto set) on the policy's behalf,
// in the transaction that queued its request: the request is read back
// locked and decided by the Approver, as a tap would be.
func (pr *Proposer) Approve(ctx context.Context, tx decide.Tx, p Proposal) (decide.Result, error) {
	if p.Request == nil || p.Auto == "" {
		return decide.Result{}, errors.New("propose: approve: the proposal is not allowed by policy")
	}
	a, err := tx.GetApproval(ctx, p.Request.ID)
	if err != nil {
		return decide.Result{}, fmt.Errorf("propose: approve: %w", err)
	}
	return pr.cfg.Approver.Approve(ctx, tx, a, core.IdentityID("policy:"+p.Auto))
}
