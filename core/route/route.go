// Package route decides where an approval request's card goes: to the
// requesting conversation when someone there may decide it, otherwise to
// the approvers' own direct conversations — a copy in each approver's
// newest direct conversation per running channel, or where
// approvals.route_to says — with a status card left in the requesting
// conversation; and, when no approver can receive a card at all, a refusal
// that says why, so no request waits unseen until it expires.
//
// route only plans: it never writes, sends, decides or approves anything.
// Who may decide a tap is still core/decide's check at tap time; a plan
// only chooses where the card is shown. It runs no SQL of its own (Store
// is an interface it declares) and imports no engine or adapter.
package route

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/render"
)

// Store is what planning reads.
type Store interface {
	// DirectConversations: the newest direct conversation of each of ids
	// on each channel but except ("" for every channel).
	DirectConversations(ctx context.Context, ids []core.IdentityID, except core.ChannelName) ([]core.DirectConversation, error)
	// SpokeIn reports whether any of ids sent a turn in conv.
	SpokeIn(ctx context.Context, conv core.ConversationID, ids []core.IdentityID) (bool, error)
}

// Config wires a Router.
type Config struct {
	Store Store
	// Owners lists the owners now (configured and bound by pairing).
	Owners func(ctx context.Context) []core.IdentityID
	// Channels are the running channels: a copy goes only where one runs.
	Channels []core.ChannelName
	// Deaf lists the channels deaf now (an open incident of core/health:
	// nothing heard from the platform past health.deaf_after), when set: a
	// copy there could be shown but its tap would never arrive, so none
	// goes there.
	Deaf func(ctx context.Context) (map[core.ChannelName]time.Time, error)
	// To is approvals.route_to: identities ("telegram:123") whose direct
	// conversations receive the copies instead of every owner's, and
	// channel names ("slack") the copies are limited to. Empty: every
	// owner, on every running channel.
	To []string
	// NoSelfApproval lists the risks for which a requester may not decide
	// their own request, even as an owner (approvals.self_approval: false;
	// core/decide enforces it at tap time).
	NoSelfApproval []cards.Risk
}

// Router plans where approval cards go.
type Router struct{ cfg Config }

// New builds a Router.
func New(cfg Config) (*Router, error) {
	if cfg.Store == nil || cfg.Owners == nil {
		return nil, fmt.Errorf("route: Store and Owners are required")
	}
	return &Router{cfg: cfg}, nil
}

// Target is one approver's direct conversation a copy goes to.
type Target struct {
	Channel      core.ChannelName
	Conversation core.ConversationID
	Identity     core.IdentityID
}

// Plan is where one request's card goes.
type Plan struct {
	// Routed: the card goes to Copies and the requesting conversation
	// gets a status card. False (and Refused empty): the card stays in
	// the requesting conversation, as always.
	Routed bool
	Copies []Target
	// Refused is why no approver can receive the card ("" otherwise): the
	// request is refused at once.
	Refused string
}

// Where names the channels the copies went to ("telegram, slack").
func (p Plan) Where() string {
	var chans []string
	for _, t := range p.Copies {
		if !slices.Contains(chans, string(t.Channel)) {
			chans = append(chans, string(t.Channel))
		}
	}
	return strings.Join(chans, ", ")
}

// Who names the approvers the copies went to.
func (p Plan) Who() []string {
	var who []string
	for _, t := range p.Copies {
		if !slices.Contains(who, string(t.Identity)) {
			who = append(who, string(t.Identity))
		}
	}
	return who
}

// SelfBarred reports whether a requester may not decide their own request
// of risk r.
func SelfBarred(noSelf []cards.Risk, r cards.Risk) bool { return slices.Contains(noSelf, r) }

