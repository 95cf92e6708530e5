package core

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"
)

// StorableText returns s with what PostgreSQL cannot store in a text or
// jsonb value — the NUL character and invalid UTF-8 — replaced by U+FFFD,
// and whether anything was replaced. Every other character is kept.
//
// Outside input (a platform message, a name a stranger chose, program
// output) goes through this at the store boundary, so a single NUL cannot
// make a turn or a result unstorable and its work retry forever.
func StorableText(s string) (string, bool) {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s, false
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD"), true
}

// DeadLetter is an inbound platform event that could not be delivered after
// a bounded number of attempts (or failed in a way retrying cannot fix). It
// is kept raw for the operator, so one poisoned event never blocks the
// events after it. An adapter fills Channel to Attempts when it gives up;
// the store fills the rest when it lists what it keeps.
type DeadLetter struct {
	// ID is the stored row's id (0 until stored).
	ID      int64
	Channel ChannelName
	// EventID is the platform's id for the event ("" when unreadable).
	EventID string
	// Payload is the event as received (the store redacts credentials in
	// it before keeping it).
	Payload  []byte
	Error    string
	Attempts int
	// FirstSeen and LastSeen: when the event was first and last
	// quarantined (a redelivery quarantined again updates the row).
	FirstSeen time.Time
	LastSeen  time.Time
}

// Quarantiner is an optional capability of an Inbox: adapters type-assert
// it and, when present, hand it an event they are giving up on before they
// acknowledge the platform. An error means it was not kept; the adapter
// must then not acknowledge the event either.
type Quarantiner interface {
	Quarantine(ctx context.Context, d DeadLetter) error
}
