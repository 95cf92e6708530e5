package core

import (
	"context"
	"time"

	"github.com/silas-gateway/silas/cards"
)

// OutMessage is one message to show in a conversation: text, a card, or both.
type OutMessage struct {
	Conversation ConversationID `json:"conversation"`
	Text         string         `json:"text,omitempty"`
	Card         *cards.Card    `json:"card,omitempty"`
	// CardText is Card as plain text (cards.PlainText), set by the outbox
	// lane for channels without buttons (Capabilities.Buttons), which show
	// it instead of a native card. Not stored.
	CardText string `json:"-"`
	// SecretOutput marks a message that carries the output of an action
	// that received a secret (shown after the owner's tap). It is stored
	// beside the payload (outbox.secret_output), never in it, and the
	// transcript reports it, so no model request carries the message.
	SecretOutput bool `json:"-"`
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

// Capabilities are what a channel can do beyond the Channel interface, in
// the one place the core reads them: the outbox lane's render step
// (core/outbox), in the spirit of mautrix bridgev2's network capabilities.
// Each flag names the core behaviour it switches; a channel that does not
// declare them (CapabilityReporter) gets what the Channel contract
// promises.
type Capabilities struct {
	// EditInPlace: Update edits the sent message. Without it the lane
	// shows a card's new state as a new message that names the card it
	// replaces.
	EditInPlace bool `json:"edit_in_place"`
	// Buttons: cards are shown with buttons that send taps. Without them
	// the lane hands the channel the card as plain text too
	// (OutMessage.CardText, cards.PlainText: numbered choices and the
	// "approve <id>" text fallback the adapter reads back as a tap).
	Buttons bool `json:"buttons"`
	// MaxTextLen is the longest text of one message, in runes; 0 when the
	// platform has no fixed limit. The lane splits a longer text into
	// several messages before Send (an adapter whose platform measures
	// otherwise, say in UTF-16 units or after markup, still fits each part
	// to its own measure).
	MaxTextLen int `json:"max_text_len"`
}

// CapabilityReporter is an optional interface: a channel that declares its
// capabilities. CapabilitiesOf reads it.
type CapabilityReporter interface {
	Capabilities() Capabilities
}

// CapabilitiesOf returns ch's declared capabilities, or what the Channel
// contract implies: messages are edited in place and cards shown with
// buttons (every Channel promises that), no length limit.
func CapabilitiesOf(ch Channel) Capabilities {
	if r, ok := ch.(CapabilityReporter); ok {
		return r.Capabilities()
	}
	return Capabilities{EditInPlace: true, Buttons: true}
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

// HeldSender is an optional capability of a channel that can send only
// through a connection one instance holds at a time (WhatsApp: the linked
// device, under its lease; issue 25). With several instances the outbox
// leaves such a conversation to the instance that holds the connection
// instead of retrying, here, sends that cannot succeed.
type HeldSender interface {
	// SendsHere reports whether this process holds the connection, up,
	// now.
	SendsHere() bool
	// OnSendsHere sets f to run each time this process comes to hold the
	// connection, up (the outbox then delivers what waited for it).
	OnSendsHere(f func())
}

// Paced is an optional capability of a channel whose platform allows one
// message per interval in a conversation (its adapter's rate limiter paces
// the sends of this process). With several instances, a conversation's
// delivery lane given up by one live instance is claimed by another only
// once ConversationPace has passed since (core/outbox/lanes.go): nothing
// else carries the pace from one process's limiter to another's. A channel
// without it is handed over at once.
type Paced interface {
	ConversationPace() time.Duration
}

// Tap refusal reasons (TapAnswer.Refused): the tap changed nothing.
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

// TapAnswer is the core's one answer to one tap. The transaction that
// decides the tap queues it as one outbox job (OpAnswer); the
// conversation's lane delivers it once, in order with the conversation's
// other messages, with the tapped card's new state. Later states of the
// card are ordinary updates.
type TapAnswer struct {
	Conversation ConversationID `json:"conversation"`
	// EventID is the tap turn's Turn.EventID.
	EventID string `json:"event_id"`
	// Sender tapped.
	Sender IdentityID `json:"sender"`
	// Tap is what was tapped.
	Tap Tap `json:"tap"`
	// Handle is the tap turn's Turn.TapHandle, as the adapter gave it.
	Handle string `json:"handle,omitempty"`
	// Card is the tapped card's new state (Card.ID == Tap.Card); nil when
	// the tap changed no card this conversation may see (an unknown card,
	// an altered request).
	Card *cards.Card `json:"card,omitempty"`
	// Text is the notice for the tapper; "" when there is nothing to say
	// (the answer then only ends the platform's wait).
	Text string `json:"notice,omitempty"`
	// Refused is why the tap changed nothing (a Refused* reason); "" when
	// it took effect.
	Refused string `json:"refused,omitempty"`
	// Ref is the card's message as the platform knows it, set by the lane
	// when Card is set ("" when it was never delivered). Not stored.
	Ref MessageRef `json:"-"`
	// CardText is Card as plain text, set by the lane for channels
	// without buttons (Capabilities.Buttons). Not stored.
	CardText string `json:"-"`
}

// TapAnswerer is an optional capability: answer a tap the platform's way,
// with the notice and the card's new state together (Telegram's
// answerCallbackQuery after editing the card, Slack's chat.update and an
// ephemeral notice, Discord's interaction response type 7, the web chat's
// tap_result). The lane calls it exactly once per tap; it must show
// a.Card on the tapped message (or a.Ref) itself. A channel without it
// gets the card as an Update and, for a refusal, the notice as a message.
// An error is retried like any delivery: answering again must be harmless
// (an identical edit, a notice the platform refuses as answered).
type TapAnswerer interface {
	AnswerTap(ctx context.Context, a TapAnswer) error
}

// RepeatableAnswerer is an optional capability of a TapAnswerer: whether
// AnswerTap(a), done a second time, shows nobody anything new (the card's
// edit is identical and the platform takes one answer per tap, quietly
// refusing the rest). The outbox then records the answer's delivery
// lazily, as it does an in-place edit of a card (core/outbox marks.go).
type RepeatableAnswerer interface {
	AnswerRepeatable(a TapAnswer) bool
}
