package cards

import (
	"fmt"
	"strings"
)

// Bidirectional control characters (U+202A–U+202E, U+2066–U+2069) reorder
// the text around them: "Run `ls \u202Efdp.exe`" can display as something
// else than what runs. Text from users (names, commands, output) is shown
// with each of them made visible as "<U+202E>" instead.

func isBidiControl(r rune) bool {
	return (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069)
}

// ShowBidi returns s with every bidi control character replaced by its
// visible name, e.g. "<U+202E>".
func ShowBidi(s string) string { return showRunes(s, isBidiControl) }

// showRunes replaces each rune of s that hidden reports by its visible
// name.
func showRunes(s string, hidden func(rune) bool) string {
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if hidden(r) {
			fmt.Fprintf(&b, "<U+%04X>", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ShowBidiControls makes bidi control characters visible in every text
// field of c (see ShowBidi). Call it after building a card from user
// text and before limits are checked, since it lengthens the text.
func (c *Card) ShowBidiControls() {
	for _, p := range []*string{&c.Intent, &c.Rationale, &c.Command, &c.Details, &c.Outcome, &c.Output} {
		*p = ShowBidi(*p)
	}
	for i := range c.AffectedItems {
		c.AffectedItems[i] = ShowBidi(c.AffectedItems[i])
	}
	for i := range c.Choices {
		c.Choices[i].Label = ShowBidi(c.Choices[i].Label)
	}
}

// Invisible characters show nothing (or only steer how text around them
// is drawn or joined): zero-width spaces and joiners, the bidi marks, the
// word joiner and invisible operators, the soft hyphen, the byte-order
// mark, Hangul fillers, tag characters, interlinear annotation marks and
// control characters other than tab, line feed and carriage return. In a
// card they could hide or fake what a line says ("rm\u200b -rf" reads as
// "rm -rf"; a name padded with them looks like another), so card text
// from users, strangers, programs and models shows each of them as
// "<U+200B>", as bidi controls are.
func isInvisible(r rune) bool {
	switch {
	case isBidiControl(r):
		return true
	case r < 0x20:
		return r != '\t' && r != '\n' && r != '\r'
	case r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x00ad, r == 0x034f, r == 0x061c, r == 0x115f, r == 0x1160, r == 0x17b4, r == 0x17b5, r == 0x180e,
		r == 0x3164, r == 0xfeff, r == 0xffa0:
		return true
	case r >= 0x200b && r <= 0x200f, r >= 0x2060 && r <= 0x2064, r >= 0x206a && r <= 0x206f,
		r >= 0xfff9 && r <= 0xfffb, r >= 0xe0000 && r <= 0xe007f:
		return true
	}
	return false
}

// ShowInvisible returns s with every invisible character and bidi control
// replaced by its visible name, e.g. "<U+200B>".
func ShowInvisible(s string) string { return showRunes(s, isInvisible) }
