package approval

import (
	"bytes"
	"encoding/base64"
	"strconv"
	"time"
	"unicode/utf8"
)

// Reading a stored token. The executor reads the token of every approved
// execution twice (the claim's expectation and the gate), and
// encoding/json's reflection made that a visible share of an execution's
// CPU. A stored token is exactly what Marshal wrote, so decodeStored reads
// that layout — members in struct order, no whitespace, strings without
// escapes — and gives up (ok=false) on anything else, which Unmarshal then
// decodes with encoding/json as before. Where it succeeds it gives what
// encoding/json gives (FuzzDecodeStored).

type scanner struct {
	b []byte
	i int
}

func (s *scanner) lit(l string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(l)) {
		return false
	}
	s.i += len(l)
	return true
}

// str reads a string without escapes or control characters, valid UTF-8
// (so its bytes are what encoding/json would give).
func (s *scanner) str() (string, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false
	}
	j := s.i + 1
	for j < len(s.b) {
		c := s.b[j]
		switch {
		case c == '"':
			v := string(s.b[s.i+1 : j])
			s.i = j + 1
			return v, true
		case c == '\\' || c < 0x20:
			return "", false
		case c < utf8.RuneSelf:
			j++
		default:
			r, n := utf8.DecodeRune(s.b[j:])
			if r == utf8.RuneError && n <= 1 {
				return "", false
			}
			j += n
		}
	}
	return "", false
}

// bytes reads standard base64 (or null) as encoding/json does.
func (s *scanner) bytes() ([]byte, bool) {
	if s.lit("null") {
		return nil, true
	}
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	end := bytes.IndexByte(s.b[s.i+1:], '"')
	if end < 0 {
		return nil, false
	}
	enc := s.b[s.i+1 : s.i+1+end]
	// encoding/json's decoder also skips \r and \n in base64; such input
	// is not what Marshal writes, so it goes the general way.
	if bytes.ContainsAny(enc, "\r\n\\") {
		return nil, false
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	n, err := base64.StdEncoding.Decode(out, enc)
	if err != nil {
		return nil, false
	}
	s.i += end + 2
	return out[:n], true
}

func (s *scanner) time() (time.Time, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return time.Time{}, false
	}
	end := bytes.IndexByte(s.b[s.i+1:], '"')
	if end < 0 {
		return time.Time{}, false
	}
	var t time.Time
	if err := t.UnmarshalJSON(s.b[s.i : s.i+end+2]); err != nil {
		return time.Time{}, false
	}
	s.i += end + 2
	return t, true
}

// int reads an integer in JSON's grammar that fits an int.
func (s *scanner) int() (int, bool) {
	j := s.i
	if j < len(s.b) && s.b[j] == '-' {
		j++
	}
	d := j
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		j++
	}
	if j == d || s.b[d] == '0' && j-d > 1 {
		return 0, false
	}
	if j < len(s.b) && (s.b[j] == '.' || s.b[j] == 'e' || s.b[j] == 'E') {
		return 0, false
	}
	v, err := strconv.Atoi(string(s.b[s.i:j]))
	if err != nil {
		return 0, false
	}
	s.i = j
	return v, true
}

// decodeStored reads a token in Marshal's layout; ok=false: not that layout.
func decodeStored(b []byte) (sg Signed, ok bool) {
	s := scanner{b: b}
	t := &sg.Token
	if !s.lit(`{"token":{"token_id":`) {
		return Signed{}, false
	}
	if t.TokenID, ok = s.str(); !ok || !s.lit(`,"scope":`) {
		return Signed{}, false
	}
	if t.Scope, ok = s.str(); !ok || !s.lit(`,"action_hash":`) {
		return Signed{}, false
	}
	if t.ActionHash, ok = s.bytes(); !ok || !s.lit(`,"conversation":`) {
		return Signed{}, false
	}
	if t.Conversation, ok = s.str(); !ok || !s.lit(`,"approver":`) {
		return Signed{}, false
	}
	if t.Approver, ok = s.str(); !ok || !s.lit(`,"issued_at":`) {
		return Signed{}, false
	}
	if t.IssuedAt, ok = s.time(); !ok || !s.lit(`,"expires_at":`) {
		return Signed{}, false
	}
	if t.ExpiresAt, ok = s.time(); !ok || !s.lit(`,"max_executions":`) {
		return Signed{}, false
	}
	if t.MaxExecutions, ok = s.int(); !ok || !s.lit(`,"nonce":`) {
		return Signed{}, false
	}
	if t.Nonce, ok = s.bytes(); !ok || !s.lit(`},"signature":`) {
		return Signed{}, false
	}
	if sg.Signature, ok = s.bytes(); !ok || !s.lit(`}`) || s.i != len(b) {
		return Signed{}, false
	}
	return sg, true
}
