package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
)

// AccessPolicy decides what happens to direct messages from senders
// without trust (external). Group messages are gated by the adapter.
type AccessPolicy string

const (
	// AccessOpen: anyone may talk; external trust still cannot run actions.
	AccessOpen AccessPolicy = "open"
	// AccessPairing: an unknown sender gets a request code and an owner
	// gets a card "Allow <name> to talk to Silas? [Allow] [Deny]".
	AccessPairing AccessPolicy = "pairing"
	// AccessAllowlist: only owners and allowed or paired identities are
	// answered; others are ignored (and audited).
	AccessAllowlist AccessPolicy = "allowlist"
	// AccessDisabled: only owners are answered in direct chats.
	AccessDisabled AccessPolicy = "disabled"
)

// Valid reports whether p is one of the four policies.
func (p AccessPolicy) Valid() bool {
	switch p {
	case AccessOpen, AccessPairing, AccessAllowlist, AccessDisabled:
		return true
	}
	return false
}

func (e *Engine) accessPolicy(ch core.ChannelName) AccessPolicy {
	if p, ok := e.cfg.Access[ch]; ok {
		return p
	}
	return AccessOpen
}

// gate applies the DM access policy; it returns false when the turn is not
// answered at all.
func (e *Engine) gate(o *outcome) bool {
	t := o.st.Turn
	if t.ChatKind == core.ChatGroup || o.trust == core.TrustOwner {
		return true
	}
	switch e.accessPolicy(t.Channel) {
	case AccessDisabled:
		o.note("access.ignored", map[string]any{"seq": o.st.Seq, "policy": "disabled"})
		return false
	case AccessAllowlist:
		if o.trust == core.TrustExternal {
			o.note("access.ignored", map[string]any{"seq": o.st.Seq, "policy": "allowlist"})
			return false
		}
	case AccessPairing:
		if o.trust == core.TrustExternal && t.Tap == nil && !isPairCommand(t.Text) {
			o.inTx = e.requestAccess
		}
	}
	return true
}

func isPairCommand(text string) bool {
	cmd, _, _ := parseCommand(text)
	return cmd == "/pair"
}

// requestAccess runs in the turn's transaction: one open request per
// identity, and one card to the first owner reachable on this channel.
func (e *Engine) requestAccess(ctx context.Context, tx *store.Tx, o *outcome) error {
	t := o.st.Turn
	if r, err := tx.OpenAccessRequest(ctx, t.Sender); err == nil {
		o.reply("Your request to talk to Silas (code %s) is waiting for the owner.", r.Code)
		return nil
	} else if !errors.Is(err, core.ErrNotFound) {
		return err
	}
	ownerConv, ok := e.ownerConversation(ctx, t.Channel)
	if !ok {
		o.note("access.unreachable_owner", map[string]any{"seq": o.st.Seq})
		o.reply("I don't know you yet, and no owner can be asked here. Ask the operator for a pairing code (`silas pair`), then send /pair <code>.")
		return nil
	}
	name := t.SenderName
	if name == "" {
		name = string(t.Sender)
	}
	r := store.AccessRequest{ID: core.NewID(), Channel: t.Channel, Identity: t.Sender, Name: clip(name, 64), Conversation: t.Conversation,
		Code: accessCode(), OwnerConversation: ownerConv, Status: "pending"}
	if err := tx.InsertAccessRequest(ctx, r); err != nil {
		return err
	}
	o.sends = append(o.sends, pendingSend{conv: ownerConv, key: r.ID, msg: core.OutMessage{Conversation: ownerConv, Card: accessCard(r)}})
	o.reply("I don't know you yet. I asked the owner to let you talk to me; your request code is %s.", r.Code)
	o.note("access.requested", map[string]any{"request": r.ID, "identity": string(t.Sender), "code": r.Code})
	return nil
}

