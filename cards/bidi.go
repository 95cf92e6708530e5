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
func ShowBidi(s string) string {
	if !strings.ContainsFunc(s, isBidiControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isBidiControl(r) {
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
