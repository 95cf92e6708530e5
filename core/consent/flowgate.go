package consent

import (
	"crypto/ed25519"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/policy"
)

// The flow execution gate: whether one step of a flow run may run (or be
// skipped, or be marked done) without a person's tap. Gate is a pure
// function of the request, the run as the flows runtime sees it, the
// switches (config flows.*) and the run's consents; the runtime reads
// those in its transaction, calls Gate, and — on "" for OpRun — counts the
// consent's use and approves the step's action in that same transaction
// (core/decide's ApproveInRun). A refusal is a Code, audited by the caller
// and shown in plain words (Code.Words).

// Switches are the operator's flow switches, both off by default.
type Switches struct {
	// RunWrites (flows.run_writes) lets a request change a run: run a step
	// under a consent, skip it, mark it done.
	RunWrites bool
	// Automatable (flows.automatable_execution) lets a step run under a
	// consent instead of asking with a card.
	Automatable bool
}

// Offered reports whether a run's consent card may be offered at all.
func (s Switches) Offered() bool { return s.RunWrites && s.Automatable }

// Op is what a request asks for a step.
type Op string

const (
	// OpRun: run the step's action under a consent, without a card.
	OpRun Op = "run"
	// OpSkip: skip the step, for one of SkipReasons.
	OpSkip Op = "skip"
	// OpDone: mark the step done (needs verified evidence when the step
	// requires it).
	OpDone Op = "done"
)

// SkipReasons are the only reasons a step may be skipped for: never free
// text, so a skip can be counted and audited by kind.
var SkipReasons = []string{"policy", "not_applicable", "blocked_dependency"}

// Request is one step's request to the gate.
type Request struct {
	Op Op
	// Run is the run's id; Node the step's node id in the pinned flow.
	Run  string
	Node string
	// Step names this attempt of the node for in-flight idempotency
	// ("node/iteration/attempt"): the same (run, step, consent) asked
	// twice answers with the first execution.
	Step string
	// Consent names the consent the request uses ("": any of the run's).
	Consent string
	// SkipReason is OpSkip's reason, one of SkipReasons.
	SkipReason string

	// Action is the step's canonical action (OpRun), Risk the policy's
	// risk for it and PolicyBlocked whether the policy blocks it.
	Action        core.Action
	Risk          cards.Risk
	PolicyBlocked bool
	// Lane is where the action runs: a sandbox network mode (LaneOf, the
	// default when "") or a model endpoint ("model:NAME").
	Lane string
	// Cost is the step's cost in units (0: UnitsPerAction).
	Cost int
	// ExternalGrant: the step was asked for by an external agent on the
	// strength of its grant (MCP). A grant never stands in for a consent.
	ExternalGrant bool
}

// RunFacts is the run as the flows runtime sees it, read in the
// transaction that acts on the gate's answer.
type RunFacts struct {
	// Found: the run exists (and the caller may see it).
	Found bool
	// InProgress: the run is running (not finished, failed or stopped).
	InProgress bool
	// Flow and FlowVersion are the run's flow and its pinned version;
	// FlowFound whether that version is still loadable.
	Flow        string
	FlowVersion string
	FlowFound   bool
	// Step is the requested node in the run.
	Step StepFacts
}

// StepFacts is one node of a run.
type StepFacts struct {
	// Found: the node exists in the pinned flow.
	Found bool
	// Automatable: a consent may run it (an action node whose policy does
	// not ask for a person every time).
	Automatable bool
	// Ready: the node is on the frontier (its incoming edges decided, the
	// machine lets it start).
	Ready bool
	// Busy: another attempt of the node is in progress.
	Busy bool
	// EvidenceRequired: the node is done only with verified evidence;
	// Verified whether it has it; HumanReview whether its verification is
	// a person's review (never automatic).
	EvidenceRequired bool
	Verified         bool
	HumanReview      bool
}

// maxField bounds each of a request's names, so a hostile request costs
// nothing to refuse.
const maxField = 256

// Validate checks a request's shape: BadRequest when it is malformed.
func (r Request) Validate() Code {
	if !name(r.Run) || !name(r.Node) || !name(r.Step) || (r.Consent != "" && !name(r.Consent)) {
		return BadRequest
	}
	switch r.Op {
	case OpRun:
		if r.SkipReason != "" || r.Cost < 0 || r.Action.Tool == "" || len(r.Action.Argv) == 0 || !name(r.lane()) {
			return BadRequest
		}
	case OpSkip:
		if !slices.Contains(SkipReasons, r.SkipReason) {
			return BadRequest
		}
	case OpDone:
		if r.SkipReason != "" {
			return BadRequest
		}
	default:
		return BadRequest
	}
	return ""
}

// ValidName reports whether s may name a run, a step or a consent in a
// request (what Validate checks): callers skip looking up what no request
// could name.
func ValidName(s string) bool { return name(s) }

