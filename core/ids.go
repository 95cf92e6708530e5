package core

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

// ChannelName names one configured channel ("webchat", "telegram"…). It is
// unique within one gateway.
type ChannelName string

// ConversationID identifies one conversation across all channels. Adapters
// build it as "<channel>:<platform chat id>", so it is globally unique.
type ConversationID string

// IdentityID identifies one sender across all channels, as
// "<platform>:<platform user id>" (for example "telegram:123456",
// "webchat:local"). Trust is bound to IdentityIDs, never to display names.
type IdentityID string

// Platform returns the part of the identity before the first colon.
func (id IdentityID) Platform() string {
	p, _, _ := strings.Cut(string(id), ":")
	return p
}

// MessageRef is the platform's own id for a message Silas sent, used to edit
// that message in place. Its format belongs to the adapter.
type MessageRef string

// ApprovalID identifies one approval request. The approval card carries the
// same value as its card id.
type ApprovalID string

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a random, unguessable identifier: 128 bits of crypto/rand in
// 26 lower-case base32 characters. It is short enough for Telegram's 64-byte
// callback data together with a choice name.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand never fails on Linux; if it does, nothing that follows
		// can be trusted either.
		panic("core: crypto/rand failed: " + err.Error())
	}
	return idEncoding.EncodeToString(b[:])
}