// ownerConversation finds a direct conversation with an owner on channel:
// config owners first, then owners bound by pairing.
func (e *Engine) ownerConversation(ctx context.Context, ch core.ChannelName) (core.ConversationID, bool) {
	dm, ok := e.channels[ch].(core.DirectMessenger)
	if !ok {
		return "", false
	}
	for _, id := range append(append([]core.IdentityID(nil), e.cfg.Owners...), e.trust.ownersBound(ctx)...) {
		if id.Platform() != string(ch) {
			continue
		}
		if conv, ok := dm.DirectConversation(id); ok {
			return conv, true
		}
	}
	return "", false
}

const accessAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"

func accessCode() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = accessAlphabet[int(b[i])%len(accessAlphabet)]
	}
	return string(b)
}

func accessCard(r store.AccessRequest) *cards.Card {
	// The display name is the stranger's own choice: bidi controls in it
	// are shown, and the button names the sender by platform id.
	r.Name = cards.ShowBidi(r.Name)
	c := &cards.Card{
		ID:     cards.ID(r.ID),
		Kind:   cards.KindInfo,
		Intent: clip(fmt.Sprintf("Allow %s (%s) to talk to Silas?", r.Name, r.Identity), cards.MaxIntent),
		Rationale: fmt.Sprintf("They wrote to the bot in a private chat (request code %s). Allowing gives them auth trust: they can talk to Silas and ask for actions; owners still approve every action.",
			r.Code),
	}
	switch r.Status {
	case "pending":
		c.Status = cards.StatusPending
		c.Choices = []cards.Choice{{ID: "allow", Label: clip("Allow "+cards.ShowBidi(string(r.Identity)), cards.MaxLabel), Style: cards.StylePrimary, Kind: cards.ChoiceForward}, {ID: "deny", Label: "Deny", Style: cards.StyleDanger, Kind: cards.ChoiceDecline}}
	case "allowed":
		c.Status = cards.StatusApproved
		c.Outcome = fmt.Sprintf("Allowed by %s.", r.DecidedBy)
	case "denied":
		c.Status = cards.StatusDeclined
		c.Outcome = fmt.Sprintf("Denied by %s.", r.DecidedBy)
	}
	return c
}

// decideAccess applies an owner's tap on an access card.
func (e *Engine) decideAccess(ctx context.Context, tx *store.Tx, o *outcome, r store.AccessRequest, tap core.Tap, refuse func(reason, msg string) error) error {
	t := o.st.Turn
	if t.Conversation != r.OwnerConversation {
		return refuse("unknown_card", "Unknown card: nothing was changed.")
	}
	if o.trust != core.TrustOwner {
		return refuse("not_approver", fmt.Sprintf("You (%s) may not decide this card; nothing was changed.", t.Sender))
	}
	if r.Status != "pending" {
		o.updates = append(o.updates, accessCard(r))
		return refuse("already_decided", fmt.Sprintf("Already decided (%s): nothing was changed.", r.Status))
	}
	var status string
	switch tap.Choice {
	case "allow":
		status = "allowed"
	case "deny":
		status = "denied"
	default:
		return refuse("bad_choice", "Unknown choice: nothing was changed.")
	}
	ok, err := tx.DecideAccessRequest(ctx, r.ID, status, t.Sender)
	if err != nil || !ok {
		return err
	}
	r.Status, r.DecidedBy = status, t.Sender
	if status == "allowed" {
		rec, sig, err := SignBinding(e.cfg.Key, r.Identity, "auth", tx.Now())
		if err != nil {
			return err
		}
		if err := tx.UpsertBinding(ctx, r.Identity, "auth", rec, sig); err != nil {
			return err
		}
		o.after = append(o.after, e.trust.invalidate)
		o.sends = append(o.sends, pendingSend{conv: r.Conversation, key: "r-" + core.NewID(),
			msg: core.OutMessage{Conversation: r.Conversation, Text: "The owner allowed you: you can talk to Silas now. Try /help."}})
		o.note("pairing.bound", map[string]any{"identity": string(r.Identity), "role": "auth", "via": "access request " + r.ID})
		o.toast = "Allowed."
	} else {
		o.toast = "Denied."
	}
	o.note("access."+status, map[string]any{"request": r.ID, "identity": string(r.Identity)})
	o.updates = append(o.updates, accessCard(r))
	return nil
}
