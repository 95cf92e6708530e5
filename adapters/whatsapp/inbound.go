package whatsapp

import (
	"strings"
	"unicode/utf8"

	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/commands/catalog"
	"github.com/silas-gateway/silas/internal/lazyre"
)

// Inbound conversion: one *events.Message becomes at most one core.Turn.
// Pure (no clock, no I/O) and must never panic on any input
// (FuzzMessageToTurn). Poll votes need decryption and are read in vote.go.

type action int

const (
	actIgnore action = iota
	actDeliver
)

type inbound struct {
	act    action
	reason string
	turn   core.Turn
	// quoted is the id of the message the text quotes ("" for none): a
	// numbered reply to a card.
	quoted string
	// typed is the text as written, read as a tap before it is read as a
	// command ("stop" quoting a card is that card's choice).
	typed string
}

// self is what the adapter knows about its own account.
type self struct {
	pn, lid types.JID // non-AD
}

func (s self) is(j types.JID) bool {
	j = j.ToNonAD()
	return !j.IsEmpty() && (j == s.pn || (!s.lid.IsEmpty() && j == s.lid))
}

// lidMap resolves a LID to the phone-number JID (whatsmeow's LID store);
// the zero JID when unknown.
type lidMap func(lid types.JID) types.JID

// phoneOf is the phone-number JID of a user, or the zero JID when WhatsApp
// handed over a LID whose number is unknown.
func phoneOf(j, alt types.JID, lids lidMap) types.JID {
	j = j.ToNonAD()
	switch j.Server {
	case types.DefaultUserServer:
		return j
	case types.HiddenUserServer:
		if alt = alt.ToNonAD(); alt.Server == types.DefaultUserServer {
			return alt
		}
		if lids != nil {
			if pn := lids(j); pn.Server == types.DefaultUserServer {
				return pn.ToNonAD()
			}
		}
	}
	return types.JID{}
}

var digitsRe = lazyre.New(`^[0-9]{5,20}$`)

// identityOf is "whatsapp:<phone digits>", or — when WhatsApp hides the
// number behind a LID the LID store cannot map — "whatsapp:lid-<lid>",
// which matches no configured owner or allowlist entry (those are phone
// numbers), so such a sender is treated as unknown until the mapping is
// learnt (docs/whatsapp.md).
func identityOf(j, alt types.JID, lids lidMap) (core.IdentityID, bool) {
	if pn := phoneOf(j, alt, lids); pn.User != "" && digitsRe.MatchString(pn.User) {
		return core.IdentityID("whatsapp:" + pn.User), true
	}
	j = j.ToNonAD()
	if j.Server == types.HiddenUserServer && digitsRe.MatchString(j.User) {
		return core.IdentityID("whatsapp:lid-" + j.User), true
	}
	return "", false
}

// chatOf is the JID Silas keeps a conversation under: a direct chat under
// the other person's phone number when known (WhatsApp may name the same
// chat by LID or by number), a group under its group JID.
func chatOf(info types.MessageInfo, lids lidMap) (types.JID, bool) {
	c := info.Chat.ToNonAD()
	switch c.Server {
	case types.GroupServer:
		return c, c.User != ""
	case types.DefaultUserServer, types.HiddenUserServer:
		alt := info.SenderAlt
		if info.IsFromMe {
			alt = info.RecipientAlt
		}
		if pn := phoneOf(c, alt, lids); !pn.IsEmpty() {
			return pn, true
		}
		return c, c.User != ""
	}
	return types.JID{}, false
}

func conversation(ch core.ChannelName, chat types.JID) core.ConversationID {
	return core.ConversationID(string(ch) + ":" + chat.String())
}

// textOf returns a message's text and the context (quote, mentions) of an
// extended text message.
func textOf(m *waE2E.Message) (string, *waE2E.ContextInfo) {
	if m == nil {
		return "", nil
	}
	if t := m.GetConversation(); t != "" {
		return t, nil
	}
	if et := m.GetExtendedTextMessage(); et != nil {
		return et.GetText(), et.GetContextInfo()
	}
	return "", nil
}

