package core

import (
	"time"

	"github.com/silas-gateway/silas/cards"
)

// TranscriptEntry is one message of a conversation as storage holds it: a
// user's message (the turn's text, as stored: credentials already redacted
// at intake) or a bot message in its latest stored state (the newest send
// or update of its message key, whether or not the platform has had it
// yet). Channels that keep no copy of their own, such as the web chat,
// show a conversation from these.
type TranscriptEntry struct {
	// FromUser: a user's turn (Seq, EventID set); otherwise a bot message
	// (MessageKey, OutboxID set).
	FromUser bool
	// Seq is the user turn's sequence number.
	Seq int64
	// EventID is the user turn's platform event id.
	EventID string
	// Sender is who sent a user's turn.
	Sender IdentityID
	// MessageKey is the core's name for a bot message (OutboxJob.MessageKey).
	MessageKey string
	// OutboxID is the id of the message's first outbox job (its position in
	// the conversation); Version is the id of the job its content comes
	// from (grows with every update).
	OutboxID, Version int64
	Text              string
	Card              *cards.Card
	// At is when the message was first stored.
	At time.Time
	// SecretOutput: the message carries the output of an action that
	// received a secret (OutMessage.SecretOutput). It is never put into a
	// model request: SecretOutputWithheld stands in its place.
	SecretOutput bool
}

// SecretOutputWithheld is what a model is told in place of the output of an
// action that received a secret: in a conversation's history, and as a
// task step's tool result. The output may hold the secret in a form no
// redaction finds, so no byte of it is given to a model.
const SecretOutputWithheld = "[output of a run that received a secret: not shown to the model]"
