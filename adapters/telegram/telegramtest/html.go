//lint:file-ignore ST1005 the fake answers with Telegram's own error descriptions, capitalised as the Bot API sends them

package telegramtest

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
)

// Tag is one markup element Telegram recognised in a message.
type Tag struct {
	Name string
	// Href is the link target of an <a> tag.
	Href string
}

// supportedTags are the tags of Telegram's HTML parse mode.
var supportedTags = map[string]bool{
	"b": true, "strong": true, "i": true, "em": true, "u": true, "ins": true, "s": true, "strike": true, "del": true,
	"span": true, "tg-spoiler": true, "a": true, "tg-emoji": true, "code": true, "pre": true, "blockquote": true,
}

// ParseHTML parses text the way Telegram's HTML parse mode does (strictly):
// it returns the text users see and the tags found, or the error Telegram
// answers ("can't parse entities: …"). Every <, > and & that is not part of
// a tag or an entity is an error.
func ParseHTML(s string) (plain string, tags []Tag, err error) {
	var b strings.Builder
	var stack []string
	for i := 0; i < len(s); {
		switch c := s[i]; c {
		case '<':
			j := strings.IndexByte(s[i:], '>')
			if j < 0 {
				return "", nil, fmt.Errorf("Unclosed start tag at byte offset %d", i)
			}
			inner := s[i+1 : i+j]
			if name, ok := strings.CutPrefix(inner, "/"); ok {
				name = strings.ToLower(strings.TrimSpace(name))
				if len(stack) == 0 || stack[len(stack)-1] != name {
					return "", nil, fmt.Errorf("Unmatched end tag at byte offset %d, found \"</%s>\"", i, name)
				}
				stack = stack[:len(stack)-1]
			} else {
				name, attrs, _ := strings.Cut(inner, " ")
				name = strings.ToLower(name)
				if !supportedTags[name] {
					return "", nil, fmt.Errorf("Unsupported start tag \"%s\" at byte offset %d", name, i)
				}
				t := Tag{Name: name}
				if name == "a" {
					href, err := attr(attrs, "href")
					if err != nil {
						return "", nil, fmt.Errorf("%v at byte offset %d", err, i)
					}
					t.Href = href
				}
				if name == "span" {
					if cl, _ := attr(attrs, "class"); cl != "tg-spoiler" {
						return "", nil, fmt.Errorf("Tag \"span\" must have class \"tg-spoiler\" at byte offset %d", i)
					}
				}
				tags = append(tags, t)
				stack = append(stack, name)
			}
			i += j + 1
		case '&':
			r, n, err := entity(s[i:])
			if err != nil {
				return "", nil, fmt.Errorf("%v at byte offset %d", err, i)
			}
			b.WriteString(r)
			i += n
		case '>':
			return "", nil, fmt.Errorf("Unexpected \">\" at byte offset %d", i)
		default:
			b.WriteByte(c)
			i++
		}
	}
	if len(stack) > 0 {
		return "", nil, fmt.Errorf("Can't find end tag corresponding to start tag \"%s\"", stack[len(stack)-1])
	}
	return b.String(), tags, nil
}

// entity decodes one character entity at the start of s.
func entity(s string) (string, int, error) {
	end := strings.IndexByte(s, ';')
	if end < 0 || end > 12 {
		return "", 0, fmt.Errorf("Character entity expected")
	}
	name := s[1:end]
	switch name {
	case "lt":
		return "<", end + 1, nil
	case "gt":
		return ">", end + 1, nil
	case "amp":
		return "&", end + 1, nil
	case "quot":
		return "\"", end + 1, nil
	}
	if num, ok := strings.CutPrefix(name, "#"); ok {
		base := 10
		if h, ok := strings.CutPrefix(num, "x"); ok {
			num, base = h, 16
		}
		n, err := strconv.ParseUint(num, base, 32)
		if err == nil && n > 0 && n <= 0x10FFFF {
			return string(rune(n)), end + 1, nil
		}
	}
	return "", 0, fmt.Errorf("Unsupported HTML entity \"&%s;\"", name)
}

// attr reads name="value" from a tag's attributes.
func attr(attrs, name string) (string, error) {
	i := strings.Index(attrs, name+"=\"")
	if i < 0 {
		return "", fmt.Errorf("Tag needs attribute %q", name)
	}
	rest := attrs[i+len(name)+2:]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return "", fmt.Errorf("Unclosed attribute %q", name)
	}
	v := rest[:j]
	var b strings.Builder
	for k := 0; k < len(v); {
		if v[k] == '&' {
			r, n, err := entity(v[k:])
			if err != nil {
				return "", err
			}
			b.WriteString(r)
			k += n
			continue
		}
		b.WriteByte(v[k])
		k++
	}
	return b.String(), nil
}

// TextLen is the length Telegram measures: UTF-16 code units.
func TextLen(s string) int { return len(utf16.Encode([]rune(s))) }
