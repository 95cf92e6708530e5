// Package wire reads the answers of an OpenAI-compatible endpoint — a
// chat completion, the model list, an error answer — out of their JSON
// bodies, by hand and without reflection, as openai-go v3 (the SDK the
// model client replaced) read them. It is its own package so that its
// fuzz target, which gets outside input, can run (core/agent/llm's tests
// link the sandbox, which go test -fuzz cannot build).
//
// What this package must never do: panic or fail to return on any body,
// read more than the first JSON value, or decide anything about what an
// answer means — core/agent/llm does.
package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The endpoint's answers are decoded here, by hand, without reflection:
// the few members Chat and ListModels use are picked out of one pass over
// the body. What is read is what openai-go v3 (the SDK this client
// replaced) read from the same body, leniency included, because
// OpenAI-compatible servers differ in what they send:
//
//   - the body must be one valid JSON value (RFC 8259, as encoding/json
//     checks it); whatever follows it is ignored;
//   - of a member named twice, the first counts;
//   - a text member holding a number, true/false, an object or an array
//     reads as that value's JSON text (so a server that sends a tool
//     call's arguments as an object instead of a string still works);
//     null reads as "";
//   - a token count holding a string, a fraction or true reads as the
//     number it spells (truncated; true is 1); anything else as 0;
//   - an object member holding something else reads as empty;
//   - a list member holding something else, or a list with an element
//     that is neither an object nor null, reads as empty.
//
// TestDecodeMatchesSDK holds these rules to the SDK's answers, recorded in
// testdata/sdk_answers.json; FuzzDecodeChat checks any body decodes
// without a panic. Chat, not this package, applies what an answer means
// (no choices, a tool call of another type).

// maxDepth is how deeply arrays and objects may nest, as in encoding/json.
const maxDepth = 10000

// jsonKind is the kind of a JSON value.
type jsonKind uint8

const (
	kindNull jsonKind = iota
	kindFalse
	kindTrue
	kindNumber
	kindString
	kindObject
	kindArray
)

// jval is one JSON value of a body that scan checked: its kind and its
// text (raw, quotes and escapes included for a string).
type jval struct {
	kind jsonKind
	raw  []byte
}

// errJSON is a body that is not JSON.
type errJSON struct {
	off int
	msg string
}

func (e *errJSON) Error() string { return fmt.Sprintf("%s at offset %d", e.msg, e.off) }

// firstValue checks that b starts (after white space) with one valid JSON
// value and returns it; what follows the value is not looked at, as
// encoding/json's Decoder does not.
func firstValue(b []byte) (jval, error) {
	i := skipSpace(b, 0)
	if i == len(b) {
		return jval{}, &errJSON{off: i, msg: "empty body"}
	}
	end, err := scanValue(b, i, 0)
	if err != nil {
		return jval{}, err
	}
	return jval{kind: kindOf(b[i]), raw: b[i:end]}, nil
}

func kindOf(c byte) jsonKind {
	switch c {
	case '{':
		return kindObject
	case '[':
		return kindArray
	case '"':
		return kindString
	case 't':
		return kindTrue
	case 'f':
		return kindFalse
	case 'n':
		return kindNull
	}
	return kindNumber
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// scanValue checks the value starting at b[i] and returns where it ends.
func scanValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, &errJSON{off: i, msg: "unexpected end of JSON input"}
	}
	switch c := b[i]; {
	case c == '{':
		if depth >= maxDepth {
			return 0, &errJSON{off: i, msg: "exceeded max depth"}
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, nil
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return 0, errAt(b, i, "looking for beginning of object key string")
			}
			end, err := scanString(b, i)
			if err != nil {
				return 0, err
			}
			i = skipSpace(b, end)
			if i >= len(b) || b[i] != ':' {
				return 0, errAt(b, i, "after object key")
			}
			if i, err = scanValue(b, skipSpace(b, i+1), depth+1); err != nil {
				return 0, err
			}
			i = skipSpace(b, i)
			if i < len(b) && b[i] == ',' {
				i = skipSpace(b, i+1)
				continue
			}
			if i < len(b) && b[i] == '}' {
				return i + 1, nil
			}
			return 0, errAt(b, i, "after object key:value pair")
		}
	case c == '[':
		if depth >= maxDepth {
			return 0, &errJSON{off: i, msg: "exceeded max depth"}
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, nil
		}
		for {
			var err error
			if i, err = scanValue(b, i, depth+1); err != nil {
				return 0, err
			}
			i = skipSpace(b, i)
			if i < len(b) && b[i] == ',' {
				i = skipSpace(b, i+1)
				continue
			}
			if i < len(b) && b[i] == ']' {
				return i + 1, nil
			}
			return 0, errAt(b, i, "after array element")
		}
	case c == '"':
		return scanString(b, i)
	case c == '-' || (c >= '0' && c <= '9'):
		return scanNumber(b, i)
	case c == 't':
		return scanLiteral(b, i, "true")
	case c == 'f':
		return scanLiteral(b, i, "false")
	case c == 'n':
		return scanLiteral(b, i, "null")
	}
	return 0, errAt(b, i, "looking for beginning of value")
}

