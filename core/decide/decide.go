// Package decide is the decider: a tap on an approval card, the card's
// request read and locked in the caller's transaction, and the tapper's
// trust become a decision — declined, waiting for confirmation, or approved
// (a token minted and checked, its nonce consumed, the execution queued) —
// written in that same transaction, and a Result: the plain value of what
// the decision shows (card states, the tapper's notice, audit notes, the
// execution to start once committed).
//
// decide never commits, executes or verifies anything, never talks to a
// platform (the caller delivers what a Result says, however it wires that),
// and never decides a stored request whose signature does not verify. A
// refusal is an answer, not an error: it changes nothing and says why.
package decide

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/approval"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/tracing"
)

// Tx is the part of the caller's transaction a decision writes in.
type Tx interface {
	Now() time.Time
	// GetApproval reads a request and locks its row, so concurrent taps
	// on one card serialise.
	GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error)
	// TransitionApproval is compare-and-swap on the request's status;
	// false: it was no longer in any of from.
	TransitionApproval(ctx context.Context, id core.ApprovalID, from []core.ApprovalStatus, to core.ApprovalStatus, by core.IdentityID, token []byte) (bool, error)
	// ConsumeNonce records a token's nonce; false: consumed before.
	ConsumeNonce(ctx context.Context, nonce []byte, tokenID string, id core.ApprovalID) (bool, error)
	// QueueExecution queues the approved request's execution.
	QueueExecution(id core.ApprovalID) error
	// QueueTaskStep queues a step of task id (a River job), committed
	// with the decision: a task learns of its declined call.
	QueueTaskStep(id string)
	// GetExecution reads the execution of a request read in this
	// transaction, its row locked until commit (FOR SHARE): the state a
	// tap on a stale card re-sends, which no transition of the execution
	// can change before the re-send is committed (see currentCard).
	GetExecution(ctx context.Context, id core.ApprovalID) (core.Execution, error)
}

// Config wires a Decider.
type Config struct {
	// Key signs approval tokens; its public half checks request signatures.
	Key ed25519.PrivateKey
	// TokenTTL bounds the gap between approval and execution.
	TokenTTL time.Duration
	// Preview is how much of a long output a card shows.
	Preview int
	// Standing bounds the standing consents an owner may give from a card
	// ("Allow this for 1 h"); a zero TTL: the choice is not offered.
	Standing consent.Limits
	// NoSelfApproval lists the risks for which the requester may not
	// decide their own request, even as an owner (approvals.self_approval:
	// false).
	NoSelfApproval []cards.Risk
	// StepUp offers the passkey step-up an irreversible request needs
	// (core/stepup); nil: irreversible requests are refused.
	StepUp StepUp
}

// Routes is an optional part of a Tx: where a request's card was routed
// (core/route). A Tx without it knows only the requesting conversation.
type Routes interface {
	// ApprovalRoute is the route of request id into conv; core.ErrNotFound
	// when its card was not routed there.
	ApprovalRoute(ctx context.Context, id core.ApprovalID, conv core.ConversationID) (core.ApprovalRoute, error)
}

// RouteReader is a Tx that reads a request (its row locked) and its route
// into a conversation in one round trip (store.Tx): what Tap reads first.
type RouteReader interface {
	Routes
	GetApprovalRoute(ctx context.Context, id core.ApprovalID, conv core.ConversationID) (a core.ApprovalRequest, r core.ApprovalRoute, routeErr, err error)
}

// Approver is a Tx that records an approval and consumes its token's nonce
// in one statement (store.Tx): the nonce only when the approval applied,
// as TransitionApproval and ConsumeNonce called in turn do.
type Approver interface {
	Approve(ctx context.Context, id core.ApprovalID, from []core.ApprovalStatus, by core.IdentityID, token, nonce []byte, tokenID string) (ok, fresh bool, err error)
}

// Decider turns taps on approval cards into decisions.
type Decider struct {
	cfg Config
	pub ed25519.PublicKey
}