// messageToTurn converts a message. me is this account; lids resolves
// LIDs. Poll votes, reactions, edits, media without text, status updates,
// broadcasts, newsletters and our own messages (except the owner's own
// "Message yourself" chat when Silas is linked to the owner's number) are
// ignored with a reason.
func messageToTurn(evt *events.Message, me self, lids lidMap, ch core.ChannelName) inbound {
	if evt == nil || evt.Message == nil {
		return inbound{reason: "empty event"}
	}
	info := evt.Info
	switch {
	case info.ID == "" || len(info.ID) > 128:
		return inbound{reason: "message without a usable id"}
	case info.Chat.Server == types.BroadcastServer || info.Chat.Server == types.NewsletterServer || info.Chat.IsBroadcastList():
		return inbound{reason: "status update, broadcast or newsletter"}
	case evt.IsEdit:
		return inbound{reason: "an edit of an earlier message (only new messages are turns)"}
	case evt.Message.GetPollUpdateMessage() != nil:
		return inbound{reason: "poll vote (read separately)"}
	case evt.Message.GetProtocolMessage() != nil || evt.Message.GetReactionMessage() != nil:
		return inbound{reason: "protocol message or reaction"}
	}
	selfChat := info.IsFromMe && me.is(info.Chat)
	if info.IsFromMe && !selfChat {
		return inbound{reason: "sent by this account to someone else"}
	}
	text, ci := textOf(evt.Message)
	if !utf8.ValidString(text) {
		return inbound{reason: "text is not valid UTF-8"}
	}
	text = strings.TrimSpace(text)
	chat, ok := chatOf(info, lids)
	if !ok {
		return inbound{reason: "chat is neither a person nor a group"}
	}
	sender, ok := identityOf(info.Sender, info.SenderAlt, lids)
	if selfChat {
		sender, ok = identityOf(me.pn, types.JID{}, nil)
	}
	if !ok {
		return inbound{reason: "sender is not a WhatsApp user"}
	}
	kind := core.ChatDirect
	if chat.Server == types.GroupServer {
		kind = core.ChatGroup
		if !addressed(ci, me) {
			return inbound{reason: "group message neither mentioning Silas nor replying to it"}
		}
		text = stripMentions(text, me)
	}
	typed := text
	text = catalog.Text(text)
	if text == "" {
		return inbound{reason: "no text (media, sticker, location …)"}
	}
	t := core.Turn{Channel: ch, Conversation: conversation(ch, chat), Sender: sender,
		SenderName: displayName(info.PushName), EventID: eventID(info), ChatKind: kind, Text: text,
		PlatformMessageID: platformID(info.Sender, info.ID),
		Evidence:          core.Evidence{Authenticated: true, Method: MethodE2E}}
	if !info.Timestamp.IsZero() {
		t.At = info.Timestamp.UTC()
	}
	if id := ci.GetStanzaID(); id != "" && len(id) <= 128 {
		if j, err := types.ParseJID(ci.GetParticipant()); err == nil && me.is(j) {
			// A reply quoting the bot's own message: its ref as the outbox
			// recorded it, so a flow's card takes the reply.
			t.ReplyTo = ref(chat, id)
		}
	}
	return inbound{act: actDeliver, turn: t, quoted: ci.GetStanzaID(), typed: typed}
}

// eventID makes the core's dedupe key from the message id. WhatsApp ids
// are random per sending device; the sender's user keeps two people's ids
// apart.
func eventID(info types.MessageInfo) string {
	return "m" + info.Sender.User + "/" + info.ID
}

// platformID is Turn.PlatformMessageID: "<sender JID>/<message id>", what
// a revoke needs.
func platformID(sender types.JID, id types.MessageID) string {
	return sender.ToNonAD().String() + "/" + id
}

func parsePlatformID(s string) (types.JID, types.MessageID, bool) {
	j, id, ok := strings.Cut(s, "/")
	if !ok || id == "" {
		return types.JID{}, "", false
	}
	jid, err := types.ParseJID(j)
	if err != nil || jid.User == "" {
		return types.JID{}, "", false
	}
	return jid, id, true
}

// addressed: the group message mentions this account or replies to one
// of its messages.
func addressed(ci *waE2E.ContextInfo, me self) bool {
	if ci == nil {
		return false
	}
	for _, m := range ci.GetMentionedJID() {
		if j, err := types.ParseJID(m); err == nil && me.is(j) {
			return true
		}
	}
	if ci.GetStanzaID() != "" {
		if j, err := types.ParseJID(ci.GetParticipant()); err == nil && me.is(j) {
			return true
		}
	}
	return false
}

// stripMentions removes "@<own number or LID>" from a group message.
func stripMentions(text string, me self) string {
	for _, u := range []string{me.pn.User, me.lid.User} {
		if u != "" {
			text = strings.ReplaceAll(text, "@"+u, "")
		}
	}
	return strings.Join(strings.Fields(text), " ")
}

func displayName(n string) string {
	n = strings.ToValidUTF8(strings.TrimSpace(n), "�")
	if utf8.RuneCountInString(n) > 64 {
		n = string([]rune(n)[:64])
	}
	return n
}