func errAt(b []byte, i int, context string) error {
	if i >= len(b) {
		return &errJSON{off: i, msg: "unexpected end of JSON input"}
	}
	return &errJSON{off: i, msg: fmt.Sprintf("invalid character %q %s", b[i], context)}
}

func scanLiteral(b []byte, i int, lit string) (int, error) {
	for j := 0; j < len(lit); j++ {
		if i+j >= len(b) || b[i+j] != lit[j] {
			return 0, errAt(b, i+j, "in literal "+lit)
		}
	}
	return i + len(lit), nil
}

// scanString checks the string starting at b[i] (a quote) as
// encoding/json does: no control characters, only JSON's escapes; bytes
// that are not UTF-8 pass.
func scanString(b []byte, i int) (int, error) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, nil
		case c < 0x20:
			return 0, errAt(b, i, "in string literal")
		case c == '\\':
			i++
			if i >= len(b) {
				break
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for j := 1; j <= 4; j++ {
					if i+j >= len(b) {
						return 0, errAt(b, i+j, "")
					}
					if !isHex(b[i+j]) {
						return 0, errAt(b, i+j, "in \\u hexadecimal character escape")
					}
				}
				i += 4
			default:
				return 0, errAt(b, i, "in string escape code")
			}
		}
	}
	return 0, &errJSON{off: i, msg: "unexpected end of JSON input"}
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanNumber checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func scanNumber(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return 0, errAt(b, i, "in numeric literal")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return 0, errAt(b, i, "after decimal point in numeric literal")
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return 0, errAt(b, i, "in exponent of numeric literal")
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, nil
}

// members calls f with each member of the object v (scan checked it),
// in order, until f returns false; key is the member's name as written
// (quoted, escapes and all: see keyIs). A member named twice is passed
// twice: fields keeps the first.
func (v jval) members(f func(key []byte, val jval) bool) {
	b := v.raw
	i := skipSpace(b, 1)
	for i < len(b) && b[i] == '"' {
		kend, _ := scanString(b, i)
		key := b[i:kend]
		i = skipSpace(b, kend)
		i = skipSpace(b, i+1) // the colon
		vend, _ := scanValue(b, i, 0)
		if !f(key, jval{kind: kindOf(b[i]), raw: b[i:vend]}) {
			return
		}
		i = skipSpace(b, vend)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
}

// elements calls f with each element of the array v (scan checked it).
func (v jval) elements(f func(val jval)) {
	b := v.raw
	i := skipSpace(b, 1)
	for i < len(b) && b[i] != ']' {
		end, _ := scanValue(b, i, 0)
		f(jval{kind: kindOf(b[i]), raw: b[i:end]})
		i = skipSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
}

// fields picks the members named in names out of the object v, the first
// of each name; a member not there stays the zero jval (kindNull).
func (v jval) fields(names []string, out []jval) {
	seen := 0
	v.members(func(key []byte, val jval) bool {
		for i, n := range names {
			if out[i].raw == nil && keyIs(key, n) {
				out[i] = val
				seen++
				break
			}
		}
		return seen < len(names)
	})
}

// keyIs reports whether the quoted member name key is name, without
// allocating unless the name has escapes.
func keyIs(key []byte, name string) bool {
	inner := key[1 : len(key)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner) == name
	}
	return unquote(key) == name
}

// text is v read as text (the SDK's leniency: see the file comment).
func (v jval) text() string {
	switch v.kind {
	case kindString:
		return unquote(v.raw)
	case kindNumber:
		return numberText(v.raw)
	case kindTrue:
		return "true"
	case kindFalse:
		return "false"
	case kindObject, kindArray:
		return string(v.raw)
	}
	return ""
}

// numberText is a number's text as the SDK read it into a string: as
// written when it is an integer, else the shortest decimal form of its
// float64 value.
func numberText(raw []byte) string {
	i := 0
	if raw[0] == '-' {
		i++
	}
	for ; i < len(raw); i++ {
		if !isDigit(raw[i]) {
			f, _ := strconv.ParseFloat(string(raw), 64)
			return strconv.FormatFloat(f, 'f', -1, 64)
		}
	}
	return string(raw)
}

// integer is v read as a token count (the SDK's leniency).
func (v jval) integer() int64 {
	switch v.kind {
	case kindTrue:
		return 1
	case kindString:
		s := unquote(v.raw)
		n, ok := parseInt(s)
		if !ok {
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				n = f2i(f)
			}
		}
		return n
	case kindNumber:
		f, _ := strconv.ParseFloat(string(v.raw), 64)
		if f >= -9007199254740991 && f <= 9007199254740991 {
			return int64(f)
		}
		if n, ok := parseInt(string(v.raw)); ok {
			return n
		}
		return f2i(f)
	}
	return 0
}

