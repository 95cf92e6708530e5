package core

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/silas-gateway/silas/cards"
)

// Evidence is what the adapter observed about how a turn was authenticated.
// The adapter reports facts; the core decides trust from them together with
// identity bindings. Nothing in the message text can raise trust.
type Evidence struct {
	// Authenticated is true when the platform request was authenticated
	// (webhook secret, request signature, logged-in session, E2E session).
	// Unauthenticated requests never reach the core at all; this field exists
	// so the core can refuse a turn an adapter forgot to check.
	Authenticated bool `json:"authenticated"`
	// Method names how ("webchat-session", "telegram-webhook-secret", …).
	Method string `json:"method"`
}

// Tap is a button press (or a validated text reply such as "approve <id>")
// coming back from a card. It carries only opaque ids.
type Tap struct {
	Card   cards.ID `json:"card"`
	Choice string   `json:"choice"`
}

// Turn is one inbound event, normalised by an adapter.
type Turn struct {
	Channel      ChannelName    `json:"channel"`
	Conversation ConversationID `json:"conversation"`
	Sender       IdentityID     `json:"sender"`
	SenderName   string         `json:"sender_name,omitempty"`
	// EventID is the platform's own id for this event; (Channel, EventID) is
	// unique, which makes redelivery a no-op.
	EventID string `json:"event_id"`
	// PlatformMessageID is the platform's id of the user's message (so a
	// message that leaked a credential can be deleted); empty for taps.
	PlatformMessageID string `json:"platform_message_id,omitempty"`
	// ChatKind is "direct" (a one-to-one chat with the bot) or "group". The
	// DM access policy applies to direct chats; adapters gate groups
	// themselves (mentions, replies, /command@bot).
	ChatKind string `json:"chat_kind,omitempty"`
	// ReplyTo is the platform ref (as the outbox records it for a card) of
	// the bot's own message this one replies to, set by adapters that know
	// it (a flow's gate takes a reply to its card as its answer); empty
	// otherwise. Only a reply to the bot's own message is carried.
	ReplyTo MessageRef `json:"reply_to,omitempty"`
	// ReplyIn is the conversation of the message ReplyTo names when the
	// platform puts the reply in another one (a Slack reply in the thread
	// under a top-level card is the thread's conversation); empty: this
	// turn's own. Set by the adapter from the authenticated event only.
	ReplyIn ConversationID `json:"reply_in,omitempty"`
	Text    string         `json:"text,omitempty"`
	Tap     *Tap           `json:"tap,omitempty"`
	// TapHandle is what the adapter needs to answer this tap later, opaque
	// to the core (Telegram's callback query id, Slack's response_url,
	// Discord's interaction token). It is stored with the turn and handed
	// back in TapAnswer.Handle, so an answer after a restart still works
	// or fails cleanly; the adapter keeps no registry of pending taps. It
	// is never shown to an agent or written to the audit log, and is
	// stored sealed (core/tapseal): the engine seals it at intake, the
	// outbox lane opens it for AnswerTap. Taps only.
	TapHandle string `json:"tap_handle,omitempty"`
	// Redacted lists the kinds of credential the core removed from Text at
	// intake (set by the core; adapters leave it empty).
	Redacted []string `json:"redacted,omitempty"`
	// Sanitized lists the fields in which the core replaced characters
	// that cannot be stored (NUL, invalid UTF-8) by U+FFFD at intake (set
	// by the core; adapters leave it empty).
	Sanitized []string  `json:"sanitized,omitempty"`
	Evidence  Evidence  `json:"evidence"`
	At        time.Time `json:"at"`
}

// DeliverResult tells the adapter what happened to a delivered turn.
type DeliverResult struct {
	// Seq is the turn's durable sequence number.
	Seq int64
	// Duplicate is true when the event had been delivered before; the adapter
	// acknowledges it to the platform and does nothing else.
	Duplicate bool
}

// Inbox is the one entry point for inbound turns. Deliver returns only once
// the turn is stored durably; adapters acknowledge the platform afterwards.
type Inbox interface {
	Deliver(ctx context.Context, t Turn) (DeliverResult, error)
}

// Limits of a turn's fields that do not depend on configuration.
const (
	MaxEventID   = 200  // bytes
	MaxTapCard   = 64   // bytes
	MaxTapChoice = 16   // bytes
	MaxTapHandle = 2048 // bytes
)

// RepliedIn is the conversation of the message t replies to (ReplyIn,
// else t's own).
func (t Turn) RepliedIn() ConversationID {
	if t.ReplyIn != "" {
		return t.ReplyIn
	}
	return t.Conversation
}

// Validate is the one check of a turn's shape, the same for every channel:
// the engine runs it at intake and adapters' tests hold every turn they
// produce to it. It returns a *RejectedError. What depends on the
// deployment — whether the channel is configured, the text length limit —
// the engine checks on top.
//
// A tap typed as text ("approve <id>") becomes the same Tap as a button
// and passes the same check; whether its sender may decide is the core's
// question, not the shape's.
func (t Turn) Validate() error {
	bad := func(f string, a ...any) error { return &RejectedError{Reason: fmt.Sprintf(f, a...)} }
	if t.Channel == "" {
		return bad("channel is required")
	}
	if !strings.HasPrefix(string(t.Conversation), string(t.Channel)+":") || len(t.Conversation) == len(t.Channel)+1 {
		return bad("conversation %q does not belong to channel %q", t.Conversation, t.Channel)
	}
	if t.ReplyIn != "" && !strings.HasPrefix(string(t.ReplyIn), string(t.Channel)+":") {
		return bad("reply_in %q does not belong to channel %q", t.ReplyIn, t.Channel)
	}
	if p, id, ok := strings.Cut(string(t.Sender), ":"); !ok || p == "" || id == "" {
		return bad("sender %q is not an identity (platform:id)", t.Sender)
	}
	if t.EventID == "" || len(t.EventID) > MaxEventID {
		return bad("event id must be 1-%d bytes", MaxEventID)
	}
	if !t.Evidence.Authenticated {
		// Adapters must reject unauthenticated requests before the core;
		// one that reaches it anyway is refused, not processed.
		return bad("unauthenticated request")
	}
	switch t.ChatKind {
	case "", ChatDirect, ChatGroup:
	default:
		// The DM policy applies to "direct": an unknown kind must not
		// slip past it.
		return bad("chat kind %q is neither %q nor %q", t.ChatKind, ChatDirect, ChatGroup)
	}
	if !utf8.ValidString(t.Text) {
		return bad("text is not valid UTF-8")
	}
	if t.Tap != nil && (t.Tap.Card == "" || t.Tap.Choice == "" || len(t.Tap.Card) > MaxTapCard || len(t.Tap.Choice) > MaxTapChoice) {
		return bad("malformed tap")
	}
	if len(t.TapHandle) > MaxTapHandle || (t.TapHandle != "" && t.Tap == nil) {
		return bad("tap handle must be at most %d bytes, on a tap", MaxTapHandle)
	}
	return nil
}
