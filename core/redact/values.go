package redact

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// MinValueLen is the shortest secret value RedactValues searches for.
// Shorter values would blank out ordinary output (a 2-character value
// matches everywhere); they are still never logged or stored in plaintext.
const MinValueLen = 4

// minEncodedLen is the shortest encoded form searched for: base64 cores of
// very short values are too likely to occur by chance.
const minEncodedLen = 8

// ValueReplacement replaces a known secret value in RedactValues' output.
const ValueReplacement = "[redacted secret]"

// RedactValues replaces every occurrence of the known secret values in
// text (the output of an execution that was given them) with
// "[redacted secret]". Besides the exact value it finds the forms a program
// commonly prints a credential in:
//
//   - URL-encoded (query and path escaping), as in a logged request URL;
//   - JSON-string-escaped, as in a dumped config;
//   - lower- and upper-case hex;
//   - base64 and base64url, padded or not, also when the value sits inside
//     a longer encoded string (an "Authorization: Basic" header encodes
//     "user:password"): for each of the three byte alignments the part of
//     the encoding that depends only on the value is searched for.
//
// It does not find the value transformed in other ways (reversed, split
// across lines, compressed, encrypted, or embedded in a base64 string
// shorter than minEncodedLen characters). Values shorter than MinValueLen
// are skipped. The longest pattern wins where patterns overlap.
func RedactValues(text string, values []string) string {
	var pats []string
	seen := map[string]bool{}
	add := func(p string, minLen int) {
		if len(p) >= minLen && !seen[p] {
			seen[p] = true
			pats = append(pats, p)
		}
	}
	for _, v := range values {
		if len(v) < MinValueLen {
			continue
		}
		add(v, MinValueLen)
		add(url.QueryEscape(v), MinValueLen)
		add(url.PathEscape(v), MinValueLen)
		if b, err := json.Marshal(v); err == nil {
			j := string(b[1 : len(b)-1])
			add(j, MinValueLen)
			add(strings.ReplaceAll(j, "/", `\/`), MinValueLen) // encoders that escape "/"
		}
		h := hex.EncodeToString([]byte(v))
		add(h, minEncodedLen)
		add(strings.ToUpper(h), minEncodedLen)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			for _, core := range base64Cores([]byte(v), enc) {
				add(core, minEncodedLen)
			}
		}
	}
	if len(pats) == 0 || !containsAny(text, pats) {
		return text
	}
	// Longest first: strings.Replacer tries patterns in argument order at
	// each position.
	slices.SortStableFunc(pats, func(a, b string) int { return len(b) - len(a) })
	args := make([]string, 0, 2*len(pats))
	for _, p := range pats {
		args = append(args, p, ValueReplacement)
	}
	return strings.NewReplacer(args...).Replace(text)
}

func containsAny(text string, pats []string) bool {
	for _, p := range pats {
		if strings.Contains(text, p) {
			return true
		}
	}
	return false
}

// base64Cores returns, for each alignment k of v after k bytes of unknown
// prefix, the encoded characters determined by v alone. For k = 0 that is
// the whole unpadded encoding when v ends on a 3-byte boundary.
func base64Cores(v []byte, enc *base64.Encoding) []string {
	out := make([]string, 0, 4)
	out = append(out, enc.EncodeToString(v)) // the padded encoding itself
	for k := 0; k < 3; k++ {
		buf := make([]byte, k+len(v))
		copy(buf[k:], v)
		s := enc.WithPadding(base64.NoPadding).EncodeToString(buf)
		// Character i covers bits [6i, 6i+6); v occupies bits [8k, 8(k+len(v))).
		first := (8*k + 5) / 6
		last := 8 * (k + len(v)) / 6 // exclusive
		if last > first {
			out = append(out, s[first:last])
		}
	}
	return out
}