func f2i(f float64) int64 {
	switch {
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f < math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

// parseInt reads an optionally negative run of digits, saturating, as
// the SDK's JSON library (gjson) does.
func parseInt(s string) (int64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	n, ok := parseUint(s)
	if !ok {
		return 0, false
	}
	if neg {
		if n > 1<<63 {
			return math.MinInt64, true
		}
		return -int64(n), true
	}
	if n > math.MaxInt64 {
		return math.MaxInt64, true
	}
	return int64(n), true
}

func parseUint(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		next := n*10 + uint64(s[i]-'0')
		if next < n {
			for ; i < len(s); i++ {
				if !isDigit(s[i]) {
					return 0, false
				}
			}
			return math.MaxUint64, true
		}
		n = next
	}
	return n, true
}

// unquote is the text of the JSON string q (quotes included, checked by
// scanString). Bytes that are not UTF-8 are kept as they are; a \u escape
// of half a surrogate pair that has no other half becomes U+FFFD.
func unquote(q []byte) string {
	s := q[1 : len(q)-1]
	j := 0
	for j < len(s) && s[j] != '\\' {
		j++
	}
	if j == len(s) {
		return string(s)
	}
	out := make([]byte, j, len(s))
	copy(out, s[:j])
	for i := j; i < len(s); i++ {
		if s[i] != '\\' {
			out = append(out, s[i])
			continue
		}
		i++
		switch s[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(s[i+1:])
			i += 4
			if utf16.IsSurrogate(r) && i+7 <= len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				r = utf16.DecodeRune(r, hex4(s[i+3:]))
				i += 6
			}
			out = utf8.AppendRune(out, r)
		default: // '"', '\\', '/'
			out = append(out, s[i])
		}
	}
	return string(out)
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// objectsOrNulls reports whether v is an array whose every element is an
// object or null: what the SDK reads as a list of objects.
func (v jval) objectsOrNulls() bool {
	if v.kind != kindArray {
		return false
	}
	ok := true
	v.elements(func(e jval) {
		if e.kind != kindObject && e.kind != kindNull {
			ok = false
		}
	})
	return ok
}

// Member names of a chat completion, in the order fields takes them.
var (
	completionNames = []string{"model", "choices", "usage"}
	choiceNames     = []string{"finish_reason", "message"}
	messageNames    = []string{"content", "refusal", "tool_calls"}
	callNames       = []string{"id", "type", "function"}
	functionNames   = []string{"name", "arguments"}
	usageNames      = []string{"prompt_tokens", "completion_tokens", "total_tokens"}
	errorNames      = []string{"message", "code", "type"}
	errorMember     = []string{"error"}
	listNames       = []string{"data"}
	modelNames      = []string{"id"}
)

// Call is one tool call of an answer: its id, the type it named
// ("function", or empty, for the only kind Silas offers) and the
// function's name and arguments (the JSON text the model wrote).
type Call struct {
	ID, Type, Name, Arguments string
}

// Usage is the token counts an answer reported.
type Usage struct {
	PromptTokens, CompletionTokens, TotalTokens int64
}

// Chat is what a chat-completions answer says: how many choices it has
// and the first one's message.
type Chat struct {
	Model        string
	Choices      int
	Content      string
	Refusal      string
	FinishReason string
	ToolCalls    []Call
	Usage        Usage
}

// ErrNotObject is an answer that is JSON but not an object.
var ErrNotObject = errors.New("the answer is not a JSON object")

// DecodeChat reads a chat-completions answer (see the file comment). Its
// error says what is wrong: not JSON, or not an object.
func DecodeChat(body []byte) (Chat, error) {
	var d Chat
	v, err := firstValue(body)
	if err != nil {
		return d, notJSON(err)
	}
	return d, decodeChatValue(v, &d)
}

// notJSON is a syntax error, said as such.
func notJSON(err error) error {
	return fmt.Errorf("the answer is not JSON: %w", err)
}

func decodeChatValue(v jval, d *Chat) error {
	switch v.kind {
	case kindNull:
		return nil
	case kindObject:
	default:
		return ErrNotObject
	}
	var top [3]jval
	v.fields(completionNames, top[:])
	d.Model = top[0].text()
	if u := top[2]; u.kind == kindObject {
		var f [3]jval
		u.fields(usageNames, f[:])
		d.Usage = Usage{PromptTokens: f[0].integer(), CompletionTokens: f[1].integer(), TotalTokens: f[2].integer()}
	}
	choices := top[1]
	if !choices.objectsOrNulls() {
		return nil
	}
	var first jval
	choices.elements(func(e jval) {
		if d.Choices == 0 {
			first = e
		}
		d.Choices++
	})
	if first.kind != kindObject {
		return nil
	}
	var ch [2]jval
	first.fields(choiceNames, ch[:])
	d.FinishReason = ch[0].text()
	msg := ch[1]
	if msg.kind != kindObject {
		return nil
	}
	var m [3]jval
	msg.fields(messageNames, m[:])
	d.Content, d.Refusal = m[0].text(), m[1].text()
	if calls := m[2]; calls.objectsOrNulls() {
		calls.elements(func(e jval) {
			var c Call
			if e.kind == kindObject {
				var f [3]jval
				e.fields(callNames, f[:])
				c.ID, c.Type = f[0].text(), f[1].text()
				if fn := f[2]; fn.kind == kindObject {
					var g [2]jval
					fn.fields(functionNames, g[:])
					c.Name, c.Arguments = g[0].text(), g[1].text()
				}
			}
			d.ToolCalls = append(d.ToolCalls, c)
		})
	}
	return nil
}

// DecodeModels reads the ids of a GET /models answer; its error is
// DecodeChat's.
func DecodeModels(body []byte) ([]string, error) {
	v, err := firstValue(body)
	if err != nil {
		return nil, notJSON(err)
	}
	switch v.kind {
	case kindNull:
		return nil, nil
	case kindObject:
	default:
		return nil, ErrNotObject
	}
	var data [1]jval
	v.fields(listNames, data[:])
	if !data[0].objectsOrNulls() {
		return nil, nil
	}
	var ids []string
	data[0].elements(func(e jval) {
		var id [1]jval
		if e.kind == kindObject {
			e.fields(modelNames, id[:])
		}
		ids = append(ids, id[0].text())
	})
	return ids, nil
}

// ErrorText is what an error answer's body says: the message, code
// and type of its "error" object. The SDK failed with a decoding error
// (and lost the status) when "error" held a string; its text is the
// message here.
func ErrorText(body []byte) (msg, code, typ string) {
	v, err := firstValue(body)
	if err != nil || v.kind != kindObject {
		return "", "", ""
	}
	var e [1]jval
	v.fields(errorMember, e[:])
	switch e[0].kind {
	case kindObject:
		var f [3]jval
		e[0].fields(errorNames, f[:])
		return f[0].text(), f[1].text(), f[2].text()
	case kindString:
		return e[0].text(), "", ""
	}
	return "", "", ""
}
