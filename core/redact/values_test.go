package redact

import (
	"bytes"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/internal/testenv"
)

// valueSecret has characters that every encoding changes, and a length
// (23) that is a multiple of neither 3 nor 5.
const valueSecret = "s3cr3t-Zq8vW1xR7/pL3nB+"

// toolCase is one way a program prints bytes: a real tool fed the bytes on
// stdin, or a Go encoder for layouts no tool is needed for.
type toolCase struct {
	name   string
	argv   []string               // run with the input on stdin
	encode func(in []byte) string // or encode in Go
	family string                 // how a leak would be decoded back: plain, b64, b64url, b32, hex
}

var toolCases = []toolCase{
	{name: "fold -w 7", argv: []string{"fold", "-w", "7"}, family: "plain"},
	{name: "fold -w 1", argv: []string{"fold", "-w", "1"}, family: "plain"},
	{name: "base64", argv: []string{"base64"}, family: "b64"},
	{name: "base64 -w 0", argv: []string{"base64", "-w", "0"}, family: "b64"},
	{name: "base64 -w 64", argv: []string{"base64", "-w", "64"}, family: "b64"},
	{name: "openssl base64", argv: []string{"openssl", "base64"}, family: "b64"},
	{name: "basenc --base64url", argv: []string{"basenc", "--base64url"}, family: "b64url"},
	{name: "basenc --base64url -w 0", argv: []string{"basenc", "--base64url", "-w", "0"}, family: "b64url"},
	{name: "base32", argv: []string{"base32"}, family: "b32"},
	{name: "base32 -w 0", argv: []string{"base32", "-w", "0"}, family: "b32"},
	{name: "xxd", argv: []string{"xxd"}, family: "hex"},
	{name: "xxd -u", argv: []string{"xxd", "-u"}, family: "hex"},
	{name: "xxd -g1", argv: []string{"xxd", "-g1"}, family: "hex"},
	{name: "xxd -e", argv: []string{"xxd", "-e"}, family: "hex"},
	{name: "xxd -p", argv: []string{"xxd", "-p"}, family: "hex"},
	{name: "od -A x -t x1z", argv: []string{"od", "-A", "x", "-t", "x1z"}, family: "hex"},
	{name: "od -t x1", argv: []string{"od", "-t", "x1"}, family: "hex"},
	{name: "od -x", argv: []string{"od", "-x"}, family: "hex"},
	{name: "od -t x4", argv: []string{"od", "-t", "x4"}, family: "hex"},
	{name: "hexdump -C", argv: []string{"hexdump", "-C"}, family: "hex"},
	{name: "hexdump", argv: []string{"hexdump"}, family: "hex"},
	{name: "go exact", encode: func(in []byte) string { return string(in) }, family: "plain"},
	{name: "go spaces between characters", encode: func(in []byte) string { return strings.Join(strings.Split(string(in), ""), " ") }, family: "plain"},
	{name: "go CRLF wrap at 5", encode: func(in []byte) string { return wrap(string(in), 5, "\r\n") }, family: "plain"},
	{name: "go base64 std", encode: func(in []byte) string { return base64.StdEncoding.EncodeToString(in) }, family: "b64"},
	{name: "go base64 raw url", encode: func(in []byte) string { return base64.RawURLEncoding.EncodeToString(in) }, family: "b64url"},
	{name: "go base64 mime 76", encode: func(in []byte) string { return wrap(base64.StdEncoding.EncodeToString(in), 76, "\r\n") }, family: "b64"},
	{name: "go base32 raw", encode: func(in []byte) string { return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(in) }, family: "b32"},
	{name: "go hex lower", encode: hex.EncodeToString, family: "hex"},
	{name: "go hex upper", encode: func(in []byte) string { return strings.ToUpper(hex.EncodeToString(in)) }, family: "hex"},
	{name: "go hex spaced bytes", encode: func(in []byte) string { return spacedHex(in, " ") }, family: "hex"},
	{name: "go hex colon bytes wrapped", encode: func(in []byte) string { return wrap(hex.EncodeToString(in), 32, "\n") }, family: "hex"},
}

