package core

import (
	"context"

	"github.com/silas-gateway/silas/cards"
)

// OutMessage is one message to show in a conversation: text, a card, or both.
type OutMessage struct {
	Conversation ConversationID `json:"conversation"`
	Text         string         `json:"text,omitempty"`
	Card         *cards.Card    `json:"card,omitempty"`
}

// Channel is the port every platform adapter implements. It is deliberately
// small: receive turns, send a message or card, update a sent message in
// place. Extras (deleting a message, threads, ephemeral replies) are optional
// interfaces the core discovers with a type assertion.
type Channel interface {
	// Name is the configured channel name; ConversationIDs start with it.
	Name() ChannelName
	// Run receives platform events and hands each to in.Deliver, acking the
	// platform only after Deliver returns. It returns when ctx is done.
	Run(ctx context.Context, in Inbox) error
	// Send shows a new message and returns the platform's reference to it.
	// A *RateLimitedError asks the caller to wait and retry; a
	// *PermanentError means retrying cannot help.
	Send(ctx context.Context, m OutMessage) (MessageRef, error)
	// Update edits a message Send returned, in place. Editing to identical
	// content is not an error.
	Update(ctx context.Context, ref MessageRef, m OutMessage) error
}

// MessageDeleter is an optional capability: remove a user's message (for
// example one that contained a credential).
type MessageDeleter interface {
	DeleteMessage(ctx context.Context, conv ConversationID, platformMessageID string) error
}

// TapAnswerer is an optional capability: answer a button tap with a short,
// transient notice (Telegram's answerCallbackQuery toast, Slack/Discord
// ephemeral replies). The engine calls it once per processed tap, after the
// decision committed; channels without it get the notice as a chat message
// only when the tap was refused.
type TapAnswerer interface {
	AnswerTap(ctx context.Context, t Turn, text string) error
}

// StateStore keeps small durable values for an adapter, such as Telegram's
// polling offset. Keys are per channel.
type StateStore interface {
	GetState(ctx context.Context, ch ChannelName, key string) (string, bool, error)
	SetState(ctx context.Context, ch ChannelName, key, value string) error
}

// DirectMessenger is an optional capability: name the direct conversation
// with an identity, so the core can reach an owner privately (for example
// to ask "Allow this sender?").
type DirectMessenger interface {
	DirectConversation(id IdentityID) (ConversationID, bool)
}

// Chat kinds (Turn.ChatKind).
const (
	ChatDirect = "direct"
	ChatGroup  = "group"
)

// TapCardAnswerer is an optional extension of TapAnswerer: answer a tap
// with a notice AND the card's new state in the same answer, as platforms
// that edit the tapped message through the tap's own response need
// (Discord's interaction response type 7, Slack's response_url with
// replace_original). card may be nil (notice only). It returns
// ErrNotSupported when it cannot show the card through this tap (the tap
// is no longer pending, the message is unknown); the caller then updates
// the card with Update as usual (the notice may have been shown already).
type TapCardAnswerer interface {
	AnswerTapWithCard(ctx context.Context, t Turn, text string, card *cards.Card) error
}

// Capabilities are what a channel can do beyond the Channel interface, in
// one place the core reads (in the spirit of mautrix bridgev2's network
// capabilities). A missing capability is answered with ErrNotSupported by
// the channel, or avoided by the core (no buttons: cards.PlainText and text
// replies instead).
type Capabilities struct {
	// EditInPlace: Update edits the sent message; otherwise the core shows
	// a card's new state as a new message.
	EditInPlace bool `json:"edit_in_place"`
	// Delete: the channel can delete a user's message (MessageDeleter).
	Delete bool `json:"delete"`
	// Ephemeral: the channel can show a notice only one person sees (a
	// tap's toast, an ephemeral reply).
	Ephemeral bool `json:"ephemeral"`
	// Threads: replies can go into a thread of the conversation.
	Threads bool `json:"threads"`
	// Buttons: cards are shown with buttons that send taps. Without them
	// the core sends cards.PlainText and the adapter reads text replies.
	Buttons bool `json:"buttons"`
	// MaxTextLen is the longest text of one message, in the platform's own
	// measure; 0 when the platform has no fixed limit. Send splits longer
	// texts itself; the core uses this to keep inline content short.
	MaxTextLen int `json:"max_text_len"`
	// MaxButtons is the most buttons one message can carry; 0 without
	// buttons.
	MaxButtons int `json:"max_buttons"`
}

// CapabilityReporter is an optional interface: a channel that declares its
// capabilities. CapabilitiesOf reads it.
type CapabilityReporter interface {
	Capabilities() Capabilities
}

// CapabilitiesOf returns ch's declared capabilities, or what the Channel
// contract and the optional interfaces ch implements imply: messages are
// edited in place and cards shown with buttons (every Channel promises
// that), deleting works with a MessageDeleter, nothing else is assumed.
func CapabilitiesOf(ch Channel) Capabilities {
	if r, ok := ch.(CapabilityReporter); ok {
		return r.Capabilities()
	}
	_, del := ch.(MessageDeleter)
	return Capabilities{EditInPlace: true, Delete: del, Buttons: true, MaxButtons: cards.MaxChoices}
}

// KeyedSender is an optional capability: Send, told the core's own durable
// name of the message (OutboxJob.MessageKey, unique per message). A channel
// that shows a conversation from the core's storage (TranscriptEntry) uses
// it to give a live message the same id the stored transcript gives it, so
// a client never sees one message twice. The outbox calls it instead of
// Send when the channel implements it.
type KeyedSender interface {
	SendKeyed(ctx context.Context, key string, m OutMessage) (MessageRef, error)
}

// Tap refusal reasons (TapOutcomeAnswerer): the tap changed nothing.
const (
	RefusedUnknownCard    = "unknown_card"
	RefusedNotApprover    = "not_approver"
	RefusedAlreadyDecided = "already_decided"
	RefusedExpired        = "expired"
	RefusedAltered        = "altered"
	RefusedUnsigned       = "unsigned"
	// RefusedBadChoice: the choice is not one the card offers now.
	RefusedBadChoice = "bad_choice"
	// RefusedStepUp: irreversible actions need a step-up confirmation the
	// gateway does not offer yet.
	RefusedStepUp = "step_up_unavailable"
)

// TapOutcomeAnswerer is an optional extension of TapAnswerer: the answer
// also says whether the tap was refused and why (one of the Refused*
// reasons; "" when the tap took effect), so a client can match a refusal
// to the tap that caused it in code rather than by its wording. The engine
// calls it instead of AnswerTap when the channel implements it.
type TapOutcomeAnswerer interface {
	TapAnswerer
	AnswerTapOutcome(ctx context.Context, t Turn, text, refused string) error
}
