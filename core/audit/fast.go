package audit

import (
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/silas-gateway/silas/core/canon"
)

// Fast canonical encoding. Audit data is made of a few simple types
// (strings, integers, booleans, string lists, nested maps), for which RFC
// 8785 output can be written directly instead of marshalling and then
// re-parsing through canon.Transform: this runs for every audit entry, on
// the writer's path. Anything outside those types (floats, integers beyond
// 2^53, non-ASCII keys, other types) makes the encoder give up
// and the caller takes the general path, so the result is always what
// canon.Transform would produce (TestFastMatchesTransform and FuzzFastData
// check exactly that).

// maxExactInt is the largest integer an IEEE-754 double holds exactly; RFC
// 8785 serialises numbers as doubles.
const maxExactInt = 1 << 53

// appendCanonical appends the canonical JSON of v; ok=false means v needs
// the general path.
func appendCanonical(b []byte, v any) (_ []byte, ok bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return canon.AppendString(b, x), true
	case bool:
		return strconv.AppendBool(b, x), true
	case int:
		return appendCanonicalInt(b, int64(x))
	case int64:
		return appendCanonicalInt(b, x)
	case int32:
		return appendCanonicalInt(b, int64(x))
	case []string:
		if x == nil {
			return append(b, "null"...), true // as encoding/json writes a nil slice
		}
		b = append(b, '[')
		for i, s := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = canon.AppendString(b, s)
		}
		return append(b, ']'), true
	case []any:
		if x == nil {
			return append(b, "null"...), true
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendCanonical(b, e); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		if x == nil {
			return append(b, "null"...), true
		}
		return appendCanonicalObject(b, x)
	}
	return b, false
}

func appendCanonicalInt(b []byte, v int64) ([]byte, bool) {
	if v > maxExactInt || v < -maxExactInt {
		return b, false
	}
	return strconv.AppendInt(b, v, 10), true
}

// appendCanonicalObject writes members sorted by key. RFC 8785 sorts by
// UTF-16 code units, which for ASCII keys is byte order; other keys take the
// general path.
func appendCanonicalObject(b []byte, m map[string]any) ([]byte, bool) {
	var small [16]string
	keys := small[:0]
	for k := range m {
		for i := 0; i < len(k); i++ {
			if k[i] >= utf8.RuneSelf {
				return b, false
			}
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	var ok bool
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = canon.AppendString(b, k)
		b = append(b, ':')
		if b, ok = appendCanonical(b, m[k]); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// prepareFast is Prepare without the general path; ok=false when the entry
// has a value it does not handle. The data's canonical form is written in
// place in the prefix and data is that slice of it (its capacity capped,
// so nothing appended to either can reach the other): one buffer per entry
// instead of the data's and a copy of it.
func prepareFast(at string, e Entry) (data, prefix []byte, ok bool) {
	// The envelope's keys in RFC 8785 order: actor, at, conversation, data,
	// kind; "seq" is appended last by Canonical.
	p := make([]byte, 0, 64+16*len(e.Data)+len(e.Actor)+len(e.Conversation)+len(e.Kind)+len(at)+64)
	p = append(p, `{"actor":`...)
	p = canon.AppendString(p, e.Actor)
	p = append(p, `,"at":`...)
	p = canon.AppendString(p, at)
	p = append(p, `,"conversation":`...)
	p = canon.AppendString(p, e.Conversation)
	p = append(p, `,"data":`...)
	start := len(p)
	if e.Data == nil {
		p = append(p, "{}"...)
	} else if p, ok = appendCanonicalObject(p, e.Data); !ok {
		return nil, nil, false
	}
	data = p[start:len(p):len(p)]
	p = append(p, `,"kind":`...)
	p = canon.AppendString(p, string(e.Kind))
	p = append(p, `,"seq":`...)
	return data, p, true
}
