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

// SplitText splits s into parts of at most max, measured by width (how
// much one rune counts towards the platform's limit — for example its
// UTF-16 length once escaped). It splits on line boundaries where possible,
// then after a space, then anywhere on a rune boundary. Concatenating the
// parts gives s back. max must leave room for the widest rune.
func SplitText(s string, max int, width func(rune) int) []string {
	var parts []string
	var cur strings.Builder
	curLen := 0
	flush := func() {
		if cur.Len() > 0 {
			parts = append(parts, cur.String())
			cur.Reset()
			curLen = 0
		}
	}
	for line := range strings.SplitAfterSeq(s, "\n") {
		n := TextWidth(line, width)
		if curLen+n <= max {
			cur.WriteString(line)
			curLen += n
			continue
		}
		flush()
		for TextWidth(line, width) > max {
			head := fitPrefix(line, max, width)
			if head == "" {
				// A single rune wider than max: emit it alone rather than
				// loop forever.
				_, size := utf8.DecodeRuneInString(line)
				head = line[:size]
			}
			parts = append(parts, head)
			line = line[len(head):]
		}
		cur.WriteString(line)
		curLen = TextWidth(line, width)
	}
	flush()
	return parts
}

// TextWidth is s measured by width.
func TextWidth(s string, width func(rune) int) int {
	n := 0
	for _, r := range s {
		n += width(r)
	}
	return n
}

// fitPrefix returns the longest prefix of s that fits in max, preferring to
// end after a space when that keeps at least half of it.
func fitPrefix(s string, max int, width func(rune) int) string {
	used, end, lastSpace := 0, 0, -1
	for i, r := range s {
		w := width(r)
		if used+w > max {
			break
		}
		used += w
		end = i + utf8.RuneLen(r)
		if r == ' ' {
			lastSpace = end
		}
	}
	if lastSpace > end/2 {
		return s[:lastSpace]
	}
	return s[:end]
}