// Plan decides where request a's card goes; requester is a.Requester with
// trust tr.
func (rt *Router) Plan(ctx context.Context, a core.ApprovalRequest, tr core.Trust) (Plan, error) {
	selfBarred := SelfBarred(rt.cfg.NoSelfApproval, a.Risk)
	if !selfBarred && decide.MayDecide(a, a.Requester, tr) {
		return Plan{}, nil
	}
	owners := rt.cfg.Owners(ctx)
	var present []core.IdentityID // who could decide it in the requesting conversation
	for _, o := range owners {
		if o != a.Requester && decide.MayDecide(a, o, core.TrustOwner) {
			present = append(present, o)
		}
	}
	for _, ap := range a.Approvers {
		if id := core.IdentityID(ap); !strings.HasPrefix(ap, "role:") && id != a.Requester && !slices.Contains(present, id) && a.Risk.Rank() < cards.RiskHigh.Rank() {
			present = append(present, id)
		}
	}
	// Someone who may decide it has talked in this conversation (an owner
	// in a group, the owner's own chat an outside caller asks in): the
	// card stays where they will see it.
	here, err := rt.cfg.Store.SpokeIn(ctx, a.Conversation, present)
	if err != nil {
		return Plan{}, fmt.Errorf("route: %w", err)
	}
	if here {
		return Plan{}, nil
	}
	cands, chans := rt.candidates(present)
	if len(cands) == 0 {
		why := "no owner is configured or paired"
		if len(owners) > 0 {
			why = "no one but you may approve it"
		}
		if len(rt.cfg.To) > 0 {
			why = "none of approvals.route_to may approve it"
		}
		return Plan{Refused: why}, nil
	}
	found, err := rt.cfg.Store.DirectConversations(ctx, cands, "")
	if err != nil {
		return Plan{}, fmt.Errorf("route: %w", err)
	}
	var deaf map[core.ChannelName]time.Time
	if rt.cfg.Deaf != nil {
		if deaf, err = rt.cfg.Deaf(ctx); err != nil {
			return Plan{}, fmt.Errorf("route: %w", err)
		}
	}
	p := Plan{Routed: true}
	var deafOnly []string // channels skipped only because they are deaf
	for _, d := range found {
		if !slices.Contains(rt.cfg.Channels, d.Channel) || (len(chans) > 0 && !slices.Contains(chans, d.Channel)) ||
			d.Conversation == a.Conversation || slices.ContainsFunc(p.Copies, func(t Target) bool { return t.Conversation == d.Conversation }) {
			continue
		}
		if _, ok := deaf[d.Channel]; ok {
			if !slices.Contains(deafOnly, string(d.Channel)) {
				deafOnly = append(deafOnly, string(d.Channel))
			}
			continue
		}
		p.Copies = append(p.Copies, Target{Channel: d.Channel, Conversation: d.Conversation, Identity: d.Identity})
	}
	if len(p.Copies) == 0 && len(deafOnly) > 0 {
		return Plan{Refused: fmt.Sprintf("the approvers (%s) use only channels that are deaf now (%s: nothing heard from the platform, so a tap could not arrive)",
			strings.Join(toStrings(cands), ", "), strings.Join(deafOnly, ", "))}, nil
	}
	if len(p.Copies) == 0 {
		where := "any running channel"
		if len(chans) > 0 {
			where = strings.Join(toStrings(chans), ", ")
		}
		return Plan{Refused: fmt.Sprintf("no approver (%s) has a direct conversation with Silas on %s", strings.Join(toStrings(cands), ", "), where)}, nil
	}
	return p, nil
}

// candidates are the approvers to send copies to: those of present that
// approvals.route_to names (all of them when it names no identity), and
// the channels it limits the copies to.
func (rt *Router) candidates(present []core.IdentityID) (ids []core.IdentityID, chans []core.ChannelName) {
	var named []core.IdentityID
	for _, to := range rt.cfg.To {
		if strings.Contains(to, ":") {
			named = append(named, core.IdentityID(to))
		} else {
			chans = append(chans, core.ChannelName(to))
		}
	}
	if len(named) == 0 {
		return present, chans
	}
	for _, id := range named {
		if slices.Contains(present, id) {
			ids = append(ids, id)
		}
	}
	return ids, chans
}

func toStrings[S ~string](xs []S) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}

// Copy is one copy of a routed card, to send to an approver's direct
// conversation under its own message key.
type Copy struct {
	Channel      core.ChannelName
	Conversation core.ConversationID
	Key          string
	Card         *cards.Card
}

// Delivery is what a routed plan sends: the status card for the requesting
// conversation (under the request's own message key), a copy per target,
// and the routes to store with the request in the same transaction.
type Delivery struct {
	Status *cards.Card
	Copies []Copy
	Routes []core.ApprovalRoute
}

// Deliver lays out what a routed plan (Routed true) sends for request a
// whose card is card: the one place the engine's turns and the task, flow
// and MCP steps (core/propose) take it from, so every requester's card
// reaches the approvers the same way.
func (p Plan) Deliver(card *cards.Card, a core.ApprovalRequest) Delivery {
	d := Delivery{Status: render.Routed(card, p.Where())}
	d.Routes = append(d.Routes, core.ApprovalRoute{Approval: a.ID, Channel: a.Channel, Conversation: a.Conversation, MessageKey: string(a.ID),
		Kind: core.RouteStatus})
	cp := render.RoutedCopy(card, a)
	for _, t := range p.Copies {
		// A key of its own: a copy may sit on the requesting channel.
		key := string(a.ID) + "@" + string(t.Conversation)
		d.Routes = append(d.Routes, core.ApprovalRoute{Approval: a.ID, Channel: t.Channel, Conversation: t.Conversation, MessageKey: key,
			Kind: core.RouteCopy, Identity: t.Identity})
		d.Copies = append(d.Copies, Copy{Channel: t.Channel, Conversation: t.Conversation, Key: key, Card: cp})
	}
	return d
}

// Refusal is what the requester is told when no approver can receive the
// card of command (Plan.Refused is reason).
func Refusal(command, reason string) string {
	return fmt.Sprintf("Nobody can approve `%s` now: %s. I asked no one and nothing is waiting; nothing was run.", command, reason)
}
