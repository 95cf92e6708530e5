// Package consent is the standing consent: a person's decision, given once
// by a tap, to let one action (an exact argv, or an argv prefix) run
// without a card for a while — in one conversation now, in one flow run
// later — bounded by a risk ceiling (never above medium), lanes (sandbox
// network modes), a use limit, a cost cap in units and an expiry, and
// revocable. A consent is Ed25519-signed at mint over its canonical bytes,
// so a row edited in the database (a wider prefix, a higher cap, a later
// expiry) no longer verifies and is refused.
//
// consent never stands in for an approval token: an action run under a
// consent still gets its own single-use token bound to its exact canonical
// action (core/decide). It never overrides the policy (policy ∩ consent:
// it applies only to actions the policy sends to a person, at low or
// medium risk), never covers a shell, an interpreter or a wrapper
// (core/policy's Opaque), and never writes anything: the store counts uses
// in the caller's transaction. This package is pure, but for a memo of the
// consents whose signature verified (verified.go), which only saves
// verifying an unchanged row again.
package consent

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/canon"
	"github.com/silas-gateway/silas/core/policy"
)

// Scope says what a consent is bound to.
type Scope string

const (
	// ScopeConversation: a standing approval outside flows, valid in one
	// conversation.
	ScopeConversation Scope = "conversation"
	// ScopeRun: a consent for one flow run (its flow, pinned version and
	// nodes), checked by the flow execution gate (Gate).
	ScopeRun Scope = "run"
)

// Lanes: the sandbox network modes an action runs in.
const (
	LaneOffline = "offline"
	LaneNetwork = "network"
)

// LaneOf is the lane an action runs in.
func LaneOf(a core.Action) string {
	if a.Network {
		return LaneNetwork
	}
	return LaneOffline
}

// Code names why a consent did not apply. Each is audited
// (consent.refused) and shown in plain words (Words).
type Code string

const (
	// PolicyForbids: the policy blocks the action, or its risk is above
	// what any consent covers (high, irreversible): it always asks.
	PolicyForbids Code = "execution_forbidden_by_policy"
	// Required: no consent covers the action.
	Required Code = "consent_required"
	// Expired: the covering consent's time is up.
	Expired Code = "consent_expired"
	// Revoked: the covering consent was revoked.
	Revoked Code = "consent_revoked"
	// UsesExhausted: the covering consent's uses are all spent.
	UsesExhausted Code = "uses_exhausted"
	// CostCapped: one more use would pass the consent's cost cap.
	CostCapped Code = "cost_capped"
	// LaneDenied: the action runs in a lane (network mode) the consent
	// does not allow.
	LaneDenied Code = "lane_denied"
	// BadSignature: the stored consent is not the one minted (edited in
	// the database since), or its use counter is below what the audit log
	// records (reset in the database).
	BadSignature Code = "bad_signature"
	// RunMismatch: a run consent used outside its run (another run, a
	// conversation, another flow or pinned version).
	RunMismatch Code = "consent_run_mismatch"

	// The flow execution gate's own refusals (Gate).

	// RunWritesDisabled: flows.run_writes is off — a flow's steps are
	// neither run under a consent nor skipped or marked done by request.
	RunWritesDisabled Code = "run_writes_disabled"
	// AutomatableDisabled: flows.automatable_execution is off — every
	// action of a flow asks with a card.
	AutomatableDisabled Code = "automatable_execution_disabled"
	// NotAutomatable: the step is not one a consent may run (a gate, an
	// agent, a node whose policy says manual).
	NotAutomatable Code = "step_not_automatable"
	// OutOfOrder: the step is not on the run's frontier (its inputs are
	// not all decided yet, or it already finished).
	OutOfOrder Code = "step_out_of_order"
	// InProgress: another attempt of the step is in progress.
	InProgress Code = "step_in_progress"
	// VerificationUnsatisfied: the step requires verified evidence it does
	// not have, or its verification is a person's review, which no
	// consent performs.
	VerificationUnsatisfied Code = "verification_unsatisfied"
	// RunNotInProgress: the run has finished, failed or was stopped.
	RunNotInProgress Code = "run_not_in_progress"
	// UnknownRun: no such run.
	UnknownRun Code = "unknown_run"
	// UnknownFlow: the run's flow, at its pinned version, is not there.
	UnknownFlow Code = "unknown_flow"
	// BadRequest: the request is malformed (an unknown step or operation,
	// a skip without one of the bounded reasons).
	BadRequest Code = "bad_request"
)

// Codes lists every refusal code, in the order the gate checks them.
var Codes = []Code{RunWritesDisabled, AutomatableDisabled, BadRequest, PolicyForbids, UnknownRun, RunNotInProgress, UnknownFlow,
	NotAutomatable, OutOfOrder, InProgress, VerificationUnsatisfied, Required, BadSignature, RunMismatch, Revoked, Expired,
	LaneDenied, UsesExhausted, CostCapped}