// New builds a Decider.
func New(cfg Config) *Decider {
	return &Decider{cfg: cfg, pub: cfg.Key.Public().(ed25519.PublicKey)}
}

// ErrNoApproval is returned by Tap when no approval request has the tapped
// card's id: the card may be another kind the caller knows (an access
// request, a task's question), or unknown.
var ErrNoApproval = errors.New("decide: the tapped card is not an approval request")

// Note is an audit entry of the decision; the caller writes it with the
// tapper as actor, in the tapped conversation.
type Note struct {
	Kind audit.Kind
	Data map[string]any
	// Conversation, when set, is the conversation the entry belongs to
	// when it is not the tapped one: a decision made on a routed copy is
	// recorded in the request's own conversation, where the executor's
	// gate looks for it.
	Conversation core.ConversationID
}

// Result is what a decision shows, as a plain value: the caller writes the
// notes and card updates in the same transaction and, once it committed,
// answers the tapper and starts what was queued.
type Result struct {
	// Updates are the tapped card's new states, in order.
	Updates []*cards.Card
	// Notes are the decision's audit entries.
	Notes []Note
	// Toast is the short answer to the tapper.
	Toast string
	// Refused is why the tap changed nothing ("" when it took effect): a
	// reason code such as "not_approver", "expired" or "altered".
	Refused string
	// Queued names the approval whose execution was queued (start it once
	// the transaction committed).
	Queued core.ApprovalID
	// Approved is the request as it was decided (set with Queued): carried
	// on to what the tap's transaction does next, not read again.
	Approved core.ApprovalRequest
	// Declined names the approval that was declined.
	Declined core.ApprovalID
	// Consent is the standing consent the tap minted (signed), for the
	// caller to store in the same transaction; nil: none.
	Consent *consent.Consent
	// Key is the outbox message key of the tapped card in the tapper's
	// conversation when it is not the card's id (a routed copy).
	Key string
}

// Outcome labels the result for metrics: approved, declined or
// refused_<reason>; "" for anything else (a request for confirmation).
func (r Result) Outcome() string {
	switch {
	case r.Refused != "":
		return "refused_" + r.Refused
	case r.Queued != "":
		return "approved"
	case r.Declined != "":
		return "declined"
	}
	return ""
}

func (r *Result) note(kind audit.Kind, data map[string]any) {
	r.Notes = append(r.Notes, Note{Kind: kind, Data: data})
}

// Refusal is the Result of a tap that changes nothing: msg answers the
// tapper, the refusal is noted with its reason, and card (if any) is
// re-sent so a client that disabled its buttons while waiting re-enables
// them.
func Refusal(tap core.Tap, reason, msg string, card *cards.Card) Result {
	r := Result{Toast: msg, Refused: reason}
	if card != nil {
		r.Updates = append(r.Updates, card)
	}
	r.note(audit.KindApprovalRefused, map[string]any{"approval": string(tap.Card), "choice": tap.Choice, "reason": reason})
	return r
}