func wrap(s string, n int, nl string) string {
	var b strings.Builder
	for i := 0; i < len(s); i += n {
		if i > 0 {
			b.WriteString(nl)
		}
		b.WriteString(s[i:min(i+n, len(s))])
	}
	return b.String()
}

func spacedHex(in []byte, sep string) string {
	parts := make([]string, len(in))
	for i, c := range in {
		parts[i] = fmt.Sprintf("%02x", c)
	}
	return strings.Join(parts, sep)
}

// toolPackage names the Debian package of each tool the cases run (.ci/run
// installs them).
var toolPackage = map[string]string{"xxd": "xxd", "hexdump": "bsdextrautils", "openssl": "openssl",
	"basenc": "coreutils", "base32": "coreutils", "base64": "coreutils", "od": "coreutils", "fold": "coreutils"}

func (c toolCase) run(t *testing.T, in []byte) string {
	t.Helper()
	if c.encode != nil {
		return c.encode(in)
	}
	cmd := exec.Command(testenv.Tool(t, c.argv[0], toolPackage[c.argv[0]]), c.argv[1:]...)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		testenv.Missing(t, "%s: %v (an option this build of %s lacks?)", c.name, err, c.argv[0])
	}
	return string(out)
}

// TestRedactValuesEncodings runs each tool on the secret at every byte
// alignment (so it sits inside a longer encoded stream, crosses line
// wraps and dump lines) and checks that nothing of it can be decoded back
// from the redacted output, and that the same output is left alone when
// the secret is another value.
func TestRedactValuesEncodings(t *testing.T) {
	t.Parallel()
	lead := "Authorization: Basic; user=alice; some context to push it over a line "
	for _, c := range toolCases {
		for k := range 5 {
			t.Run(fmt.Sprintf("%s/offset %d", c.name, k), func(t *testing.T) {
				in := []byte(lead + "abcd"[:k] + valueSecret + "\nand the rest of the output after it\n")
				out := c.run(t, in)
				if !recoverable(out, c.family, valueSecret) {
					t.Fatalf("control: the secret cannot be recovered from the tool's output %q", out)
				}
				red := RedactValues(out, []string{valueSecret})
				if recoverable(red, c.family, valueSecret) {
					t.Fatalf("secret recoverable from\n%s\nredacted from\n%s", red, out)
				}
				if !strings.Contains(red, ValueReplacement) {
					t.Fatalf("no replacement in %q", red)
				}
				// Another value is not found in it: nothing is redacted.
				if other := RedactValues(out, []string{"an0ther-Secret-Value-99"}); other != out {
					t.Fatalf("unrelated value redacted something:\n%s", other)
				}
				// Lines far from the secret survive (no absurd over-redaction):
				// the tail of the input is still decodable for plain and dumps.
				if c.family == "plain" && !strings.Contains(stripSpace(red), "therestoftheoutput") {
					t.Fatalf("redacted too much: %q", red)
				}
			})
		}
	}
}

// recoverable reports whether the middle of secret (all but two bytes at
// each end, which an encoding shares with its neighbours) can be read back
// from out by decoding it the way family encodes. The decoding is written
// independently of the redactor: every run of the family's alphabet (with
// whitespace removed) at every character offset, or every hex digit pair,
// in order and byte-swapped within groups, of every whitespace-separated
// hex token.
func recoverable(out, family, secret string) bool {
	mid := []byte(secret[2 : len(secret)-2])
	flat := stripSpace(out)
	switch family {
	case "plain":
		return strings.Contains(flat, string(mid))
	case "b64", "b64url", "b32":
		alpha, enc, block := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", base64.RawStdEncoding.DecodeString, 4
		if family == "b64url" {
			alpha, enc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", base64.RawURLEncoding.DecodeString
		}
		if family == "b32" {
			alpha, block = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 8
			enc = base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString
		}
		for _, run := range strings.FieldsFunc(flat, func(r rune) bool { return !strings.ContainsRune(alpha, r) }) {
			for off := 0; off < block && off < len(run); off++ {
				s := run[off:]
				s = s[:len(s)/block*block]
				if b, err := enc(s); err == nil && bytes.Contains(b, mid) {
					return true
				}
			}
		}
		return false
	case "hex":
		var inOrder, swapped strings.Builder
		for _, line := range strings.Split(out, "\n") {
			for _, tok := range strings.Fields(line) {
				tok = strings.ToLower(strings.TrimSuffix(tok, ":"))
				if _, err := hex.DecodeString(tok); err != nil {
					continue
				}
				inOrder.WriteString(tok)
				for i := len(tok) - 2; i >= 0; i -= 2 {
					swapped.WriteString(tok[i : i+2])
				}
			}
		}
		h := hex.EncodeToString(mid)
		if strings.Contains(inOrder.String(), h) || strings.Contains(swapped.String(), h) || strings.Contains(strings.ToLower(flat), h) {
			return true
		}
		// The character column of a dump spells the bytes out, a line at
		// a time: no line may show a 6-byte piece of the secret.
		for _, line := range strings.Split(out, "\n") {
			for i := 0; i+6 <= len(secret); i++ {
				if strings.Contains(line, secret[i:i+6]) {
					return true
				}
			}
		}
		return false
	}
	panic("unknown family " + family)
}