// Words is the refusal in plain words, for the person.
func (c Code) Words() string {
	switch c {
	case PolicyForbids:
		return "the policy does not let a standing approval cover it"
	case Required:
		return "no standing approval covers it"
	case Expired:
		return "your standing approval has expired"
	case Revoked:
		return "your standing approval was revoked"
	case UsesExhausted:
		return "your standing approval has no uses left"
	case CostCapped:
		return "your standing approval's cost cap is reached"
	case LaneDenied:
		return "your standing approval does not cover this network mode"
	case BadSignature:
		return "your standing approval was altered after it was given and no longer verifies"
	case RunMismatch:
		return "the consent was given for another run"
	case RunWritesDisabled:
		return "flow run writes are turned off (flows.run_writes), so each step asks with a card"
	case AutomatableDisabled:
		return "running flow steps without a tap is turned off (flows.automatable_execution), so each step asks with a card"
	case NotAutomatable:
		return "this step is not one a consent may run: it needs a person"
	case OutOfOrder:
		return "this step is not next: the steps before it have not finished, or it already ended"
	case InProgress:
		return "this step is already in progress"
	case VerificationUnsatisfied:
		return "this step needs verified evidence it does not have (or a person's review, which neither a consent nor a request can stand in for)"
	case RunNotInProgress:
		return "the run is no longer in progress"
	case UnknownRun:
		return "there is no such run"
	case UnknownFlow:
		return "the run's flow, at the version it started with, is not available"
	case BadRequest:
		return "the request was malformed (a skip needs one of: policy, not_applicable, blocked_dependency)"
	}
	return string(c)
}

