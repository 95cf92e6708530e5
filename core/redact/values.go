package redact

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math"
	"net/url"
	"strings"
)

// MinValueLen is the shortest secret value RedactValues searches for.
// Shorter values would blank out ordinary output (a 2-character value
// matches everywhere); they are still never logged or stored in plaintext.
const MinValueLen = 4

// minEncodedLen is the shortest encoded form searched for: base64 and
// base32 cores of very short values are too likely to occur by chance.
const minEncodedLen = 8

// minSpreadLen is the shortest form that is also found with whitespace
// inserted between its characters. A 4-character value such as "1234" is
// only matched as written: allowing line breaks and spaces inside it would
// redact "12 34" in any table of numbers.
const minSpreadLen = 8

// ValueReplacement replaces a known secret value in RedactValues' output.
const ValueReplacement = "[redacted " + kindSecret + "]"

// RedactValues replaces every occurrence of the known secret values in
// text (the output of an execution that was given them) with
// "[redacted secret]". Besides the exact value it finds the forms a program
// commonly prints a credential in:
//
//   - with whitespace or line breaks inserted anywhere (fold, a wrapped
//     terminal line, "de ad be ef"), for forms of at least minSpreadLen
//     characters;
//   - URL-encoded (query and path escaping), as in a logged request URL;
//   - JSON-string-escaped, as in a dumped config;
//   - lower- and upper-case hex, plain or space-separated;
//   - hex dumps: xxd, hexdump -C, od -t x1 (offsets and the character
//     column are skipped) and the little-endian word layouts of od -x,
//     hexdump and xxd -e (bytes swapped within each group); the match
//     is redacted from its first hex digit to the end of its last line,
//     so the character column that spells the value out goes too;
//   - base64 and base64url (padded or not, wrapped at any width) and
//     base32, also when the value sits inside a longer encoded string (an
//     "Authorization: Basic" header encodes "user:password"): for each
//     byte alignment the part of the encoding that depends only on the
//     value is searched for;
//   - disguised cheaply (transforms.go): in any mix of case, reversed,
//     rot13 or rot47, with its halves swapped; with ANSI escape
//     sequences, zero-width, bidi and other invisible characters,
//     control characters or backspace overstrikes interleaved; with one
//     layer of URL (%XX), JSON/C (\uXXXX, \xXX, \NNN) or HTML (&#NN;
//     &#xHH; &amp;) escapes on any of its characters; full-width; and
//     inside gzip or zlib data, base64-encoded or raw (two levels deep,
//     within a work budget proportional to the text: data that needs more
//     is redacted unread). These forms are searched for when they are at
//     least minSpreadLen characters long.
//
// It does not find the value transformed in other ways (encrypted,
// hashed, escaped twice, other ciphers or bases, printed in pieces by
// separate runs or with other text between the pieces) or embedded in an
// encoding whose value-only part is shorter than minEncodedLen
// characters. Values shorter than MinValueLen are skipped. Overlapping
// matches are merged into one replacement.
func RedactValues(text string, values []string) string {
	p := compileValues(values)
	if p.empty() {
		return text
	}
	if len(text) > math.MaxInt32 {
		// The offset maps are int32; nothing a sandbox returns is this
		// long, so fail closed rather than search half of it.
		return ValueReplacement
	}
	spans := p.find(text)
	if len(spans) == 0 {
		return text
	}
	return apply(text, spans)
}

// valuePatterns are the forms searched for, by where they are searched.
type valuePatterns struct {
	exact  []string // in the text as it is
	spread []string // in the text with all whitespace removed
	dump   []string // lower-case hex, in the hex digits of dump lines
	norm   []string // in the normalised, case-folded view (transforms.go)
}

func (p *valuePatterns) empty() bool {
	return len(p.exact) == 0 && len(p.spread) == 0 && len(p.dump) == 0 && len(p.norm) == 0
}