func TestRedactValuesNotTooMuch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		text   string
		values []string
		want   string
	}{
		{"short value matched only as written", "PIN 12 34 and 1234", []string{"1234"}, "PIN 12 34 and " + ValueReplacement},
		{"short value not across lines", "ab\ncd abcd", []string{"abcd"}, "ab\ncd " + ValueReplacement},
		{"values under the minimum are ignored", "a b ab abc", []string{"ab", "abc", ""}, "a b ab abc"},
		{"spread match spans only its characters", "before s3cr3t-\nvalue after", []string{"s3cr3t-value"}, "before " + ValueReplacement + " after"},
		{"spread match keeps surrounding lines", "line one\npass\nword-99\nline four", []string{"password-99"}, "line one\n" + ValueReplacement + "\nline four"},
		{"dump match ends at its last line",
			"00000000: 7365 6372 6574 2d76 616c 7565 0a              secret-value.\nnext line stays\n",
			[]string{"secret-value"}, "00000000: " + ValueReplacement + "\nnext line stays\n"},
		{"hex of a value is not found in unrelated hex", "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", []string{"s3cr3t-value"},
			"sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := RedactValues(c.text, c.values); got != c.want {
				t.Fatalf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

// A megabyte of random base64, base32 and hex dump contains none of the
// encodings of a 16-character secret by chance: the edge characters that
// depend on neighbours are never part of a pattern, and the patterns are
// long enough.
func TestRedactValuesRandomOutputUntouched(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, 256<<10)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	for _, c := range toolCases {
		if c.family == "plain" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			out := c.run(t, raw)
			if got := RedactValues(out, []string{"k9Qz-2mXv7Lp_4Rt", "5x9Kq2Lm"}); got != out {
				t.Fatalf("random output changed (%d vs %d bytes)", len(got), len(out))
			}
		})
	}
}

func TestCores(t *testing.T) {
	t.Parallel()
	v := []byte(valueSecret)
	for _, c := range []struct {
		name   string
		bits   int
		encode func([]byte) string
		period int
	}{
		{"base64", 6, base64.RawStdEncoding.EncodeToString, 3},
		{"base32", 5, base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := cores(v, c.bits, c.encode)
			if len(got) != c.period {
				t.Fatalf("%d cores, want %d", len(got), c.period)
			}
			// Each core occurs in the encoding of v after k arbitrary bytes
			// and before arbitrary bytes.
			for k := range c.period {
				for _, fill := range []byte{0x00, 0xff, 0x5a} {
					buf := append(bytes.Repeat([]byte{fill}, k), v...)
					buf = append(buf, fill, fill^0x33)
					if !strings.Contains(c.encode(buf), got[k]) {
						t.Fatalf("core %d %q not in %q", k, got[k], c.encode(buf))
					}
				}
			}
		})
	}
}

func BenchmarkRedactValues(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	raw := make([]byte, 1<<20)
	for i := range raw {
		raw[i] = byte(' ' + r.IntN(95))
	}
	for i := 0; i < len(raw); i += 80 {
		raw[i] = '\n'
	}
	text := string(raw)
	values := []string{valueSecret, "another-secret-value-123", "ghp_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3gH5"}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		RedactValues(text, values)
	}
}