// Tap decides t.Tap (an approval card tapped by t.Sender, whose trust is
// trust) inside tx. The approval row is read once, locked; every change is
// compare-and-swap. ErrNoApproval: the card is not an approval request.
func (d *Decider) Tap(ctx context.Context, tx Tx, t core.Turn, trust core.Trust) (Result, error) {
	tap := *t.Tap
	var a core.ApprovalRequest
	var err error
	// The route of the request into the tapper's conversation, read with
	// the request when the Tx can (one round trip); else asked below.
	var read *routeRead
	if rr, ok := tx.(RouteReader); ok {
		read = &routeRead{}
		a, read.r, read.err, err = rr.GetApprovalRoute(ctx, core.ApprovalID(tap.Card), t.Conversation)
	} else {
		a, err = tx.GetApproval(ctx, core.ApprovalID(tap.Card))
	}
	if errors.Is(err, core.ErrNotFound) {
		return Result{}, ErrNoApproval
	}
	if err != nil {
		return Result{}, err
	}
	routeOf := func(rs Routes) (core.ApprovalRoute, error) {
		if read != nil {
			return read.r, read.err
		}
		return rs.ApprovalRoute(ctx, a.ID, t.Conversation)
	}
	route := core.ApprovalRoute{Kind: core.RouteStatus}
	if a.Conversation != t.Conversation {
		// A routed copy in an approver's own conversation decides the one
		// request, under the same lock; any other conversation's card is
		// "unknown" too: do not reveal it.
		rs, ok := tx.(Routes)
		if !ok {
			return Refusal(tap, "unknown_card", "Unknown card: nothing was changed.", nil), nil
		}
		if route, err = routeOf(rs); errors.Is(err, core.ErrNotFound) {
			return Refusal(tap, "unknown_card", "Unknown card: nothing was changed.", nil), nil
		} else if err != nil {
			return Result{}, err
		}
	} else if rs, ok := tx.(Routes); ok {
		if r, err := routeOf(rs); err == nil {
			route = r
		} else if !errors.Is(err, core.ErrNotFound) {
			return Result{}, err
		}
	}
	r, err := d.tap(ctx, tx, t, trust, a)
	if err != nil {
		return r, err
	}
	if a.Conversation != t.Conversation {
		for i := range r.Notes {
			r.Notes[i].Conversation = a.Conversation
			r.Notes[i].Data["via"] = string(t.Conversation)
		}
	}
	if route.MessageKey != "" && route.MessageKey != string(a.ID) {
		r.Key = route.MessageKey
	}
	if route.Kind == core.RouteStatus && route.MessageKey != "" {
		// The requesting conversation of a routed request shows its status
		// card: the state, never buttons its people cannot use.
		for i, c := range r.Updates {
			if c.ID == tap.Card {
				r.Updates[i] = StatusCard(c)
			}
		}
	}
	return r, nil
}

// routeRead is a route read together with its request.
type routeRead struct {
	r   core.ApprovalRoute
	err error
}

// StatusCard is c as the requesting conversation of a routed request
// shows it: its state without choices (nor a step-up link, which is the
// tapper's own).
func StatusCard(c *cards.Card) *cards.Card {
	s := *c
	s.Choices, s.Link = nil, nil
	return &s
}

