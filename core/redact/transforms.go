package redact

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"unicode/utf8"
)

// The second search of RedactValues: the cheap reversible disguises a
// program can put on a secret it prints. The text is read once into a
// normalised view — ANSI escape sequences, zero-width and other invisible
// characters, control characters and whitespace removed, a backspace
// erasing the character before it, one layer of URL (%XX), JSON and C
// (\uXXXX, \xXX, \NNN) and HTML (&#NN; &#xHH; &amp;…) escapes decoded,
// full-width ASCII made ASCII, ASCII letters lower-cased — and each value is
// searched for in it forwards, reversed, rot13'd, rot47'd, with its halves
// swapped, and in every encoded form of the first search. Base64 runs that
// hold gzip or zlib data (and raw gzip members) are inflated and searched
// again. Every step is one pass over its input, the searches are a fixed
// number per value, and inflating is bounded by a budget proportional to
// the text: the work stays linear in the text.

// view is a rewritten copy of a text with, for each of its bytes, the
// region of the text it came from.
type view struct {
	s          string
	start, end []int32
}

// span maps s[i:j] back to the text.
func (v *view) span(i, j int) Finding {
	return Finding{Kind: kindSecret, Start: int(v.start[i]), End: int(v.end[j-1])}
}

// normalize builds the view described above (folded: ASCII letters
// lower-cased; base64 needs them as they are).
func normalize(text string, fold bool) *view {
	b := make([]byte, 0, len(text))
	start := make([]int32, 0, len(text))
	end := make([]int32, 0, len(text))
	emit := func(c byte, s, e int) {
		if fold && c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
		start = append(start, int32(s))
		end = append(end, int32(e))
	}
	emitRune := func(r rune, s, e int) {
		if r < utf8.RuneSelf {
			if c := byte(r); !isSpace(c) && c >= 0x20 && c != 0x7f {
				emit(c, s, e)
			}
			return
		}
		if invisible(r) {
			return
		}
		if r >= 0xff01 && r <= 0xff5e { // full-width ASCII
			emit(byte(r-0xfee0), s, e)
			return
		}
		var enc [utf8.UTFMax]byte
		n := utf8.EncodeRune(enc[:], r)
		for _, c := range enc[:n] {
			emit(c, s, e)
		}
	}
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == 0x1b:
			i = skipANSI(text, i)
			continue
		case c == '\b':
			// Overstrike: the terminal shows what follows instead of
			// the character before.
			for len(b) > 0 {
				last := b[len(b)-1]
				b, start, end = b[:len(b)-1], start[:len(start)-1], end[:len(end)-1]
				if last < 0x80 || last >= 0xc0 {
					break
				}
			}
			i++
			continue
		case c == '%' || c == '\\' || c == '&':
			if r, n, isByte := unescape(text[i:]); n > 0 {
				if isByte && r >= utf8.RuneSelf {
					// %E2%80%8B: bytes of one UTF-8 character.
					r, n = escapedRune(text[i:])
				}
				if r >= 0 {
					emitRune(r, i, i+n)
				} else {
					emit(byte(-r), i, i+n) // a lone byte of no character
				}
				i += n
				continue
			}
			emit(c, i, i+1)
			i++
			continue
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRuneInString(text[i:])
			if r == utf8.RuneError && n == 1 {
				emit(c, i, i+1)
			} else {
				emitRune(r, i, i+n)
			}
			i += n
			continue
		}
		emitRune(rune(c), i, i+1)
		i++
	}
	return &view{s: string(b), start: start, end: end}
}

// invisible reports characters that show nothing (or only reorder text)
// and so can be sprinkled into a value without changing what it reads as:
// zero-width characters, bidi controls, the soft hyphen, variation
// selectors, tag characters, the byte-order mark, and Unicode spaces.
func invisible(r rune) bool {
	switch {
	case r == 0x00a0, r == 0x00ad, r == 0x034f, r == 0x061c, r == 0x115f, r == 0x1160, r == 0x17b4, r == 0x17b5,
		r == 0x180e, r == 0x3000, r == 0x3164, r == 0xfeff, r == 0xffa0:
		return true
	case r >= 0x0080 && r <= 0x009f: // C1 controls
		return true
	case r >= 0x2000 && r <= 0x200f, r >= 0x2028 && r <= 0x202f, r >= 0x205f && r <= 0x206f:
		return true
	case r >= 0xfe00 && r <= 0xfe0f, r >= 0xe0000 && r <= 0xe0fff:
		return true
	}
	return false
}

