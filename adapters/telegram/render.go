package telegram

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf16"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/internal/lazyre"
)

// Rendering: every message uses HTML parse mode. Everything that is not our
// own markup (command text, outputs, names, rationale…) goes through
// escapeHTML, so it can never open a tag, a link or an entity: "<b>x</b>"
// shows as those eight characters.

// MaxMessageLen is Telegram's limit on a message's text. Telegram counts
// UTF-16 code units after parsing the markup; the adapter counts the markup
// too, which is stricter, so a rendered message always fits.
const MaxMessageLen = 4096

// MaxInlineButtons is Telegram's limit on the buttons of one inline
// keyboard.
const MaxInlineButtons = 100

// MaxCallbackData is Telegram's limit on a button's callback_data, in bytes.
const MaxCallbackData = 64

// truncMark ends a field the adapter shortened to fit one message.
const truncMark = "… (truncated)"

// escapeHTML escapes the three characters Telegram's HTML mode gives
// meaning to. Quotes need no escaping outside attributes.
func escapeHTML(s string) string {
	if !strings.ContainsAny(s, "<>&") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// textLen is the length Telegram measures: UTF-16 code units.
func textLen(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// inlineKeyboard is Telegram's InlineKeyboardMarkup. The adapter uses its
// own type rather than models.InlineKeyboardMarkup: the SDK's button always
// serialises "copy_text":{"text":""} (a non-pointer struct with omitempty),
// which the Bot API rejects with BUTTON_COPY_TEXT_INVALID.
type inlineKeyboard struct {
	InlineKeyboard [][]inlineButton `json:"inline_keyboard"`
}

type inlineButton struct {
	Text         string `json:"text"`
	CallbackData string `json:"callback_data,omitempty"`
	URL          string `json:"url,omitempty"`
}

// Callback data: "c:<card id>:<choice id>". Card ids are the core's 26
// lower-case base32 characters (other ids up to 40 characters of
// A-Z a-z 0-9 _ - are accepted); choice ids are at most 16 characters.
var (
	cardIDRe   = lazyre.New(`^[A-Za-z0-9_-]{1,40}$`)
	choiceIDRe = lazyre.New(`^[A-Za-z0-9_-]{1,16}$`)
)

// callbackData encodes a choice as compact, opaque button data.
func callbackData(card cards.ID, choice string) (string, error) {
	if !cardIDRe.MatchString(string(card)) {
		return "", fmt.Errorf("card id %q cannot be carried in a Telegram button", card)
	}
	if !choiceIDRe.MatchString(choice) {
		return "", fmt.Errorf("choice id %q cannot be carried in a Telegram button", choice)
	}
	d := "c:" + string(card) + ":" + choice
	if len(d) > MaxCallbackData {
		return "", fmt.Errorf("callback data for card %s is %d bytes; Telegram allows %d", card, len(d), MaxCallbackData)
	}
	return d, nil
}

// parseCallbackData is the strict inverse of callbackData.
func parseCallbackData(d string) (card cards.ID, choice string, ok bool) {
	if len(d) > MaxCallbackData {
		return "", "", false
	}
	rest, found := strings.CutPrefix(d, "c:")
	if !found {
		return "", "", false
	}
	id, ch, found := strings.Cut(rest, ":")
	if !found || !cardIDRe.MatchString(id) || !choiceIDRe.MatchString(ch) {
		return "", "", false
	}
	return cards.ID(id), ch, true
}

// rendered is one message ready for sendMessage / editMessageText.
type rendered struct {
	html     string
	keyboard *inlineKeyboard // nil: no buttons
}

// renderCard renders a card as one HTML message with an inline keyboard.
// When it would exceed MaxMessageLen, the inline output is cut first (its
// output_ref, if any, leads to the whole of it), then the details, the
// affected items and the rationale. A card whose command alone cannot be
// shown in full loses its buttons: nobody is asked to approve something
// they cannot read.
func renderCard(c *cards.Card) (rendered, error) {
	if err := c.Validate(); err != nil {
		return rendered{}, err
	}
	kb, err := keyboard(c)
	if err != nil {
		return rendered{}, err
	}
	cc := *c
	cc.AffectedItems = append([]string(nil), c.AffectedItems...)
	r := rendered{html: cardHTML(&cc, false), keyboard: kb}
	// Cut fields in order until the message fits.
	for _, f := range []*string{&cc.Output, &cc.Details, &cc.Rationale} {
		for i := 0; textLen(r.html) > MaxMessageLen && *f != "" && i < 8; i++ {
			*f = cutBy(*f, textLen(r.html)-MaxMessageLen)
			r.html = cardHTML(&cc, false)
		}
	}
	for textLen(r.html) > MaxMessageLen && len(cc.AffectedItems) > 0 {
		cc.AffectedItems = cc.AffectedItems[:len(cc.AffectedItems)-1]
		r.html = cardHTML(&cc, false)
	}
	if textLen(r.html) > MaxMessageLen {
		// The command itself is too long: show its start, no buttons.
		r.keyboard = nil
		for i := 0; textLen(r.html) > MaxMessageLen && i < 8; i++ {
			cc.Command = cutBy(cc.Command, textLen(r.html)-MaxMessageLen)
			r.html = cardHTML(&cc, true)
		}
	}
	if textLen(r.html) > MaxMessageLen {
		return rendered{}, fmt.Errorf("card %s does not fit in one Telegram message", c.ID)
	}
	return r, nil
}

// keyboard builds the card's buttons: one row per choice, in the card's
// order (recommended first, decline last), while the card is open; a URL
// button for a secure-input link.
func keyboard(c *cards.Card) (*inlineKeyboard, error) {
	kb := &inlineKeyboard{}
	if c.Open() {
		for _, ch := range c.Choices {
			d, err := callbackData(c.ID, ch.ID)
			if err != nil {
				return nil, err
			}
			kb.InlineKeyboard = append(kb.InlineKeyboard, []inlineButton{{Text: ch.Label, CallbackData: d}})
		}
	}
	if c.Link != nil && linkButtonOK(c.Link.URL) && (c.Status == "" || c.Status.Open()) {
		label := c.Link.Label
		if strings.TrimSpace(label) == "" {
			label = "Open"
		}
		kb.InlineKeyboard = append(kb.InlineKeyboard, []inlineButton{{Text: label, URL: c.Link.URL}})
	}
	if len(kb.InlineKeyboard) == 0 {
		return nil, nil
	}
	return kb, nil
}

// linkButtonOK reports whether Telegram accepts u in a URL button. It
// refuses non-HTTPS and local addresses ("Wrong HTTP URL"); such links are
// shown as text instead.
func linkButtonOK(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "https" || p.Host == "" {
		return false
	}
	h := p.Hostname()
	return h != "localhost" && strings.Contains(h, ".") && !strings.HasPrefix(h, "127.")
}

// cardHTML lays a card out. commandClipped adds the note that replaces the
// buttons when the command could not be shown in full.
func cardHTML(c *cards.Card, commandClipped bool) string {
	var b strings.Builder
	if m := c.Risk.Mark(); m != "" {
		b.WriteString(m + " ")
	}
	b.WriteString("<b>" + escapeHTML(c.Intent) + "</b>\n")
	if c.Risk != "" {
		b.WriteString("<i>Risk: " + escapeHTML(string(c.Risk)) + "</i>\n")
	}
	if c.Rationale != "" {
		b.WriteString(escapeHTML(c.Rationale) + "\n")
	}
	if c.Command != "" {
		b.WriteString("<pre>" + escapeHTML(c.Command) + "</pre>\n")
	}
	if commandClipped {
		b.WriteString("<i>The command is too long to show here in full, so it cannot be approved from Telegram.</i>\n")
	}
	for _, it := range c.AffectedItems {
		b.WriteString("• " + escapeHTML(it) + "\n")
	}
	if c.Details != "" {
		if c.DetailsExpanded() {
			b.WriteString("<blockquote>" + escapeHTML(c.Details) + "</blockquote>\n")
		} else {
			b.WriteString("<blockquote expandable>" + escapeHTML(c.Details) + "</blockquote>\n")
		}
	}
	if c.Outcome != "" {
		b.WriteString("<b>Result:</b> " + escapeHTML(c.Outcome) + "\n")
	}
	if c.Output != "" {
		b.WriteString("<pre>" + escapeHTML(c.Output) + "</pre>\n")
	}
	if c.OutputRef != "" {
		b.WriteString("Full output stored as <code>" + escapeHTML(c.OutputRef) + "</code>\n")
	}
	if c.Link != nil && !linkButtonOK(c.Link.URL) {
		b.WriteString(escapeHTML(c.Link.Label) + ": " + escapeHTML(c.Link.URL) + "\n")
	}
	if s, ok := c.Status.Line(); ok {
		b.WriteString("<i>" + s + "</i>\n")
	}
	if c.Open() && c.ExpiresAt != "" {
		b.WriteString("<i>Decide before " + escapeHTML(c.ExpiresAt) + "</i>\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// cutBy shortens s so that its escaped form is at least n UTF-16 units
// shorter (the mark included), on a rune boundary.
func cutBy(s string, n int) string {
	target := textLen(escapeHTML(s)) - n - textLen(truncMark)
	if target <= 0 {
		return ""
	}
	var b strings.Builder
	used := 0
	for _, r := range s {
		w := escapedWidth(r)
		if used+w > target {
			break
		}
		b.WriteRune(r)
		used += w
	}
	return strings.TrimRight(b.String(), " \n") + truncMark
}

// escapedWidth is the UTF-16 length of r once escaped.
func escapedWidth(r rune) int {
	switch r {
	case '<', '>':
		return 4
	case '&':
		return 5
	}
	return utf16.RuneLen(r)
}