// tap decides a tap on a, read and locked, from a conversation it may be
// decided in.
func (d *Decider) tap(ctx context.Context, tx Tx, t core.Turn, trust core.Trust, a core.ApprovalRequest) (Result, error) {
	tap := *t.Tap
	if !MayDecide(a, t.Sender, trust) {
		return Refusal(tap, "not_approver", fmt.Sprintf("You (%s) may not decide this card; nothing was changed.", t.Sender), d.open(a)), nil
	}
	if t.Sender == a.Requester && slices.Contains(d.cfg.NoSelfApproval, a.Risk) && tap.Choice != "decline" {
		return Refusal(tap, "self_approval", fmt.Sprintf("You asked for this yourself, and %s-risk requests need another approver here (approvals.self_approval): nothing was changed. You can still decline it.", a.Risk), d.open(a)), nil
	}
	if !a.Status.Open() {
		// Re-send the card's current state too: a client showing stale
		// buttons (another tab, a lost update) catches up.
		c, err := d.currentCard(ctx, tx, a)
		if err != nil {
			return Result{}, err
		}
		return Refusal(tap, "already_decided", fmt.Sprintf("Already decided (%s): nothing was changed.", a.Status), c), nil
	}
	if !tx.Now().Before(a.ExpiresAt) {
		ok, err := tx.TransitionApproval(ctx, a.ID, []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming}, core.ApprovalExpired, "", nil)
		if err != nil {
			return Result{}, err
		}
		if !ok {
			return Refusal(tap, "expired", "This card has expired: nothing was run. Ask again if you still want it.", d.open(a)), nil
		}
		// The expired card replaces the open one; its note comes first.
		a.Status = core.ApprovalExpired
		r := Refusal(tap, "expired", "This card has expired: nothing was run. Ask again if you still want it.", d.card(a, nil))
		r.Notes = append([]Note{{Kind: audit.KindApprovalExpired, Data: map[string]any{"approval": string(a.ID)}}}, r.Notes...)
		return r, nil
	}
	if err := RequestIntact(d.pub, a); err != nil {
		// The stored request is not the one the card showed (edited in the
		// database since it was proposed), or predates request signatures.
		// Its card is not re-sent: it would show the stored, altered request.
		if errors.Is(err, approval.ErrRequestUnsigned) {
			return Refusal(tap, "unsigned", "This request was made before requests were signed, so it cannot be approved: nothing was run. Ask again if you still want it.", nil), nil
		}
		return Refusal(tap, "altered", "This request was altered after it was proposed and no longer matches what the card showed: nothing was run.", nil), nil
	}
	// The decision links to the proposal's trace; the wait is a span there.
	tracing.Tapped(ctx, string(a.ID), a.Traceparent, a.CreatedAt)
	switch tap.Choice {
	case "decline":
		ok, err := tx.TransitionApproval(ctx, a.ID, []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming}, core.ApprovalDeclined, t.Sender, nil)
		if err != nil || !ok {
			return Result{}, err
		}
		a.Status, a.DecidedBy = core.ApprovalDeclined, t.Sender
		if a.Task != "" {
			tx.QueueTaskStep(a.Task)
		}
		r := Result{Updates: []*cards.Card{d.card(a, nil)}, Toast: "Declined. Nothing will run.", Declined: a.ID}
		r.note(audit.KindApprovalDeclined, map[string]any{"approval": string(a.ID)})
		return r, nil
	case "approve":
		if a.Risk == cards.RiskIrreversible {
			// The top rung: the tap sends a passkey link (a fresh one
			// when tapped again), it approves nothing.
			return d.offerStepUp(ctx, tx, a, t.Sender, tap)
		}
		if a.Status != core.ApprovalPending {
			return Refusal(tap, "bad_choice", "This card is waiting for confirmation: tap Confirm or Decline.", d.open(a)), nil
		}
		if !a.Risk.NeedsConfirm() {
			return d.approve(ctx, tx, a, t.Sender)
		}
		ok, err := tx.TransitionApproval(ctx, a.ID, []core.ApprovalStatus{core.ApprovalPending}, core.ApprovalConfirming, "", nil)
		if err != nil || !ok {
			return Result{}, err
		}
		a.Status = core.ApprovalConfirming
		r := Result{Updates: []*cards.Card{d.card(a, nil)}, Toast: fmt.Sprintf("%s risk: tap Confirm on the card to run it.", a.Risk)}
		r.note(audit.KindApprovalConfirmRequested, map[string]any{"approval": string(a.ID)})
		return r, nil
	case "confirm":
		if a.Status != core.ApprovalConfirming {
			return Refusal(tap, "bad_choice", "There is nothing to confirm on this card yet.", d.open(a)), nil
		}
		if a.Risk == cards.RiskIrreversible {
			return Refusal(tap, RefusedNoPasskey, "Irreversible: only the passkey confirmation on the secure page runs it. Tap the card's first button for a new link.", d.open(a)), nil
		}
		return d.approve(ctx, tx, a, t.Sender)
	case render.StandingChoice:
		return d.standing(ctx, tx, a, t.Sender, trust, tap)
	default:
		return Refusal(tap, "bad_choice", "Unknown choice: nothing was changed.", d.open(a)), nil
	}
}

// Approve approves a, a request read (or inserted) in tx, on by's behalf:
// the decision of a policy that allows the action. It checks the request's
// signature first.
func (d *Decider) Approve(ctx context.Context, tx Tx, a core.ApprovalRequest, by core.IdentityID) (Result, error) {
	if err := RequestIntact(d.pub, a); err != nil {
		return Result{}, fmt.Errorf("decide: approve %s: %w", a.ID, err)
	}
	return d.approve(ctx, tx, a, by)
}