// skipANSI returns the offset after the escape sequence at text[i] (ESC):
// CSI (ESC [ … final byte), OSC and other strings (ESC ] … BEL or ESC \),
// or a two-byte escape.
func skipANSI(text string, i int) int {
	j := i + 1
	if j >= len(text) {
		return j
	}
	switch text[j] {
	case '[':
		for j++; j < len(text); j++ {
			if c := text[j]; c >= 0x40 && c <= 0x7e {
				return j + 1
			} else if c < 0x20 || c > 0x7e {
				return j // not a sequence after all: read the byte as text
			}
		}
		return j
	case ']', 'P', 'X', '^', '_':
		for j++; j < len(text); j++ {
			if text[j] == 0x07 {
				return j + 1
			}
			if text[j] == 0x1b && j+1 < len(text) && text[j+1] == '\\' {
				return j + 2
			}
		}
		return j
	}
	return j + 1
}

// htmlNames are the named character references printed by escapers.
var htmlNames = map[string]rune{"amp": '&', "lt": '<', "gt": '>', "quot": '"', "apos": '\'', "nbsp": 0xa0,
	"sol": '/', "plus": '+', "equals": '=', "num": '#', "percent": '%', "colon": ':', "lowbar": '_', "dollar": '$',
	"excl": '!', "quest": '?', "commat": '@', "period": '.', "comma": ',', "hyphen": '-', "dash": '-', "ast": '*'}

// escapedRune decodes the byte escapes at the start of s (%XX, \xXX,
// \NNN) that together spell one UTF-8 character. When they do not, it
// returns the first byte negated (r < 0) and that escape's length.
func escapedRune(s string) (r rune, n int) {
	var buf [utf8.UTFMax]byte
	k, pos := 0, 0
	first := 0
	for k < utf8.UTFMax {
		v, m, isByte := unescape(s[pos:])
		if m == 0 || !isByte {
			break
		}
		if k == 0 {
			first = m
		}
		buf[k] = byte(v)
		k++
		pos += m
		if utf8.FullRune(buf[:k]) {
			if r, size := utf8.DecodeRune(buf[:k]); r != utf8.RuneError && size == k {
				return r, pos
			}
			break
		}
		if pos >= len(s) {
			break
		}
	}
	return -rune(buf[0]), first
}

// unescape decodes one escape at the start of s: %XX, \uXXXX, \xXX, \NNN,
// \/ \\ \" \' and \n-style escapes, &#N; &#xH; &name;. isByte reports the
// escapes that stand for a byte rather than a character. n is 0 when s does
// not start with one.
func unescape(s string) (r rune, n int, isByte bool) {
	switch s[0] {
	case '%':
		if v, ok := hexVal(s, 1, 2); ok {
			return rune(v), 3, true
		}
	case '\\':
		if len(s) < 2 {
			return 0, 0, false
		}
		switch s[1] {
		case 'u':
			if v, ok := hexVal(s, 2, 4); ok && (v < 0xd800 || v > 0xdfff) {
				return rune(v), 6, false
			}
		case 'x':
			if v, ok := hexVal(s, 2, 2); ok {
				return rune(v), 4, true
			}
		case '/', '\\', '"', '\'':
			return rune(s[1]), 2, false
		case 'n', 't', 'r':
			return ' ', 2, false // whitespace, dropped like the real thing
		case '0', '1', '2', '3':
			if len(s) >= 4 && isOctal(s[2]) && isOctal(s[3]) {
				return rune(s[1]-'0')<<6 | rune(s[2]-'0')<<3 | rune(s[3]-'0'), 4, true
			}
		}
	case '&':
		semi := strings.IndexByte(s[:min(len(s), 12)], ';')
		if semi < 2 {
			return 0, 0, false
		}
		ref := s[1:semi]
		if ref[0] == '#' {
			base, digits := 10, ref[1:]
			if digits != "" && (digits[0] == 'x' || digits[0] == 'X') {
				base, digits = 16, digits[1:]
			}
			if digits == "" || len(digits) > 7 {
				return 0, 0, false
			}
			v := 0
			for k := 0; k < len(digits); k++ {
				d := hexDigit(digits[k])
				if d < 0 || d >= base {
					return 0, 0, false
				}
				v = v*base + d
			}
			if v > utf8.MaxRune || v >= 0xd800 && v <= 0xdfff {
				return 0, 0, false
			}
			return rune(v), semi + 1, false
		}
		if v, ok := htmlNames[strings.ToLower(ref)]; ok {
			return v, semi + 1, false
		}
	}
	return 0, 0, false
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// hexVal reads n hex digits at s[i:].
func hexVal(s string, i, n int) (int, bool) {
	if len(s) < i+n {
		return 0, false
	}
	v := 0
	for k := i; k < i+n; k++ {
		d := hexDigit(s[k])
		if d < 0 {
			return 0, false
		}
		v = v<<4 | d
	}
	return v, true
}

// disguises returns the cheap reversible transforms of v searched for in
// the normalised view (which undoes case, escapes and invisible
// characters by itself): reversed (by characters and by bytes), rot13,
// rot47, rot13 of the reverse, and the two halves swapped.
func disguises(v string) []string {
	rs := []rune(v)
	rev := make([]rune, len(rs))
	for i, r := range rs {
		rev[len(rs)-1-i] = r
	}
	revBytes := []byte(v)
	for i, j := 0, len(revBytes)-1; i < j; i, j = i+1, j-1 {
		revBytes[i], revBytes[j] = revBytes[j], revBytes[i]
	}
	out := []string{v, string(rev), string(revBytes), rot13(v), rot47(v), rot13(string(rev))}
	h := len(rs) / 2
	out = append(out, string(rs[h:])+string(rs[:h]))
	if len(rs)%2 == 1 {
		out = append(out, string(rs[h+1:])+string(rs[:h+1]))
	}
	return out
}

func rot13(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = 'a' + (c-'a'+13)%26
		case c >= 'A' && c <= 'Z':
			b[i] = 'A' + (c-'A'+13)%26
		}
	}
	return string(b)
}

