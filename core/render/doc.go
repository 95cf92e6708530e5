// Package render turns the core's records into what people read: approval,
// access and secure-input cards (platform-neutral cards.Card values that
// each adapter draws its own way) and plain-language lines for /audit.
// Rendering is pure: it reads no storage and decides nothing; the same
// record always renders to the same card, so a re-render is idempotent.
package render

import "unicode/utf8"

// Clip shortens s to at most n characters, marking the cut with "…".
func Clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
