package kit

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/silas-gateway/silas/core"
)

// TextParts splits a message's text for a platform (SplitText) and drops
// blank parts, which platforms refuse or show as empty bubbles. Blank text
// gives no parts.
func TextParts(text string, max int, width func(rune) int) []string {
	if strings.TrimSpace(text) == "" {
		return nil
	}
	var out []string
	for _, p := range SplitText(text, max, width) {
		if strings.TrimSpace(p) != "" {
			out = append(out, p)
		}
	}
	return out
}

// SendParts sends one outbound message rendered as parts — its first
// textParts parts are its text, a card (m.Card) is the last — in order,
// keeping split progress in s so the outbox's retry does not repeat parts.
// The ref returned is the one the core later edits: the card's message when
// there is a card, else the first text part. platform prefixes the error of
// a message with nothing to send.
func SendParts[R any](s *Splits, m core.OutMessage, parts []R, textParts int, platform string, send func(i int, part R) (core.MessageRef, error)) (core.MessageRef, error) {
	switch len(parts) {
	case 0:
		return "", Permanent(fmt.Errorf("%s: nothing to send (empty text and no card)", platform))
	case 1:
		return send(0, parts[0])
	}
	first, last, err := s.Send(SplitKey(m), len(parts), func(i int) (core.MessageRef, error) {
		return send(i, parts[i])
	})
	if err != nil {
		return "", err
	}
	if m.Card != nil || textParts == 0 {
		return last, nil
	}
	return first, nil
}

// CheckBaseURL checks a platform API base URL setting (key names it in the
// error): http or https (plain http is for local fakes), a host, no query.
func CheckBaseURL(key, raw, example string) error {
	base, err := url.Parse(raw)
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" || base.RawQuery != "" {
		return fmt.Errorf("%s: %q is not an http(s) URL like %s", key, raw, example)
	}
	return nil
}