func rot47(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= '!' && c <= '~' {
			b[i] = '!' + (c-'!'+47)%94
		}
	}
	return string(b)
}

// maxInflateDepth bounds compressed data inside compressed data.
const maxInflateDepth = 2

// inflateBudget is the work (compressed bytes read plus bytes inflated,
// plus openCost per stream tried) allowed for one RedactValues call: a
// fixed allowance plus a multiple of the text. Data that needs more is
// redacted unread (fail closed): a decompression bomb or a text full of
// headers must not make redaction slow or the secret visible.
func inflateBudget(textLen int) int { return 4<<20 + 16*textLen }

// openCost is charged for each stream tried (whose first two bytes are a
// gzip or zlib header; others cost what they read): resetting a decompressor
// costs about as much as inflating this many bytes.
const openCost = 4096

// inflater holds one RedactValues call's budget and its decompressors,
// reused from stream to stream (a new one allocates tens of kilobytes).
type inflater struct {
	budget int
	gz     *gzip.Reader
	zl     io.ReadCloser
}

// open reads a gzip or zlib header from r.
func (inf *inflater) open(r byteReader) (io.Reader, error) {
	br := &peekReader{r: r}
	head, err := br.peek(2)
	if err != nil {
		return nil, err
	}
	if head[0] == 0x1f && head[1] == 0x8b {
		inf.budget -= openCost
		if inf.gz == nil {
			inf.gz, err = gzip.NewReader(br)
		} else {
			err = inf.gz.Reset(br)
		}
		if err != nil {
			return nil, err
		}
		inf.gz.Multistream(false)
		return inf.gz, nil
	}
	if head[0]&0x0f == 8 && (int(head[0])<<8|int(head[1]))%31 == 0 {
		inf.budget -= openCost
		if inf.zl == nil {
			inf.zl, err = zlib.NewReader(br)
		} else {
			err = inf.zl.(zlib.Resetter).Reset(br, nil)
		}
		return inf.zl, err
	}
	return nil, io.ErrUnexpectedEOF
}

// zlibStarts are the base64 of the zlib headers compressors write (78 01,
// 78 5e, 78 9c, 78 da), gzipStart that of gzip's (1f 8b 08).
var (
	zlibStarts = []string{"eAE", "eF", "eJ", "eN"}
	gzipStart  = "H4sI"
)

