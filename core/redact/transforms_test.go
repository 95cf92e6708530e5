package redact

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"strings"
	"testing"
)

// transformCanary is the secret of the disguise table: letters of both
// cases, digits and characters escapers change; odd length (halves split
// two ways).
const transformCanary = "Kx7-pQ2z/Wm9+Rt4&Lv8"

func gzipB64(s string, wrapAt int) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	e := base64.StdEncoding.EncodeToString(b.Bytes())
	if wrapAt > 0 {
		e = wrap(e, wrapAt, "\n")
	}
	return e
}

func zlibB64(s string) string {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

func rawGzip(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.String()
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

func interleave(s, sep string) string { return strings.Join(strings.Split(s, ""), sep) }

func everyByte(s, format string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, format, s[i])
	}
	return b.String()
}

// TestRedactValuesDisguises is issue 22's table: a program that received
// the secret prints it through each cheap reversible transform; none
// survives, and the text around it does.
func TestRedactValuesDisguises(t *testing.T) {
	t.Parallel()
	v := transformCanary
	n := len(v)
	jsonU := everyByte(v, `\u%04x`)
	cases := []struct{ name, printed string }{
		{"upper case", strings.ToUpper(v)},
		{"lower case", strings.ToLower(v)},
		{"swapped case", strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z':
				return r - 32
			case r >= 'A' && r <= 'Z':
				return r + 32
			}
			return r
		}, v)},
		{"reversed", reverse(v)},
		{"reversed upper", strings.ToUpper(reverse(v))},
		{"rot13", rot13(v)},
		{"rot13 reversed", rot13(reverse(v))},
		{"rot47", rot47(v)},
		{"URL query escape", url.QueryEscape(v)},
		{"URL every byte", everyByte(v, "%%%02X")},
		{"URL every byte lower", everyByte(v, "%%%02x")},
		{"JSON \\u every character", jsonU},
		{"JSON marshal of a JSON string", func() string { b, _ := json.Marshal(v); return string(b) }()},
		{"C \\x escapes", everyByte(v, `\x%02x`)},
		{"octal escapes", everyByte(v, `\%03o`)},
		{"HTML escape", html.EscapeString(v)},
		{"HTML decimal entities", everyByte(v, "&#%d;")},
		{"HTML hex entities", everyByte(v, "&#x%X;")},
		{"gzip+base64", gzipB64(v, 0)},
		{"gzip+base64 wrapped", gzipB64(v, 76)},
		{"gzip+base64 after a word", "blob:" + gzipB64(v, 0)},
		{"gzip+base64 glued to other base64", "QUJD" + gzipB64(v, 0)},
		{"zlib+base64", zlibB64(v)},
		{"gzip of gzip, base64", gzipB64(rawGzip(v), 0)},
		{"raw gzip bytes", rawGzip(v)},
		{"swapped halves", v[n/2:] + v[:n/2]},
		{"swapped halves on two lines", v[n/2:] + "\n" + v[:n/2]},
		{"zero-width spaces", interleave(v, "\u200b")},
		{"zero-width joiners and BOM", interleave(v, "\u200d\ufeff")},
		{"bidi controls", interleave(v, "\u202e")},
		{"soft hyphens", interleave(v, "\u00ad")},
		{"ANSI colours", interleave(v, "\x1b[31m\x1b[0m")},
		{"ANSI OSC title", interleave(v, "\x1b]0;x\x07")},
		{"backspace overstrike", interleave(v, "_\b")},
		{"full-width letters", strings.Map(func(r rune) rune {
			if r > ' ' && r < 0x7f {
				return r + 0xfee0
			}
			return r
		}, v)},
		{"upper case, zero-width, URL-escaped", url.QueryEscape(interleave(strings.ToUpper(v), "\u200b"))},
		{"reversed with ANSI", interleave(reverse(v), "\x1b[1m")},
		{"hex with zero-width spaces", interleave(fmt.Sprintf("%x", v), "\u200c")},
		{"base64 in mixed case escapes", url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(v)))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			text := "before the secret\n" + c.printed + "\nafter the secret\n"
			got := RedactValues(text, []string{v})
			if !strings.Contains(got, ValueReplacement) {
				t.Fatalf("not redacted:\n%q", got)
			}
			if strings.Contains(got, c.printed) {
				t.Fatalf("the disguised secret survives:\n%q", got)
			}
			if !strings.HasPrefix(got, "before the secret\n") || !strings.HasSuffix(got, "\nafter the secret\n") {
				t.Fatalf("redacted too much:\n%q", got)
			}
			if other := RedactValues(text, []string{"an0ther-Secret-Value-99"}); other != text {
				t.Fatalf("an unrelated value redacted something:\n%q", other)
			}
		})
	}
}

// A compressed blob that would inflate past the budget is withheld rather
// than read (fail closed), and reading stays bounded.
func TestRedactValuesInflateBudget(t *testing.T) {
	t.Parallel()
	bomb := gzipB64(strings.Repeat("a", inflateBudget(0)+1<<20), 0)
	text := "x\n" + bomb + "\ny\n"
	got := RedactValues(text, []string{transformCanary})
	if got != "x\n"+ValueReplacement+"\ny\n" {
		t.Fatalf("bomb not withheld: %q…", got[:min(len(got), 80)])
	}
	// Compressed data without the secret, within the budget, stays.
	plain := "x\n" + gzipB64("nothing to see here", 0) + "\n"
	if got := RedactValues(plain, []string{transformCanary}); got != plain {
		t.Fatalf("harmless gzip redacted: %q", got)
	}
}

// Ordinary text with escapes, colours and mixed case is left alone when
// it does not hold the value.
func TestRedactValuesNormalisedNotTooMuch(t *testing.T) {
	t.Parallel()
	text := "\x1b[32mOK\x1b[0m GET /a%20b?x=1&amp;y=2 \\u0041BC zero\u200bwidth SECRET-VALUE reversed EULAV\n"
	if got := RedactValues(text, []string{"s3cr3t-value-9", "an0ther-Secret"}); got != text {
		t.Fatalf("changed: %q", got)
	}
}