func compileValues(values []string) *valuePatterns {
	p := &valuePatterns{}
	seen := map[*[]string]map[string]bool{}
	add := func(list *[]string, s string) {
		if seen[list] == nil {
			seen[list] = map[string]bool{}
		}
		if !seen[list][s] {
			seen[list][s] = true
			*list = append(*list, s)
		}
	}
	// A textual form: spread when long enough without its whitespace,
	// exact otherwise.
	text := func(f string) {
		if s := stripSpace(f); len(s) >= minSpreadLen {
			add(&p.spread, s)
		} else if len(f) >= MinValueLen {
			add(&p.exact, f)
		}
	}
	encoded := func(s string) {
		if len(s) >= minEncodedLen {
			add(&p.spread, s)
		}
	}
	for _, v := range values {
		if len(v) < MinValueLen {
			continue
		}
		text(v)
		text(url.QueryEscape(v))
		text(url.PathEscape(v))
		if b, err := json.Marshal(v); err == nil {
			j := string(b[1 : len(b)-1])
			text(j)
			text(strings.ReplaceAll(j, "/", `\/`)) // encoders that escape "/"
		}
		h := hex.EncodeToString([]byte(v))
		encoded(h)
		encoded(strings.ToUpper(h))
		add(&p.dump, h) // at least 8 digits: v has at least 4 bytes
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			encoded(enc.EncodeToString([]byte(v)))
			for _, c := range cores([]byte(v), 6, enc.WithPadding(base64.NoPadding).EncodeToString) {
				encoded(c)
			}
		}
		encoded(base32.StdEncoding.EncodeToString([]byte(v)))
		for _, c := range cores([]byte(v), 5, base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString) {
			encoded(c)
		}
		for _, d := range disguises(v) {
			if n := normalize(d, true).s; len(n) >= minSpreadLen {
				add(&p.norm, n)
			}
		}
	}
	// The encoded forms too, so that case changes, escapes and invisible
	// characters do not hide them either.
	for _, s := range p.spread {
		if n := normalize(s, true).s; len(n) >= minSpreadLen {
			add(&p.norm, n)
		}
	}
	return p
}

// cores returns, for each byte alignment k of v after k bytes of unknown
// prefix, the characters of an encoding with bits bits per character that
// v alone determines: character i covers bits [bits·i, bits·(i+1)) and v
// occupies bits [8k, 8(k+len(v))). Those are the characters that appear
// wherever v sits in a longer encoded stream, whatever surrounds it.
// encode must not pad.
func cores(v []byte, bits int, encode func([]byte) string) []string {
	out := make([]string, 0, bits)
	// An encoding's alignment repeats every lcm(8, bits) bits: 3 bytes for
	// base64, 5 for base32.
	period := 3
	if bits == 5 {
		period = 5
	}
	for k := 0; k < period; k++ {
		buf := make([]byte, k+len(v))
		copy(buf[k:], v)
		s := encode(buf)
		first := (8*k + bits - 1) / bits
		last := 8 * (k + len(v)) / bits // exclusive
		if last > first {
			out = append(out, s[first:last])
		}
	}
	return out
}

// kindSecret is the kind of a known secret value's finding: Replacement
// gives ValueReplacement for it.
const kindSecret = "secret"

func (p *valuePatterns) find(text string) []Finding {
	return p.findDepth(text, &inflater{budget: inflateBudget(len(text))}, 0)
}

// findDepth searches text, and the compressed data inside it down to
// maxInflateDepth, sharing one inflate budget.
func (p *valuePatterns) findDepth(text string, inf *inflater, depth int) []Finding {
	var spans []Finding
	for _, pat := range p.exact {
		eachIndex(text, pat, func(s, e int) { spans = append(spans, Finding{Kind: kindSecret, Start: s, End: e}) })
	}
	if len(p.spread) > 0 {
		flat, at := stripSpaceMap(text)
		for _, pat := range p.spread {
			eachIndex(flat, pat, func(s, e int) {
				spans = append(spans, Finding{Kind: kindSecret, Start: int(at[s]), End: int(at[e-1]) + 1})
			})
		}
	}
	if len(p.dump) > 0 {
		for _, d := range hexDumps(text) {
			for _, pat := range p.dump {
				eachIndex(d.digits, pat, func(s, e int) { spans = append(spans, d.span(s, e)) })
			}
		}
	}
	if len(p.norm) > 0 {
		u := normalize(text, false)
		folded := &view{s: asciiLower(u.s), start: u.start, end: u.end}
		for _, pat := range p.norm {
			eachIndex(folded.s, pat, func(s, e int) { spans = append(spans, folded.span(s, e)) })
		}
		if depth < maxInflateDepth {
			spans = append(spans, p.compressed(text, u, inf, depth)...)
		}
	}
	if len(spans) == 0 {
		return nil
	}
	return union(spans)
}

// eachIndex calls f for each non-overlapping occurrence of pat in s. An
// occurrence overlapping a reported one is cut by that one's replacement,
// so it cannot survive whole; and resuming at the end keeps a periodic
// pattern in periodic text linear.
func eachIndex(s, pat string, f func(start, end int)) {
	for from := 0; from <= len(s)-len(pat); {
		i := strings.Index(s[from:], pat)
		if i < 0 {
			return
		}
		f(from+i, from+i+len(pat))
		from += i + len(pat)
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func stripSpace(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return r < 0x80 && isSpace(byte(r)) }) < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if !isSpace(s[i]) {
			b = append(b, s[i])
		}
	}
	return string(b)
}