// compressed finds gzip and zlib data in text — in the base64 runs of the
// normalised unfolded view u, at each gzip or zlib header, and raw gzip
// members in the text — and returns the regions whose inflated content
// holds a value (searched with findDepth at depth+1) or could not be read
// within the budget.
func (p *valuePatterns) compressed(text string, u *view, inf *inflater, depth int) []Finding {
	var spans []Finding
	// holds inflates r (exactly what r still holds is the rest of the
	// input) and reports whether the region read must be redacted.
	holds := func(r byteReader) bool {
		zr, err := inf.open(&budgetReader{r: r, inf: inf})
		if inf.budget <= 0 {
			return true // not readable within the budget: fail closed
		}
		if err != nil {
			return false
		}
		var out bytes.Buffer
		n, _ := io.Copy(&out, io.LimitReader(zr, int64(inf.budget)))
		// A truncated or corrupt stream is searched for what it gave.
		if inf.budget -= int(n); inf.budget <= 0 {
			return true
		}
		return out.Len() >= MinValueLen && len(p.findDepth(out.String(), inf, depth+1)) > 0
	}
	s := u.s
	for i := 0; i < len(s); {
		if !isB64(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isB64(s[j]) {
			j++
		}
		e := j
		for e < len(s) && s[e] == '=' {
			e++
		}
		if j-i >= 20 {
			spans = append(spans, p.compressedRun(u, i, j, e, inf, holds)...)
		}
		i = e
	}
	eachIndex(text, "\x1f\x8b\x08", func(a, _ int) {
		rd := strings.NewReader(text[a:])
		if holds(rd) {
			end := len(text) - rd.Len()
			if inf.budget <= 0 {
				end = len(text) // unread: withhold the rest
			}
			spans = append(spans, Finding{Kind: kindSecret, Start: a, End: end})
		}
	})
	return spans
}

// compressedRun tries the base64 run u.s[i:j] (padding to e) at its start
// and at every gzip or zlib header inside it. The run is decoded once per
// alignment; a header at character a is decoded byte (a-i-k)/4*3 of
// alignment k. The region redacted ends where the compressed stream ended.
func (p *valuePatterns) compressedRun(u *view, i, j, e int, inf *inflater, holds func(byteReader) bool) []Finding {
	var spans []Finding
	var dec [4][]byte
	try := func(a int) {
		k := (a - i) % 4
		if dec[k] == nil {
			run := []byte(u.s[i+k : j])
			for x, c := range run {
				switch c {
				case '-':
					run[x] = '+'
				case '_':
					run[x] = '/'
				}
			}
			run = run[:len(run)/4*4]
			dec[k] = make([]byte, base64.RawStdEncoding.DecodedLen(len(run)))
			n, _ := base64.RawStdEncoding.Decode(dec[k], run)
			dec[k] = dec[k][:n]
			inf.budget -= len(run)
		}
		off := (a - i - k) / 4 * 3
		if off >= len(dec[k]) {
			return
		}
		rd := bytes.NewReader(dec[k][off:])
		if holds(rd) {
			used := len(dec[k]) - off - rd.Len()
			end := min(a+(used*4+2)/3, j)
			if end <= a || end == j || inf.budget <= 0 { // unread: withhold the rest of the run
				end = e
			}
			spans = append(spans, u.span(a, end))
		}
	}
	try(i)
	for _, h := range append([]string{gzipStart}, zlibStarts...) {
		eachIndex(u.s[i+1:j], h, func(a, _ int) { try(i + 1 + a) })
	}
	return spans
}

func isB64(c byte) bool { return isAlnum(c) || c == '+' || c == '/' || c == '-' || c == '_' }

type byteReader interface {
	io.Reader
	io.ByteReader
}

// errBudget ends reading when the inflate budget is spent.
var errBudget = errors.New("redact: inflate budget spent")

// budgetReader charges every compressed byte read to the budget and stops
// when it is spent: a stream crafted to make the decompressor read far
// (a gzip header's extra field, garbage after many headers) costs its
// length, once.
type budgetReader struct {
	r   byteReader
	inf *inflater
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.inf.budget <= 0 {
		return 0, errBudget
	}
	n, err := b.r.Read(p[:min(len(p), b.inf.budget)])
	b.inf.budget -= n
	return n, err
}

func (b *budgetReader) ReadByte() (byte, error) {
	if b.inf.budget <= 0 {
		return 0, errBudget
	}
	c, err := b.r.ReadByte()
	if err == nil {
		b.inf.budget--
	}
	return c, err
}

// peekReader lets the first bytes be looked at and then read again,
// reading byte by byte so that nothing past the compressed stream is
// consumed (the budget counts what was read).
type peekReader struct {
	r    byteReader
	head []byte
}

func (p *peekReader) peek(n int) ([]byte, error) {
	for len(p.head) < n {
		var c [1]byte
		if _, err := io.ReadFull(p.r, c[:]); err != nil {
			return nil, err
		}
		p.head = append(p.head, c[0])
	}
	return p.head, nil
}

func (p *peekReader) Read(b []byte) (int, error) {
	if len(p.head) > 0 {
		n := copy(b, p.head)
		p.head = p.head[n:]
		return n, nil
	}
	return p.r.Read(b)
}

func (p *peekReader) ReadByte() (byte, error) {
	if len(p.head) > 0 {
		c := p.head[0]
		p.head = p.head[1:]
		return c, nil
	}
	return p.r.ReadByte()
}