// Consent is one standing consent as stored. The fields up to Signature
// are signed at mint; Uses, Units and RevokedAt change afterwards and are
// not.
type Consent struct {
	ID    string `json:"id"`
	Scope Scope  `json:"scope"`
	// Conversation binds a ScopeConversation consent (and names where a
	// run's was given).
	Conversation string `json:"conversation"`
	// Run, Flow, FlowVersion and Nodes bind a ScopeRun consent ("" now).
	Run         string   `json:"run"`
	Flow        string   `json:"flow"`
	FlowVersion string   `json:"flow_version"`
	Nodes       []string `json:"nodes"`
	// Tool and Argv are what it covers: Argv exactly, or (Prefix) any argv
	// that starts with it.
	Tool   string   `json:"tool"`
	Argv   []string `json:"argv"`
	Prefix bool     `json:"prefix"`
	// Programs, for a run consent without an Argv rule, are the exact
	// programs (argv[0]) its nodes may run, with any arguments. Omitted
	// when empty, so a conversation consent signs the bytes it always did.
	Programs []string `json:"programs,omitempty"`
	// Secrets are the secret names a covered action receives (exactly).
	Secrets []string `json:"secrets"`
	// Verify is the canonical JSON of the covered action's checks
	// (exactly: the checks run outside the sandbox).
	Verify json.RawMessage `json:"verify"`
	// MaxRisk is the highest risk covered: low or medium.
	MaxRisk cards.Risk `json:"max_risk"`
	// Lanes are the sandbox network modes allowed (LaneOffline,
	// LaneNetwork).
	Lanes []string `json:"lanes"`
	// MaxUses bounds the uses; CostCap the units (one per action).
	MaxUses int `json:"max_uses"`
	CostCap int `json:"cost_cap"`
	// CreatedBy is the identity whose tap minted it.
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`

	Signature []byte    `json:"-"`
	Uses      int       `json:"-"`
	Units     int       `json:"-"`
	RevokedAt time.Time `json:"-"`
	// AuditedUses and AuditedUnits are the highest counts the audit log
	// records for this consent (its consent.used entries, written in the
	// transaction of each use). The counters are not signed (they change
	// at every use), so a counter reset in the database is caught here:
	// a stored count below the audited one is refused (CounterIntact).
	AuditedUses  int `json:"-"`
	AuditedUnits int `json:"-"`
}

// CounterIntact reports whether c's use and unit counters are at least
// what the audit log says was used: a row whose counter was reset or
// lowered after uses (to get more of them) no longer verifies. The audit
// log is hash-chained under the audit key (core/audit), so its entries
// cannot be removed to match undetected.
func (c Consent) CounterIntact() bool {
	return c.Uses >= c.AuditedUses && c.Units >= c.AuditedUnits
}

// UnitsPerAction is the cost of one action run under a consent.
const UnitsPerAction = 1

// signContext prefixes the signed bytes, so a consent's signature can never
// be taken for a token's or a request's (same key, other messages).
const signContext = "silas consent v1\n"

// SigningBytes is what is signed: a context line, then RFC 8785 JSON of
// the signed fields. Times are cut to microseconds in UTC and nil lists are
// empty, as PostgreSQL gives them back.
func (c Consent) SigningBytes() ([]byte, error) {
	c.CreatedAt = c.CreatedAt.UTC().Truncate(time.Microsecond)
	c.ExpiresAt = c.ExpiresAt.UTC().Truncate(time.Microsecond)
	for _, l := range []*[]string{&c.Nodes, &c.Argv, &c.Secrets, &c.Lanes} {
		if *l == nil {
			*l = []string{}
		}
	}
	if len(c.Verify) == 0 {
		c.Verify = json.RawMessage("[]")
	}
	return canonical(signContext, c)
}

// canonical is context then RFC 8785 JSON of v: what a signature covers.
func canonical(context string, v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("consent: marshal: %w", err)
	}
	b, err := canon.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("consent: canonicalise: %w", err)
	}
	return append([]byte(context), b...), nil
}

// Sign signs c as minted.
func Sign(key ed25519.PrivateKey, c *Consent) error {
	b, err := c.SigningBytes()
	if err != nil {
		return err
	}
	c.Signature = ed25519.Sign(key, b)
	return nil
}

// Verify reports whether c is the consent that was signed. A consent
// unchanged since it last verified under pub is not verified again
// (verified.go says why that is safe).
func Verify(pub ed25519.PublicKey, c Consent) bool {
	if len(c.Signature) != ed25519.SignatureSize {
		return false
	}
	if verifiedBefore(pub, c) {
		return true
	}
	b, err := c.SigningBytes()
	if err != nil || !ed25519.Verify(pub, b, c.Signature) {
		return false
	}
	rememberVerified(pub, c)
	return true
}

// Limits bound what a mint may ask for (config consents.*).
type Limits struct {
	// TTL is how long a consent lasts when the card does not say.
	TTL time.Duration
	// MaxTTL is the longest a consent may last (24 h at most).
	MaxTTL time.Duration
	// MaxUses is the number of uses a consent allows.
	MaxUses int
	// CostCap is a consent's cap in units (0: MaxUses × UnitsPerAction).
	CostCap int
	// TokensPerUnit is how many model tokens cost one unit (0: model
	// calls cost nothing): the model call that proposed an action run
	// under a consent is charged to it with the action (Units).
	TokensPerUnit int
}

// Cap is the cost cap a consent minted under l gets.
func (l Limits) Cap() int {
	if l.CostCap > 0 {
		return l.CostCap
	}
	return l.MaxUses * UnitsPerAction
}

// Units is what one use costs: UnitsPerAction for the action, plus the
// model tokens that proposed it, rounded up to whole units.
func (l Limits) Units(modelTokens int64) int {
	if l.TokensPerUnit <= 0 || modelTokens <= 0 {
		return UnitsPerAction
	}
	per := int64(l.TokensPerUnit)
	// Bounded so a hostile count cannot overflow: more than the largest
	// cap is capped anyway.
	return UnitsPerAction + int(min((modelTokens+per-1)/per, 1<<30))
}

// ErrNotCoverable: the action is of a kind no consent may cover.
var ErrNotCoverable = errors.New("consent: this action cannot be covered by a standing approval")

// Coverable reports whether a standing approval may be offered for a at
// risk: low or medium, a known tool, and a program whose arguments say
// what it runs (never a shell, an interpreter or a wrapper).
func Coverable(a core.Action, risk cards.Risk) bool {
	if risk != cards.RiskLow && risk != cards.RiskMedium {
		return false
	}
	return a.Tool != "" && len(a.Argv) > 0 && !policy.Opaque(a.Argv[0])
}

// ForAction builds the consent for exactly a, in conversation conv, given
// by who at now for ttl (bounded by lim), at the action's risk. The caller
// signs it (Sign) and stores it.
func ForAction(id string, a core.Action, risk cards.Risk, conv, who string, now time.Time, ttl time.Duration, lim Limits) (Consent, error) {
	if !Coverable(a, risk) {
		return Consent{}, ErrNotCoverable
	}
	if ttl <= 0 {
		ttl = lim.TTL
	}
	if ttl > lim.MaxTTL {
		ttl = lim.MaxTTL
	}
	verify, err := canonicalVerify(a)
	if err != nil {
		return Consent{}, err
	}
	return Consent{
		ID: id, Scope: ScopeConversation, Conversation: conv, Tool: a.Tool, Argv: slices.Clone(a.Argv),
		Secrets: slices.Clone(a.Secrets), Verify: verify, MaxRisk: risk, Lanes: []string{LaneOf(a)},
		MaxUses: lim.MaxUses, CostCap: lim.Cap(), CreatedBy: who,
		CreatedAt: now.UTC().Truncate(time.Microsecond), ExpiresAt: now.Add(ttl).UTC().Truncate(time.Microsecond),
	}, nil
}

func canonicalVerify(a core.Action) (json.RawMessage, error) {
	if len(a.Verify) == 0 {
		return json.RawMessage("[]"), nil
	}
	return canonical("", a.Verify)
}

// Matches reports whether c's shape covers a (tool, argv, secrets, checks)
// — whatever its state. A consent whose program is opaque never matches,
// even if one was stored.
func (c Consent) Matches(a core.Action) bool {
	if a.Tool != c.Tool || len(a.Argv) == 0 || len(c.Argv) == 0 || policy.Opaque(a.Argv[0]) || policy.Opaque(c.Argv[0]) {
		return false
	}
	if !argvCovers(c.Argv, c.Prefix, a.Argv) {
		return false
	}
	if !slices.Equal(sorted(a.Secrets), sorted(c.Secrets)) {
		return false
	}
	v, err := canonicalVerify(a)
	if err != nil {
		return false
	}
	// Stored as jsonb, the checks come back re-spaced: compare canonically.
	stored, err := canon.Transform(orEmpty(c.Verify))
	return err == nil && string(v) == string(stored)
}

// argvCovers reports whether argv is rule exactly or, with prefix, starts
// with it.
func argvCovers(rule []string, prefix bool, argv []string) bool {
	if prefix {
		return len(argv) >= len(rule) && slices.Equal(argv[:len(rule)], rule)
	}
	return slices.Equal(argv, rule)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func orEmpty(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("[]")
	}
	return v
}

// Check says whether c lets a (whose policy risk is risk) run now in conv
// without a card: "" when it does, else the refusal code. The order puts
// the most telling reason first: a revoked consent is "revoked" even once
// expired.
func (c Consent) Check(pub ed25519.PublicKey, a core.Action, risk cards.Risk, conv string, now time.Time) Code {
	return c.CheckCost(pub, a, risk, conv, now, UnitsPerAction)
}

// CheckCost is Check for a use costing cost units (Limits.Units: the
// action and the model call that proposed it): CostCapped when it would
// pass the consent's cap.
func (c Consent) CheckCost(pub ed25519.PublicKey, a core.Action, risk cards.Risk, conv string, now time.Time, cost int) Code {
	switch {
	case risk != cards.RiskLow && risk != cards.RiskMedium:
		return PolicyForbids
	case !c.Matches(a):
		return Required
	case !Verify(pub, c) || !c.CounterIntact():
		return BadSignature
	case c.Scope != ScopeConversation:
		return RunMismatch
	case c.Conversation != conv:
		return Required
	}
	return c.limits(risk, LaneOf(a), cost, now)
}

// limits checks c's state and bounds for one use costing cost units in
// lane, once its shape and binding hold.
func (c Consent) limits(risk cards.Risk, lane string, cost int, now time.Time) Code {
	switch {
	case !c.RevokedAt.IsZero():
		return Revoked
	case !now.Before(c.ExpiresAt):
		return Expired
	case risk.Rank() > c.MaxRisk.Rank() || c.MaxRisk.Rank() > cards.RiskMedium.Rank():
		return PolicyForbids
	case !slices.Contains(c.Lanes, lane):
		return LaneDenied
	case c.Uses >= c.MaxUses:
		return UsesExhausted
	case cost < 0 || c.Units+cost > c.CostCap:
		return CostCapped
	}
	return ""
}

// Pick returns the first of cs that lets a run now (ok), or the refusal
// that tells the most: the code of a consent that covers a's shape, if
// any, else Required.
func Pick(pub ed25519.PublicKey, cs []Consent, a core.Action, risk cards.Risk, conv string, now time.Time) (Consent, Code) {
	return PickCost(pub, cs, a, risk, conv, now, UnitsPerAction)
}

// PickCost is Pick for a use costing cost units.
func PickCost(pub ed25519.PublicKey, cs []Consent, a core.Action, risk cards.Risk, conv string, now time.Time, cost int) (Consent, Code) {
	why := Required
	if risk != cards.RiskLow && risk != cards.RiskMedium {
		why = PolicyForbids
	}
	for _, c := range cs {
		code := c.CheckCost(pub, a, risk, conv, now, cost)
		if code == "" {
			return c, ""
		}
		if code != Required && why == Required {
			why = code
		}
	}
	return Consent{}, why
}

// Short is the consent's id as shown in chat: its first 8 characters.
func (c Consent) Short() string {
	if len(c.ID) > 8 {
		return c.ID[:8]
	}
	return c.ID
}