// stripSpaceMap returns text without ASCII whitespace and, for each byte
// of the result, its offset in text. Removing ASCII bytes never splits a
// UTF-8 sequence, so a match on whole characters maps back to whole
// characters.
func stripSpaceMap(text string) (string, []int32) {
	b := make([]byte, 0, len(text))
	at := make([]int32, 0, len(text))
	for i := 0; i < len(text); i++ {
		if !isSpace(text[i]) {
			b = append(b, text[i])
			at = append(at, int32(i))
		}
	}
	return string(b), at
}

// hexStream is the hex digits of the dump lines in a text, lower-cased and
// concatenated, with where each came from.
type hexStream struct {
	digits string
	at     []int32 // offset of each digit in the text
	eol    []int32 // end of the line each digit is on
}

// span maps digits[s:e] back to the text: from the first of those digits
// to the end of the last line, so the dump's character column, which
// shows the same bytes as text, is redacted with them.
func (h *hexStream) span(s, e int) Finding {
	start := h.at[s]
	for _, a := range h.at[s+1 : e] {
		start = min(start, a) // byte-swapped streams are permuted within a group
	}
	end := h.eol[s]
	for _, a := range h.eol[s+1 : e] {
		end = max(end, a)
	}
	return Finding{Kind: kindSecret, Start: int(start), End: int(end)}
}

// maxDumpGroup is the widest group of hex digits read as part of a dump
// (xxd -g8 prints 16); wider runs are plain hex, which the whitespace-free
// search covers.
const maxDumpGroup = 16

// hexDumps reads the lines of text that look like a hex dump — an offset
// (at least four hex digits, xxd adds ':') followed by groups of hex
// digits of one width — and returns their digits in order, and, when the
// groups are wider than a byte, a second stream with the bytes of each
// group reversed: od -x, hexdump and xxd -e print little-endian words, so
// "pa" is shown as "6170". Reading stops at the character column: a gap
// of three or more spaces (a short last line is padded), or two once a
// line has 16 bytes (xxd, hexdump -C and od -t x1z put two spaces before
// it; hexdump -C also puts two in the middle, after 8 bytes).
func hexDumps(text string) []*hexStream {
	var plain, swapped hexStream
	var pd, sd []byte
	wide := false
	for ls := 0; ls < len(text); {
		le := strings.IndexByte(text[ls:], '\n')
		if le < 0 {
			le = len(text)
		} else {
			le += ls
		}
		line := text[ls:le]
		next := le + 1
		i := skipBlank(line, 0)
		j := tokenEnd(line, i)
		off := line[i:j]
		off = strings.TrimSuffix(off, ":")
		if len(off) < 4 || !allHex(off) {
			ls = next
			continue
		}
		w, bytes := 0, 0
		for pos := j; ; {
			g := skipBlank(line, pos)
			gap := g - pos
			if g == len(line) {
				break
			}
			e := tokenEnd(line, g)
			tok := line[g:e]
			if w > 0 && (gap >= 3 || gap == 2 && bytes >= 16) {
				break
			}
			if len(tok)%2 != 0 || len(tok) > maxDumpGroup || !allHex(tok) || w > 0 && len(tok) > w {
				break
			}
			if w == 0 {
				w = len(tok)
			}
			if w > 2 {
				wide = true
			}
			for k := 0; k < len(tok); k++ {
				pd = append(pd, lowerHex(tok[k]))
				plain.at = append(plain.at, int32(ls+g+k))
				plain.eol = append(plain.eol, int32(le))
			}
			// The same group with its bytes in reverse order.
			for b := len(tok) - 2; b >= 0; b -= 2 {
				sd = append(sd, lowerHex(tok[b]), lowerHex(tok[b+1]))
				swapped.at = append(swapped.at, int32(ls+g+b), int32(ls+g+b+1))
				swapped.eol = append(swapped.eol, int32(le), int32(le))
			}
			bytes += len(tok) / 2
			if len(tok) < w {
				break // a short group ends the line (an odd byte count)
			}
			pos = e
		}
		ls = next
	}
	if len(pd) == 0 {
		return nil
	}
	plain.digits = string(pd)
	out := []*hexStream{&plain}
	if wide {
		swapped.digits = string(sd)
		out = append(out, &swapped)
	}
	return out
}

func skipBlank(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r') {
		i++
	}
	return i
}

func tokenEnd(s string, i int) int {
	for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\r' {
		i++
	}
	return i
}

func allHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return s != ""
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func lowerHex(c byte) byte {
	if c >= 'A' && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}