// name reports whether s is a usable identifier: non-empty, bounded,
// valid UTF-8, printable, no spaces.
func name(s string) bool {
	if s == "" || len(s) > maxField || !utf8.ValidString(s) {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) < 0
}

func (r Request) lane() string {
	if r.Lane != "" {
		return r.Lane
	}
	return LaneOf(r.Action)
}

// Units is what the step costs: Cost, or UnitsPerAction when unset.
func (r Request) Units() int {
	if r.Cost == 0 {
		return UnitsPerAction
	}
	return r.Cost
}

// Gate decides a step's request: for OpRun the consent (of cs, the run's
// consents or the one the request names) that lets it run now, else the
// refusal code; for OpSkip and OpDone "" when the run may be changed so.
// The order puts the operator's switches first, then the request, the
// policy, the run, the step and last the consent: the first reason a
// careful operator would give. Gate never counts a use (ApproveInRun does,
// in the caller's transaction).
func Gate(sw Switches, pub ed25519.PublicKey, r Request, run RunFacts, cs []Consent, now time.Time) (Consent, Code) {
	switch {
	case !sw.RunWrites:
		return Consent{}, RunWritesDisabled
	case r.Op == OpRun && !sw.Automatable:
		return Consent{}, AutomatableDisabled
	}
	if code := r.Validate(); code != "" {
		return Consent{}, code
	}
	if r.Op == OpRun && (r.PolicyBlocked || !coverableRisk(r.Risk) || policy.Opaque(r.Action.Argv[0])) {
		return Consent{}, PolicyForbids
	}
	switch {
	case !run.Found:
		return Consent{}, UnknownRun
	case !run.InProgress:
		return Consent{}, RunNotInProgress
	case !run.FlowFound:
		return Consent{}, UnknownFlow
	case !run.Step.Found:
		return Consent{}, BadRequest
	case r.Op == OpRun && !run.Step.Automatable:
		return Consent{}, NotAutomatable
	case !run.Step.Ready:
		return Consent{}, OutOfOrder
	case r.Op != OpDone && run.Step.Busy:
		// A step being executed cannot be skipped (or run again); marking
		// it done needs its verified evidence, checked next.
		return Consent{}, InProgress
	case r.Op == OpRun && run.Step.HumanReview:
		return Consent{}, VerificationUnsatisfied
	case r.Op == OpDone && run.Step.EvidenceRequired && (!run.Step.Verified || run.Step.HumanReview):
		return Consent{}, VerificationUnsatisfied
	}
	if r.Op != OpRun {
		return Consent{}, ""
	}
	if r.ExternalGrant {
		return Consent{}, Required
	}
	why := Required
	for _, c := range cs {
		if r.Consent != "" && c.ID != r.Consent {
			continue
		}
		code := c.CheckRun(pub, r, run, now)
		if code == "" {
			return c, ""
		}
		if code != Required && why == Required {
			why = code
		}
	}
	return Consent{}, why
}

// StepUse is one use of a run consent by a flow step, as the caller's
// transaction writes it in one statement (core/store's
// ApproveStepUnderConsent): the use of Consent costing Units, the
// in-flight row (Run, Step) naming Approval, and the request approved by
// By with its freshly minted Token, whose Nonce and TokenID are consumed.
type StepUse struct {
	Consent   string
	Units     int
	Run, Step string
	Approval  core.ApprovalID
	By        core.IdentityID
	Token     []byte
	Nonce     []byte
	TokenID   string
}

// StepUsed is what that statement did: Used (the use counted; Uses and
// Units are the counts after it), Claimed (the in-flight row written),
// Approved (the request moved to approved) and Fresh (the nonce
// consumed), each only when the one before it is true.
type StepUsed struct {
	Uses, Units                    int
	Used, Claimed, Approved, Fresh bool
}

func coverableRisk(r cards.Risk) bool { return r == cards.RiskLow || r == cards.RiskMedium }

// CheckRun says whether c, a run consent, lets r's step run now: "" when
// it does, else the refusal code. A consent of another run (or of a
// conversation) is RunMismatch, whatever else it says.
func (c Consent) CheckRun(pub ed25519.PublicKey, r Request, run RunFacts, now time.Time) Code {
	switch {
	case !coverableRisk(r.Risk):
		return PolicyForbids
	case !Verify(pub, c) || !c.CounterIntact():
		return BadSignature
	case c.Scope != ScopeRun || c.Run != r.Run || c.Flow != run.Flow || c.FlowVersion != run.FlowVersion:
		return RunMismatch
	case !c.CoversStep(r.Node, r.Action):
		return Required
	}
	return c.limits(r.Risk, r.lane(), r.Units(), now)
}

