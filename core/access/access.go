// Package access decides who Silas answers in a direct message and how a
// stranger asks to be let in: the DM access policy of each channel (open,
// allowlist, pairing, disabled), access requests (a card to an owner,
// the owner's Allow or Deny), and notices to the owners through another
// channel (NotifyOwners).
//
// Trust is never raised on a message's word: an access request binds an
// identity only when an owner taps Allow on its card, and the binding is
// signed with the gateway's key in the same transaction. The package never
// answers a stranger's text beyond the access request, never decides an
// approval, never imports the engine, an adapter or a platform SDK, and
// runs no SQL itself; the store, the trust book and the outbox are small
// interfaces declared here, and a turn's answer goes into the turn's
// outcome through Out.
package access

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/commands"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/trust"
)

// Out is the turn's outcome, committed with the turn.
type Out interface {
	Reply(format string, a ...any)
	Note(kind audit.Kind, data map[string]any)
	Update(c *cards.Card)
	// SendTo queues a message to another conversation of the turn's
	// channel.
	SendTo(conv core.ConversationID, key string, m core.OutMessage)
	After(f func())
}

// Book is the trust book: owners bound by pairing, and its cache.
type Book interface {
	OwnersBound(ctx context.Context) []core.IdentityID
	Invalidate()
}

// Store is what the owners' notices need of the store.
type Store interface {
	Do(ctx context.Context, op store.Op) error
	DirectConversations(ctx context.Context, ids []core.IdentityID, except core.ChannelName) ([]core.DirectConversation, error)
}

// Outbox delivers what a commit queued for a conversation.
type Outbox interface {
	Kick(conv core.ConversationID, n int)
}

// Config wires Access.
type Config struct {
	// Policies is the DM policy per channel (default open).
	Policies map[core.ChannelName]trust.AccessPolicy
	// Owners are the config-declared owners.
	Owners []core.IdentityID
	Book   Book
	// Channels are the running channels (an owner is asked on the same
	// channel, when it can open a direct conversation).
	Channels map[core.ChannelName]core.Channel
	// Key signs the binding an owner's Allow creates.
	Key    ed25519.PrivateKey
	Store  Store
	Outbox Outbox
	Logger *slog.Logger
}

// Access applies the DM policy and decides access requests.
type Access struct{ cfg Config }

