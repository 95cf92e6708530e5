package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/commands"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/trust"
)

func (e *Engine) accessPolicy(ch core.ChannelName) trust.AccessPolicy {
	if p, ok := e.cfg.Access[ch]; ok {
		return p
	}
	return trust.AccessOpen
}

// gate applies the DM access policy; it returns false when the turn is not
// answered at all.
func (e *Engine) gate(o *outcome) bool {
	t := o.st.Turn
	if t.ChatKind == core.ChatGroup || o.trust == core.TrustOwner {
		return true
	}
	switch e.accessPolicy(t.Channel) {
	case trust.AccessDisabled:
		o.note(audit.KindAccessIgnored, map[string]any{"seq": o.st.Seq, "policy": "disabled"})
		return false
	case trust.AccessAllowlist:
		if o.trust == core.TrustExternal {
			o.note(audit.KindAccessIgnored, map[string]any{"seq": o.st.Seq, "policy": "allowlist"})
			return false
		}
	case trust.AccessPairing:
		if o.trust == core.TrustExternal && t.Tap == nil && !commands.Parse(t.Text).Stranger {
			o.inTx = e.requestAccess
		}
	}
	return true
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
		o.note(audit.KindAccessUnreachableOwner, map[string]any{"seq": o.st.Seq})
		o.reply("I don't know you yet, and no owner can be asked here. Ask the operator for a pairing code (`silas pair`), then send /pair <code>.")
		return nil
	}
	name := t.SenderName
	if name == "" {
		name = string(t.Sender)
	}
	r := store.AccessRequest{ID: core.NewID(), Channel: t.Channel, Identity: t.Sender, Name: render.Clip(name, 64), Conversation: t.Conversation,
		Code: trust.NewAccessCode(), OwnerConversation: ownerConv, Status: core.AccessPending}
	if err := tx.InsertAccessRequest(ctx, r); err != nil {
		return err
	}
	o.sends = append(o.sends, pendingSend{conv: ownerConv, key: r.ID, msg: core.OutMessage{Conversation: ownerConv, Card: render.Access(r)}})
	o.reply("I don't know you yet. I asked the owner to let you talk to me; your request code is %s.", r.Code)
	o.note(audit.KindAccessRequested, map[string]any{"request": r.ID, "identity": string(t.Sender), "code": r.Code})
	return nil
}

// ownerConversation finds a direct conversation with an owner on channel:
// config owners first, then owners bound by pairing.
func (e *Engine) ownerConversation(ctx context.Context, ch core.ChannelName) (core.ConversationID, bool) {
	dm, ok := e.channels[ch].(core.DirectMessenger)
	if !ok {
		return "", false
	}
	for _, id := range append(append([]core.IdentityID(nil), e.cfg.Owners...), e.trust.OwnersBound(ctx)...) {
		if id.Platform() != string(ch) {
			continue
		}
		if conv, ok := dm.DirectConversation(id); ok {
			return conv, true
		}
	}
	return "", false
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
	if r.Status != core.AccessPending {
		o.updates = append(o.updates, render.Access(r))
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
		return err
	}
	r.Status, r.DecidedBy = status, t.Sender
	if status == core.AccessAllowed {
		rec, sig, err := trust.SignBinding(e.cfg.Key, r.Identity, "auth", tx.Now())
		if err != nil {
			return err
		}
		tx.QueueBinding(r.Identity, "auth", rec, sig)
		o.after = append(o.after, e.trust.Invalidate)
		o.sends = append(o.sends, pendingSend{conv: r.Conversation, key: "r-" + core.NewID(),
			msg: core.OutMessage{Conversation: r.Conversation, Text: "The owner allowed you: you can talk to Silas now. Try /help."}})
		o.note(audit.KindPairingBound, map[string]any{"identity": string(r.Identity), "role": "auth", "via": "access request " + r.ID})
		o.toast = "Allowed."
	} else {
		o.toast = "Denied."
	}
	o.note(kind, map[string]any{"request": r.ID, "identity": string(r.Identity)})
	o.updates = append(o.updates, render.Access(r))
	return nil
}