// CoversStep reports whether run consent c's shape covers node running a:
// the node is listed, and the action is the consent's tool with its argv
// rule (exact or prefix) or, without one, one of its exact programs —
// never a shell, an interpreter or a wrapper — receiving only secrets the
// consent names.
func (c Consent) CoversStep(node string, a core.Action) bool {
	if !slices.Contains(c.Nodes, node) || a.Tool != c.Tool || len(a.Argv) == 0 || policy.Opaque(a.Argv[0]) {
		return false
	}
	switch {
	case len(c.Argv) > 0:
		if policy.Opaque(c.Argv[0]) || !argvCovers(c.Argv, c.Prefix, a.Argv) {
			return false
		}
	case !slices.Contains(c.Programs, a.Argv[0]):
		return false
	}
	for _, s := range a.Secrets {
		if !slices.Contains(c.Secrets, s) {
			return false
		}
	}
	return true
}

// RunGrant is what a person's tap on a run's consent card grants.
type RunGrant struct {
	Run, Flow, FlowVersion string
	Nodes                  []string
	Tool                   string
	// Argv and Prefix: an argv rule; else Programs: exact programs.
	Argv     []string
	Prefix   bool
	Programs []string
	Secrets  []string
	MaxRisk  cards.Risk
	Lanes    []string
	MaxUses  int
	CostCap  int
	// TTL is how long it lasts (0: the default; bounded by the maximum).
	TTL time.Duration
}

// ForRun builds the run consent g describes, in conversation conv, given
// by who at now (bounded by lim). It refuses what no consent may cover:
// a risk above medium, a shell, interpreter or wrapper, no nodes, no argv
// rule and no programs. The caller signs it (Sign) and stores it.
func ForRun(id string, g RunGrant, conv, who string, now time.Time, lim Limits) (Consent, error) {
	if !coverableRisk(g.MaxRisk) || g.Run == "" || g.Flow == "" || len(g.Nodes) == 0 || g.Tool == "" ||
		(len(g.Argv) == 0 && len(g.Programs) == 0) || g.MaxUses <= 0 || g.CostCap <= 0 {
		return Consent{}, ErrNotCoverable
	}
	programs := g.Programs
	if len(g.Argv) > 0 {
		programs = g.Argv[:1]
	}
	for _, p := range programs {
		if policy.Opaque(p) {
			return Consent{}, ErrNotCoverable
		}
	}
	ttl := g.TTL
	if ttl <= 0 {
		ttl = lim.TTL
	}
	if ttl > lim.MaxTTL {
		ttl = lim.MaxTTL
	}
	programs = nil
	if len(g.Argv) == 0 {
		programs = slices.Clone(g.Programs)
	}
	return Consent{
		ID: id, Scope: ScopeRun, Conversation: conv, Run: g.Run, Flow: g.Flow, FlowVersion: g.FlowVersion,
		Nodes: slices.Clone(g.Nodes), Tool: g.Tool, Argv: slices.Clone(g.Argv), Prefix: g.Prefix && len(g.Argv) > 0,
		Programs: programs, Secrets: slices.Clone(g.Secrets), Verify: []byte("[]"), MaxRisk: g.MaxRisk,
		Lanes: slices.Clone(g.Lanes), MaxUses: g.MaxUses, CostCap: g.CostCap, CreatedBy: who,
		CreatedAt: now.UTC().Truncate(time.Microsecond), ExpiresAt: now.Add(ttl).UTC().Truncate(time.Microsecond),
	}, nil
}

// Offer is a run's consent card as sent: the grant it states, signed by
// the gateway when it was offered, so the tap mints exactly what the
// person read — a row edited in the database between the card and the
// tap no longer verifies and mints nothing.
type Offer struct {
	Run          string
	Conversation string
	Grant        RunGrant
	Signature    []byte
	// Status: OfferOpen, OfferAccepted or OfferDeclined; Consent the
	// consent an accepted offer minted.
	Status  string
	Consent string
}

// An offer's states: a run is offered its consent card once.
const (
	OfferOpen     = "offered"
	OfferAccepted = "accepted"
	OfferDeclined = "declined"
)

const offerContext = "silas consent offer v1\n"

// OfferBytes is what an offer's signature covers: a context line, the run
// and the conversation, then RFC 8785 JSON of the grant.
func OfferBytes(run, conv string, g RunGrant) ([]byte, error) {
	return canonical(offerContext, struct {
		Run          string   `json:"run"`
		Conversation string   `json:"conversation"`
		Grant        RunGrant `json:"grant"`
	}{run, conv, g})
}

// SignOffer signs o as offered.
func SignOffer(key ed25519.PrivateKey, o *Offer) error {
	b, err := OfferBytes(o.Run, o.Conversation, o.Grant)
	if err != nil {
		return err
	}
	o.Signature = ed25519.Sign(key, b)
	return nil
}

// VerifyOffer reports whether o is the offer that was signed.
func VerifyOffer(pub ed25519.PublicKey, o Offer) bool {
	b, err := OfferBytes(o.Run, o.Conversation, o.Grant)
	return err == nil && len(o.Signature) == ed25519.SignatureSize && ed25519.Verify(pub, b, o.Signature)
}