// approve mints a token, verifies it and consumes its nonce (under a unique
// key), and queues the execution — all in tx, so either the request leaves
// "pending" with its nonce consumed, or nothing happens. The caller checked
// the request's signature.
func (d *Decider) approve(ctx context.Context, tx Tx, a core.ApprovalRequest, by core.IdentityID) (Result, error) {
	return d.approveWith(ctx, tx, a, by, nil)
}

// approveWith is approve with the passkey step-up's proof, which an
// irreversible request needs (ErrNeedsPasskey without it).
func (d *Decider) approveWith(ctx context.Context, tx Tx, a core.ApprovalRequest, by core.IdentityID, proof *Proof) (Result, error) {
	if a.Risk == cards.RiskIrreversible && proof == nil {
		return Result{}, fmt.Errorf("%w (%s)", ErrNeedsPasskey, a.ID)
	}
	tok, raw, err := d.mint(a, by, tx.Now())
	if err != nil {
		return Result{}, err
	}
	from := []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming}
	var ok, fresh bool
	if ap, can := tx.(Approver); can {
		// One statement: the nonce is consumed only if the approval applied.
		ok, fresh, err = ap.Approve(ctx, a.ID, from, by, raw, tok.Token.Nonce, tok.Token.TokenID)
	} else if ok, err = tx.TransitionApproval(ctx, a.ID, from, core.ApprovalApproved, by, raw); err == nil && ok {
		fresh, err = tx.ConsumeNonce(ctx, tok.Token.Nonce, tok.Token.TokenID, a.ID)
	}
	if err != nil || !ok {
		return Result{}, err
	}
	if !fresh {
		return Result{}, errReplay
	}
	if tp := tracing.Traceparent(ctx); tp != "" {
		// As the approval row now stores it (the tap's span): the
		// request carried on links its execution to this decision.
		a.TapTraceparent = tp
	}
	return d.approved(tx, a, by, tok, raw, proof)
}

var errReplay = errors.New("decide: token nonce already consumed (replay)")

// mint mints a's single-use token for by and checks it: the token and its
// stored bytes.
func (d *Decider) mint(a core.ApprovalRequest, by core.IdentityID, now time.Time) (approval.Signed, []byte, error) {
	tok, err := approval.Mint(d.cfg.Key, core.NewID(), a.ActionHash, string(a.Conversation), string(by), now, d.cfg.TokenTTL)
	if err != nil {
		return approval.Signed{}, nil, err
	}
	if err := approval.Check(d.pub, tok, a.ActionHash, now); err != nil {
		return approval.Signed{}, nil, fmt.Errorf("decide: freshly minted token does not verify: %w", err)
	}
	raw, err := tok.Marshal()
	if err != nil {
		return approval.Signed{}, nil, err
	}
	return tok, raw, nil
}

// approved is what follows an approval whose token (raw) was recorded and
// its nonce consumed in tx: the execution queued and the Result.
func (d *Decider) approved(tx Tx, a core.ApprovalRequest, by core.IdentityID, tok approval.Signed, raw []byte, proof *Proof) (Result, error) {
	if err := tx.QueueExecution(a.ID); err != nil {
		return Result{}, err
	}
	// DecidedAt as the approval row stores it (tx's clock): an execution
	// claimed with this decision carries this request, not a re-read row,
	// and the tap → result metric measures from it.
	a.Status, a.DecidedBy, a.DecidedAt, a.Token = core.ApprovalApproved, by, tx.Now(), raw
	r := Result{Updates: []*cards.Card{d.card(a, &core.Execution{Status: core.ExecQueued})}, Toast: "Approved: running it now.", Queued: a.ID, Approved: a}
	r.note(audit.KindApprovalApproved, map[string]any{"approval": string(a.ID), "by": string(by), "risk": string(a.Risk)})
	r.note(audit.KindTokenMinted, map[string]any{"approval": string(a.ID), "token_id": tok.Token.TokenID,
		"expires_at": tok.Token.ExpiresAt.Format(time.RFC3339)})
	r.note(audit.KindTokenConsumed, map[string]any{"approval": string(a.ID), "token_id": tok.Token.TokenID})
	if proof != nil {
		strengthNote(&r, proof)
	}
	return r, nil
}

