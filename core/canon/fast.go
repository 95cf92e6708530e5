package canon

import (
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// The direct path. Canonicalising through jcs builds a tree of strings
// (a strings.Builder per string, a UTF-16 copy of every key, a regexp per
// number) and needs encoding/json's scan first; an approved execution
// canonicalises its action, its request, its token and an audit entry
// several times over, so that was a large share of the gateway's CPU and
// allocations per execution. transformDirect writes RFC 8785 in one pass
// over the input for the documents the gateway makes: objects with ASCII
// keys written without escapes, strings, numbers, literals. Anything it is
// not certain of — a syntax error, a key with an escape or a non-ASCII
// character (UTF-16 order), a duplicate key, a \u surrogate, invalid UTF-8,
// a number strconv rejects, deep nesting — makes it give up (ok=false),
// and Transform takes the general path, which accepts or rejects the
// document as before. So Transform's output and errors are the general
// path's for every input (FuzzDirectMatchesGeneral checks exactly that).

// directMaxDepth bounds the direct path's recursion; deeper documents take
// the general path (which allows 10,000 levels).
const directMaxDepth = 64

type direct struct {
	in      []byte
	i       int
	out     []byte
	scratch []byte // an object's members while they are reordered
}

// member is one object member written to out[start:end] as "key":value.
type member struct {
	key        []byte // the key as in the input (ASCII, no escapes)
	start, end int
}

// transformDirect returns the canonical form of doc, or ok=false when the
// general path must decide.
func transformDirect(doc []byte) (_ []byte, ok bool) {
	d := direct{in: doc, out: make([]byte, 0, len(doc))}
	d.ws()
	if !d.value(0) {
		return nil, false
	}
	d.ws()
	if d.i != len(d.in) {
		return nil, false
	}
	return d.out, true
}

func (d *direct) ws() {
	for d.i < len(d.in) {
		switch d.in[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *direct) value(depth int) bool {
	if d.i >= len(d.in) {
		return false
	}
	switch c := d.in[d.i]; {
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		return d.string()
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return false
}

func (d *direct) literal(lit string) bool {
	if len(d.in)-d.i < len(lit) || string(d.in[d.i:d.i+len(lit)]) != lit {
		return false
	}
	d.i += len(lit)
	d.out = append(d.out, lit...)
	return true
}

func (d *direct) array(depth int) bool {
	if depth > directMaxDepth {
		return false
	}
	d.i++ // '['
	d.out = append(d.out, '[')
	d.ws()
	if d.i < len(d.in) && d.in[d.i] == ']' {
		d.i++
		d.out = append(d.out, ']')
		return true
	}
	for {
		d.ws()
		if !d.value(depth) {
			return false
		}
		d.ws()
		if d.i >= len(d.in) {
			return false
		}
		switch d.in[d.i] {
		case ',':
			d.i++
			d.out = append(d.out, ',')
		case ']':
			d.i++
			d.out = append(d.out, ']')
			return true
		default:
			return false
		}
	}
}

func (d *direct) object(depth int) bool {
	if depth > directMaxDepth {
		return false
	}
	d.i++ // '{'
	d.ws()
	if d.i < len(d.in) && d.in[d.i] == '}' {
		d.i++
		d.out = append(d.out, '{', '}')
		return true
	}
	start := len(d.out)
	var small [12]member
	ms := small[:0]
	sorted := true
	for {
		d.ws()
		key, ok := d.key()
		if !ok {
			return false
		}
		d.ws()
		if d.i >= len(d.in) || d.in[d.i] != ':' {
			return false
		}
		d.i++
		d.ws()
		m := member{key: key, start: len(d.out)}
		d.out = append(d.out, '"')
		d.out = append(d.out, key...)
		d.out = append(d.out, '"', ':')
		if !d.value(depth) {
			return false
		}
		m.end = len(d.out)
		if n := len(ms); n > 0 && string(ms[n-1].key) >= string(key) {
			sorted = false
		}
		ms = append(ms, m)
		d.ws()
		if d.i >= len(d.in) {
			return false
		}
		if c := d.in[d.i]; c == '}' {
			d.i++
			break
		} else if c != ',' {
			return false
		}
		d.i++
	}
	if !sorted {
		slices.SortFunc(ms, func(a, b member) int { return compareBytes(a.key, b.key) })
		for i := 1; i < len(ms); i++ {
			if string(ms[i-1].key) == string(ms[i].key) {
				return false // a duplicate: the general path rejects it
			}
		}
	}
	// The members were written one after the other without separators;
	// write them again, in order, with the braces and commas.
	d.scratch = append(d.scratch[:0], d.out[start:]...)
	d.out = append(d.out[:start], '{')
	for i, m := range ms {
		if i > 0 {
			d.out = append(d.out, ',')
		}
		d.out = append(d.out, d.scratch[m.start-start:m.end-start]...)
	}
	d.out = append(d.out, '}')
	return true
}

func compareBytes(a, b []byte) int {
	switch {
	case string(a) < string(b):
		return -1
	case string(a) > string(b):
		return 1
	}
	return 0
}

// key reads an object key made of printable ASCII without escapes: its
// canonical form is its input form, and byte order is UTF-16 order.
func (d *direct) key() ([]byte, bool) {
	if d.i >= len(d.in) || d.in[d.i] != '"' {
		return nil, false
	}
	s := d.i + 1
	for j := s; j < len(d.in); j++ {
		switch c := d.in[j]; {
		case c == '"':
			d.i = j + 1
			return d.in[s:j], true
		case c < 0x20 || c == '\\' || c >= utf8.RuneSelf:
			return nil, false
		}
	}
	return nil, false
}

// string writes a string value. Without escapes its canonical form is its
// input form (a control character is invalid JSON, '"' and '\\' cannot
// appear unescaped); with escapes each is decoded and written as RFC 8785
// writes the character.
func (d *direct) string() bool {
	s := d.i
	j := s + 1
	for j < len(d.in) {
		c := d.in[j]
		switch {
		case c == '"':
			d.out = append(d.out, d.in[s:j+1]...)
			d.i = j + 1
			return true
		case c == '\\':
			d.out = append(d.out, d.in[s:j]...)
			d.i = j
			return d.escaped()
		case c < 0x20:
			return false
		case c < utf8.RuneSelf:
			j++
		default:
			r, n := utf8.DecodeRune(d.in[j:])
			if r == utf8.RuneError && n <= 1 {
				return false
			}
			j += n
		}
	}
	return false
}

// escaped continues a string whose opening quote and first characters are
// already written, at its first backslash.
func (d *direct) escaped() bool {
	for d.i < len(d.in) {
		c := d.in[d.i]
		switch {
		case c == '"':
			d.i++
			d.out = append(d.out, '"')
			return true
		case c == '\\':
			if d.i+1 >= len(d.in) {
				return false
			}
			e := d.in[d.i+1]
			d.i += 2
			var r rune
			switch e {
			case '"', '\\', '/':
				r = rune(e)
			case 'b':
				r = '\b'
			case 'f':
				r = '\f'
			case 'n':
				r = '\n'
			case 'r':
				r = '\r'
			case 't':
				r = '\t'
			case 'u':
				if len(d.in)-d.i < 4 {
					return false
				}
				v, ok := hex4(d.in[d.i : d.i+4])
				if !ok || v >= 0xD800 && v <= 0xDFFF {
					return false // surrogates: the general path checks their pairing
				}
				d.i += 4
				r = v
			default:
				return false
			}
			d.out = appendRune(d.out, r)
		case c < 0x20:
			return false
		case c < utf8.RuneSelf:
			d.out = append(d.out, c)
			d.i++
		default:
			r, n := utf8.DecodeRune(d.in[d.i:])
			if r == utf8.RuneError && n <= 1 {
				return false
			}
			d.out = append(d.out, d.in[d.i:d.i+n]...)
			d.i += n
		}
	}
	return false
}

func hex4(b []byte) (rune, bool) {
	var v rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// appendRune writes one character of a string as RFC 8785 does (section
// 3.2.2.2): '"', '\\' and control characters escaped, the short forms where
// JSON has them and lower-case \u00xx otherwise; everything else as is.
func appendRune(b []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	switch r {
	case '"', '\\':
		return append(b, '\\', byte(r))
	case '\b':
		return append(b, '\\', 'b')
	case '\t':
		return append(b, '\\', 't')
	case '\n':
		return append(b, '\\', 'n')
	case '\f':
		return append(b, '\\', 'f')
	case '\r':
		return append(b, '\\', 'r')
	}
	if r < 0x20 {
		return append(b, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xF])
	}
	return utf8.AppendRune(b, r)
}

// maxPlainDigits: an integer of up to 15 digits is exact in a double and
// ECMAScript writes it as it is.
const maxPlainDigits = 15

// number writes a number. A plain integer of up to 15 digits is written as
// it is ("-0" as "0"); any other is read as a double and written as
// ECMAScript does, exactly as the general path does.
func (d *direct) number() bool {
	s := d.i
	j := s
	if d.in[j] == '-' {
		j++
	}
	if j >= len(d.in) {
		return false
	}
	switch c := d.in[j]; {
	case c == '0':
		j++
	case c >= '1' && c <= '9':
		for j < len(d.in) && d.in[j] >= '0' && d.in[j] <= '9' {
			j++
		}
	default:
		return false
	}
	intEnd := j
	plain := true
	if j < len(d.in) && d.in[j] == '.' {
		plain = false
		j++
		if !d.digits(&j) {
			return false
		}
	}
	if j < len(d.in) && (d.in[j] == 'e' || d.in[j] == 'E') {
		plain = false
		j++
		if j < len(d.in) && (d.in[j] == '+' || d.in[j] == '-') {
			j++
		}
		if !d.digits(&j) {
			return false
		}
	}
	tok := d.in[s:j]
	d.i = j
	digits := intEnd - s
	if tok[0] == '-' {
		digits--
	}
	if plain && digits <= maxPlainDigits {
		if string(tok) == "-0" {
			tok = tok[1:]
		}
		d.out = append(d.out, tok...)
		return true
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		return false
	}
	n, err := jcs.NumberToJSON(f)
	if err != nil {
		return false
	}
	d.out = append(d.out, n...)
	return true
}

func (d *direct) digits(j *int) bool {
	s := *j
	for *j < len(d.in) && d.in[*j] >= '0' && d.in[*j] <= '9' {
		*j++
	}
	return *j > s
}

// AppendString appends the canonical JSON of s as encoding/json would
// encode it and Transform then canonicalise it: each byte that is not valid
// UTF-8 becomes U+FFFD (encoding/json's replacement), '"', '\\' and control
// characters are escaped as RFC 8785 does, everything else ('<', U+2028)
// is written as it is. For encoders that write a document's canonical form
// directly instead of marshalling and transforming it.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			b = appendRune(b, rune(c))
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\uFFFD"...)
			i++
			start = i
			continue
		}
		i += n
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
