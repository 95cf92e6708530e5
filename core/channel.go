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