// open is the card of a request still open, re-sent with a refusal; nil
// for a decided one.
func (d *Decider) open(a core.ApprovalRequest) *cards.Card {
	if !a.Status.Open() {
		return nil
	}
	return d.card(a, nil)
}

// currentCard renders a decided request with its execution, if any, as
// it stands when tx commits. The re-sent card is queued in tx, after every
// edit already queued for it; so it must show the state no later edit
// contradicts — a re-send showing "running" queued after the verdict's
// "done" would be delivered last and leave the card regressed. Hence the
// execution is read in tx, never through the pool: it sees a verdict
// committed before, or queued earlier in tx (a group commit puts the
// executor's transition and a tap in one transaction), and its row lock
// makes a verdict not yet written wait for tx to commit, so its edit
// comes after this one. (A read through the pool missed both: a verdict
// queued earlier in tx, and one committed between the read and tx's
// commit; either left the re-sent "running" last.)
func (d *Decider) currentCard(ctx context.Context, tx Tx, a core.ApprovalRequest) (*cards.Card, error) {
	if a.Status != core.ApprovalApproved {
		return d.card(a, nil), nil
	}
	ex, err := tx.GetExecution(ctx, a.ID)
	if errors.Is(err, core.ErrNotFound) {
		return d.card(a, nil), nil
	}
	if err != nil {
		return nil, err
	}
	return d.card(a, &ex), nil
}

func (d *Decider) card(a core.ApprovalRequest, ex *core.Execution) *cards.Card {
	return render.OfferStanding(render.Approval(a, ex, d.cfg.Preview), a, d.cfg.Standing.TTL)
}

// standing is the tap on "Allow this for 1 h": the action is approved as
// "approve" (low risk) or "confirm" (medium) would approve it, and a
// consent for that exact action in this conversation is minted, signed,
// for the caller to store with the decision. Only an owner gives one, and
// only where the card offers it (render.Standing): never for high or
// irreversible risk, never for a shell, interpreter or wrapper.
func (d *Decider) standing(ctx context.Context, tx Tx, a core.ApprovalRequest, by core.IdentityID, trust core.Trust, tap core.Tap) (Result, error) {
	if !render.Standing(a, d.cfg.Standing.TTL) {
		return Refusal(tap, "bad_choice", "A standing approval is not offered for this action: nothing was changed.", d.open(a)), nil
	}
	if trust != core.TrustOwner {
		return Refusal(tap, "not_owner", "Only the owner can give a standing approval; nothing was changed.", d.open(a)), nil
	}
	var act core.Action
	if err := json.Unmarshal(a.ActionCanonical, &act); err != nil {
		return Result{}, fmt.Errorf("decide: standing approval of %s: %w", a.ID, err)
	}
	c, err := consent.ForAction(core.NewID(), act, a.Risk, string(a.Conversation), string(by), tx.Now(), d.cfg.Standing.TTL, d.cfg.Standing)
	if err != nil {
		return Result{}, fmt.Errorf("decide: standing approval of %s: %w", a.ID, err)
	}
	if err := consent.Sign(d.cfg.Key, &c); err != nil {
		return Result{}, err
	}
	r, err := d.approve(ctx, tx, a, by)
	if err != nil || r.Queued == "" {
		return r, err
	}
	r.Consent = &c
	r.Toast = fmt.Sprintf("Approved: running it now. The same command runs without a card here until %s (up to %d times); /consents to revoke.",
		c.ExpiresAt.UTC().Format("15:04 MST"), c.MaxUses)
	r.note(audit.KindConsentMinted, map[string]any{"consent": c.ID, "approval": string(a.ID), "scope": string(c.Scope),
		"argv": (core.Action{Argv: c.Argv}).CommandLine(), "max_risk": string(c.MaxRisk), "lanes": c.Lanes, "max_uses": c.MaxUses,
		"cost_cap": c.CostCap, "expires_at": c.ExpiresAt.Format(time.RFC3339)})
	return r, nil
}

