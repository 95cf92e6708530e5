package kit

import (
	"strconv"
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// Text fallback: where a platform (or a moment — a notification preview, a
// client without buttons) cannot show buttons, cards.Card.PlainText lists
// the choices as
//
//	1. Run `uname -a` — reply "approve <card id>"
//	2. Decline — reply "decline <card id>"
//
// and ParseTextTap turns the reply back into the very core.Tap the button
// would have sent. The core validates it exactly like a button — the card
// must exist and be open, the sender must be an approver, the choice must be
// one the card's state allows — so a typed reply can do nothing a tap could
// not. The parser only decides whether a message is meant as a tap at all,
// and it is strict about that: anything else stays a normal message.

// TextChoices are the choice ids a reply may name without quoting a card:
// the ones the core's cards use. A reply quoting a card may name any of
// that card's choices.
var TextChoices = []string{"approve", "confirm", "decline", "allow", "deny"}

// Quoted is the card a reply quotes (replies to): its id and its choice ids
// in the order PlainText numbers them. Adapters that map a platform message
// to the card it shows pass it; others pass nil.
type Quoted struct {
	Card    cards.ID
	Choices []string
}

// QuotedCard describes an open card for ParseTextTap; nil when the card
// takes no taps.
func QuotedCard(c *cards.Card) *Quoted {
	if c == nil || !c.Open() {
		return nil
	}
	q := &Quoted{Card: c.ID}
	for _, ch := range c.Choices {
		q.Choices = append(q.Choices, ch.ID)
	}
	return q
}

// maxTextTap bounds the text considered: a tap reply is two short words.
const maxTextTap = 128

// ParseTextTap reads a text reply as a tap. Accepted, with surrounding
// spaces and one pair of quotes ignored and choice words in any case:
//   - "<choice> <card id>", where choice is one of TextChoices (or of the
//     quoted card's choices) and the card id has the shape of the core's
//     ids (26 characters a-z 2-7; typed in any case);
//   - with a quoted card: "<n>" (optionally "<n>." or "<n>)") for its n-th
//     choice, or "<choice>" alone.
//
// It reports false for everything else, which the adapter delivers as
// ordinary text.
func ParseTextTap(text string, quoted *Quoted) (core.Tap, bool) {
	if len(text) > maxTextTap {
		return core.Tap{}, false
	}
	s := unquote(strings.TrimSpace(text))
	fields := strings.Fields(s)
	switch len(fields) {
	case 1:
		if quoted == nil || !validQuoted(quoted) {
			return core.Tap{}, false
		}
		w := strings.TrimRight(fields[0], ".)")
		if n, err := strconv.Atoi(w); err == nil && w == strconv.Itoa(n) {
			if n < 1 || n > len(quoted.Choices) || !validChoice(quoted.Choices[n-1]) {
				return core.Tap{}, false
			}
			return core.Tap{Card: quoted.Card, Choice: quoted.Choices[n-1]}, true
		}
		if ch, ok := findChoice(fields[0], quoted.Choices); ok {
			return core.Tap{Card: quoted.Card, Choice: ch}, true
		}
	case 2:
		id := strings.ToLower(fields[1])
		if !isCoreID(id) {
			return core.Tap{}, false
		}
		if ch, ok := findChoice(fields[0], TextChoices); ok {
			return core.Tap{Card: cards.ID(id), Choice: ch}, true
		}
		if quoted != nil && validQuoted(quoted) && string(quoted.Card) == id {
			if ch, ok := findChoice(fields[0], quoted.Choices); ok {
				return core.Tap{Card: quoted.Card, Choice: ch}, true
			}
		}
	}
	return core.Tap{}, false
}

// unquote drops one pair of surrounding quotes, straight or curly, as
// people copy the reply PlainText shows in quotes.
func unquote(s string) string {
	for _, p := range [][2]string{{`"`, `"`}, {"“", "”"}, {"„", "“"}, {"'", "'"}, {"«", "»"}} {
		if len(s) >= len(p[0])+len(p[1]) && strings.HasPrefix(s, p[0]) && strings.HasSuffix(s, p[1]) {
			return strings.TrimSpace(s[len(p[0]) : len(s)-len(p[1])])
		}
	}
	return s
}

// findChoice matches a typed word against choice ids, ignoring case, and
// returns the id as the card spells it.
func findChoice(word string, choices []string) (string, bool) {
	for _, c := range choices {
		if validChoice(c) && strings.EqualFold(word, c) {
			return c, true
		}
	}
	return "", false
}

// validQuoted holds a quoted card to what a button could carry.
func validQuoted(q *Quoted) bool {
	return q.Card != "" && len(q.Card) <= core.MaxTapCard
}

// validChoice holds a choice id to what a button could carry.
func validChoice(c string) bool {
	return c != "" && len(c) <= core.MaxTapChoice && !strings.ContainsAny(c, ": \t\n")
}

// isCoreID reports the shape of core.NewID: 26 characters of a-z and 2-7.
func isCoreID(s string) bool {
	if len(s) != 26 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}