// New checks cfg and builds Access.
func New(cfg Config) (*Access, error) {
	if cfg.Book == nil || cfg.Store == nil || cfg.Outbox == nil || len(cfg.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("access: Book, Store, Outbox and Key are required")
	}
	for ch, p := range cfg.Policies {
		if !p.Valid() {
			return nil, fmt.Errorf("access: channel %q: unknown access policy %q", ch, p)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Access{cfg: cfg}, nil
}

// Verdict is what the DM policy says about a turn.
type Verdict int

const (
	// Answer: the turn is answered as usual.
	Answer Verdict = iota
	// Ignore: the turn is not answered at all (it is still recorded).
	Ignore
	// Ask: a stranger under the pairing policy; the answer is an access
	// request, written by Request in the turn's transaction.
	Ask
)

func (a *Access) policy(ch core.ChannelName) trust.AccessPolicy {
	if p, ok := a.cfg.Policies[ch]; ok {
		return p
	}
	return trust.AccessOpen
}

// Gate applies the DM access policy to a stored turn from a sender of the
// given trust; an ignored turn is noted on out.
func (a *Access) Gate(st core.StoredTurn, tr core.Trust, out Out) Verdict {
	t := st.Turn
	if t.ChatKind == core.ChatGroup || tr == core.TrustOwner {
		return Answer
	}
	switch a.policy(t.Channel) {
	case trust.AccessDisabled:
		out.Note(audit.KindAccessIgnored, map[string]any{"seq": st.Seq, "policy": "disabled"})
		return Ignore
	case trust.AccessAllowlist:
		if tr == core.TrustExternal {
			out.Note(audit.KindAccessIgnored, map[string]any{"seq": st.Seq, "policy": "allowlist"})
			return Ignore
		}
	case trust.AccessPairing:
		if tr == core.TrustExternal && t.Tap == nil && !commands.Parse(t.Text).Stranger {
			return Ask
		}
	}
	return Answer
}

// Request answers a stranger with an access request, in the turn's
// transaction: one open request per identity, and one card to the first
// owner reachable on the turn's channel.
func (a *Access) Request(ctx context.Context, tx *store.Tx, st core.StoredTurn, out Out) error {
	t := st.Turn
	if r, err := tx.OpenAccessRequest(ctx, t.Sender); err == nil {
		out.Reply("Your request to talk to Silas (code %s) is waiting for the owner.", r.Code)
		return nil
	} else if !errors.Is(err, core.ErrNotFound) {
		return err
	}
	ownerConv, ok := a.ownerConversation(ctx, t.Channel)
	if !ok {
		out.Note(audit.KindAccessUnreachableOwner, map[string]any{"seq": st.Seq})
		out.Reply("I don't know you yet, and no owner can be asked here. Ask the operator for a pairing code (`silas pair`), then send /pair <code>.")
		return nil
	}
	name := t.SenderName
	if name == "" {
		name = string(t.Sender)
	}
	r := core.AccessRequest{ID: core.NewID(), Channel: t.Channel, Identity: t.Sender, Name: render.Clip(name, 64), Conversation: t.Conversation,
		Code: trust.NewAccessCode(), OwnerConversation: ownerConv, Status: core.AccessPending}
	if err := tx.InsertAccessRequest(ctx, r); err != nil {
		return err
	}
	out.SendTo(ownerConv, r.ID, core.OutMessage{Conversation: ownerConv, Card: render.Access(r)})
	out.Reply("I don't know you yet. I asked the owner to let you talk to me; your request code is %s.", r.Code)
	out.Note(audit.KindAccessRequested, map[string]any{"request": r.ID, "identity": string(t.Sender), "code": r.Code})
	return nil
}

// ownerConversation finds a direct conversation with an owner on channel:
// config owners first, then owners bound by pairing.
func (a *Access) ownerConversation(ctx context.Context, ch core.ChannelName) (core.ConversationID, bool) {
	dm, ok := a.cfg.Channels[ch].(core.DirectMessenger)
	if !ok {
		return "", false
	}
	for _, id := range slices.Concat(a.cfg.Owners, a.cfg.Book.OwnersBound(ctx)) {
		if id.Platform() != string(ch) {
			continue
		}
		if conv, ok := dm.DirectConversation(id); ok {
			return conv, true
		}
	}
	return "", false
}

// Decision is what an owner's tap on an access card did.
type Decision struct {
	// Refused, when set, is why the tap changed nothing; Toast is what to
	// tell the tapper either way.
	Refused, Toast string
}

// Decide applies a tap on access request r's card inside the turn's
// transaction (st is the tapping turn, tr its sender's trust).
func (a *Access) Decide(ctx context.Context, tx *store.Tx, st core.StoredTurn, tr core.Trust, r core.AccessRequest, tap core.Tap, out Out) (Decision, error) {
	t := st.Turn
	refuse := func(reason, msg string) (Decision, error) { return Decision{Refused: reason, Toast: msg}, nil }
	if t.Conversation != r.OwnerConversation {
		return refuse("unknown_card", "Unknown card: nothing was changed.")
	}
	if tr != core.TrustOwner {
		return refuse("not_approver", fmt.Sprintf("You (%s) may not decide this card; nothing was changed.", t.Sender))
	}
	if r.Status != core.AccessPending {
		out.Update(render.Access(r))
		return refuse("already_decided", fmt.Sprintf("Already decided (%s): nothing was changed.", r.Status))
	}
	var status core.AccessStatus
	kind := audit.KindAccessDenied
	switch tap.Choice {
	case "allow":
		status, kind = core.AccessAllowed, audit.KindAccessAllowed
	case "deny":
		status = core.AccessDenied
	default:
		return refuse("bad_choice", "Unknown choice: nothing was changed.")
	}
	ok, err := tx.DecideAccessRequest(ctx, r.ID, status, t.Sender)
	if err != nil || !ok {
		return Decision{}, err
	}
	r.Status, r.DecidedBy = status, t.Sender
	d := Decision{Toast: "Denied."}
	if status == core.AccessAllowed {
		rec, sig, err := trust.SignBinding(a.cfg.Key, r.Identity, "auth", tx.Now())
		if err != nil {
			return Decision{}, err
		}
		tx.QueueBinding(r.Identity, "auth", rec, sig)
		// The trust book's cache predates the binding.
		out.After(a.cfg.Book.Invalidate)
		out.SendTo(r.Conversation, "r-"+core.NewID(),
			core.OutMessage{Conversation: r.Conversation, Text: "The owner allowed you: you can talk to Silas now. Try /help."})
		out.Note(audit.KindPairingBound, map[string]any{"identity": string(r.Identity), "role": "auth", "via": "access request " + r.ID})
		d.Toast = "Allowed."
	}
	out.Note(kind, map[string]any{"request": r.ID, "identity": string(r.Identity)})
	out.Update(render.Access(r))
	return d, nil
}

// NotifyOwners queues text as a plain notice to every owner (configured
// or bound by pairing) in the newest direct conversation that owner had
// with Silas on each running channel other than from — for a channel that
// cannot reach the owner itself any more (WhatsApp logged out). The
// notice goes through the outbox like any other message, so it is
// delivered after a restart too. It returns how many conversations it
// reached; 0 (no error) when no owner ever talked to Silas elsewhere.
func (a *Access) NotifyOwners(ctx context.Context, from core.ChannelName, text string) (int, error) {
	owners := slices.Concat(a.cfg.Owners, a.cfg.Book.OwnersBound(ctx))
	found, err := a.cfg.Store.DirectConversations(ctx, owners, from)
	if err != nil {
		return 0, fmt.Errorf("access: notify owners: %w", err)
	}
	var to []core.DirectConversation
	for _, d := range found {
		if _, ok := a.cfg.Channels[d.Channel]; ok && !slices.ContainsFunc(to, func(o core.DirectConversation) bool { return o.Conversation == d.Conversation }) {
			to = append(to, d)
		}
	}
	if len(to) == 0 {
		a.cfg.Logger.Warn("no owner can be told through another channel", slog.String("from", string(from)))
		return 0, nil
	}
	err = a.cfg.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		for _, d := range to {
			m := core.OutMessage{Conversation: d.Conversation, Text: text}
			if err := tx.QueueMessage(d.Channel, core.OpSend, "n-"+core.NewID(), m); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	if err != nil {
		return 0, fmt.Errorf("access: notify owners: %w", err)
	}
	for _, d := range to {
		a.cfg.Outbox.Kick(d.Conversation, 1)
	}
	return len(to), nil
}