// MayDecide reports whether who, with trust, may decide a: the identity is
// listed, or holds a listed role with at least that trust. High risk
// additionally needs owner trust; external trust decides nothing.
func MayDecide(a core.ApprovalRequest, who core.IdentityID, trust core.Trust) bool {
	if trust == core.TrustExternal {
		return false
	}
	if a.Risk.Rank() >= cards.RiskHigh.Rank() && trust != core.TrustOwner {
		return false
	}
	for _, ap := range a.Approvers {
		switch {
		case ap == "role:owner" && trust == core.TrustOwner:
			return true
		case ap == "role:auth" && (trust == core.TrustAuth || trust == core.TrustOwner):
			return true
		case core.IdentityID(ap) == who:
			return true
		}
	}
	return false
}

// Intact reports whether a stored request is the one proposed and signed
// (RequestIntact with the decider's key), as the command table checks it.
func (d *Decider) Intact(a core.ApprovalRequest) error { return RequestIntact(d.pub, a) }

// MayDecide is MayDecide, as the command table asks the decider.
func (d *Decider) MayDecide(a core.ApprovalRequest, who core.IdentityID, trust core.Trust) bool {
	return MayDecide(a, who, trust)
}

// StandingTx is the part of the caller's transaction a use of a standing
// consent is decided in.
type StandingTx interface {
	Tx
	consent.Tx
}

// Standing reports whether standing consents are on.
func (d *Decider) Standing() bool { return d.cfg.Standing.TTL > 0 }

// ApproveStanding approves a — a request the policy sends to a person,
// read (or inserted) in tx — on behalf of a standing consent that covers
// it, if one does: the consent's use is counted and the action gets its
// own single-use token, both in tx, the token's audit entries naming the
// consent. Otherwise it changes nothing and returns the refusal code (the
// request keeps its card).
func (d *Decider) ApproveStanding(ctx context.Context, tx StandingTx, a core.ApprovalRequest) (Result, consent.Consent, consent.Code, error) {
	return d.ApproveStandingCost(ctx, tx, a, 0)
}

// ApproveStandingCost is ApproveStanding charging the consent, beside the
// action's unit, the model tokens of the call that proposed it
// (consents.tokens_per_unit): cost_capped when they would pass its cap.
func (d *Decider) ApproveStandingCost(ctx context.Context, tx StandingTx, a core.ApprovalRequest, modelTokens int64) (Result, consent.Consent, consent.Code, error) {
	if !d.Standing() {
		return Result{}, consent.Consent{}, consent.Required, nil
	}
	if err := RequestIntact(d.pub, a); err != nil {
		return Result{}, consent.Consent{}, "", fmt.Errorf("decide: approve %s under a consent: %w", a.ID, err)
	}
	var act core.Action
	if err := json.Unmarshal(a.ActionCanonical, &act); err != nil {
		return Result{}, consent.Consent{}, "", fmt.Errorf("decide: approve %s under a consent: %w", a.ID, err)
	}
	c, code, err := consent.UseCost(ctx, tx, d.pub, act, a.Risk, a.Conversation, d.cfg.Standing.Units(modelTokens))
	if err != nil || code != "" {
		return Result{}, consent.Consent{}, code, err
	}
	r, err := d.approve(ctx, tx, a, core.IdentityID("consent:"+c.ID))
	if err != nil {
		return Result{}, consent.Consent{}, "", err
	}
	if r.Queued == "" {
		// Counted above in this transaction: fail it rather than commit a
		// use that ran nothing.
		return Result{}, consent.Consent{}, "", fmt.Errorf("decide: approve %s under consent %s: the request was no longer open", a.ID, c.ID)
	}
	for _, n := range r.Notes {
		n.Data["consent"] = c.ID
	}
	r.note(audit.KindConsentUsed, map[string]any{"consent": c.ID, "approval": string(a.ID), "uses": c.Uses, "max_uses": c.MaxUses,
		"units": c.Units, "cost_cap": c.CostCap, "model_tokens": max(modelTokens, 0)})
	return r, c, "", nil
}
