package redact

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
)

// FuzzScan: Scan never panics; findings are in bounds, non-empty, sorted
// and non-overlapping; Redact's output scans clean and keeps no finding's
// text (for findings long enough that the text cannot recur by chance).
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		"", "hello", telegram, slackBot, ghp, githubPAT, awsID, openai, anthropic, jwt, pemRSA, pemRSA[:40],
		"postgres://u:" + "pw123456" + "@h/db", "password=" + "hunter2hunter2", randomB64,
		"3ad9e9df0f49c3303ad9e9df0f49c3303ad9e9df", "123e4567-e89b-12d3-a456-426614174000",
		ghp + ghp, telegram + telegram, "password=password=password=abcdef", "-----BEGIN PRIVATE KEY-----" + jwt,
		"x://a:" + slackBot + "@", "sk-" + randomB64 + "-" + randomB64,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		fs := Scan(text)
		prevEnd := 0
		for i, fd := range fs {
			if fd.Start < prevEnd || fd.Start >= fd.End || fd.End > len(text) || fd.Start < 0 {
				t.Fatalf("finding %d %+v out of order or bounds (prev end %d, len %d)", i, fd, prevEnd, len(text))
			}
			if fd.Kind == "" {
				t.Fatal("empty kind")
			}
			prevEnd = fd.End
		}
		out, rfs := Redact(text)
		if len(rfs) != len(fs) {
			t.Fatalf("Redact found %d, Scan %d", len(rfs), len(fs))
		}
		if again := Scan(out); len(again) != 0 {
			t.Fatalf("redacted output still has findings: %q → %q: %s", text, out, describe(out, again))
		}
		for _, fd := range fs {
			if s := text[fd.Start:fd.End]; len(s) >= 20 && strings.Contains(out, s) {
				t.Fatalf("redacted output keeps %q", s)
			}
		}
		if len(fs) == 0 && out != text {
			t.Fatal("clean text changed")
		}
	})
}

// FuzzRedactValues: the value never survives, whatever surrounds it,
// and neither does any form RedactValues searches for (hex, base64,
// base64url, base32, escaped), printed as is or wrapped every wrap
// characters.
func FuzzRedactValues(f *testing.F) {
	f.Add("before ", "s3cr3t-value", " after", uint8(0), uint8(0))
	f.Add("", "pa55:w/rd+", "", uint8(3), uint8(7))
	f.Add("user:", "Zq8vW1xR7pL3nB6t", "\n", uint8(2), uint8(76))
	f.Add("00000000: ", "secret-value", "  secret-value", uint8(1), uint8(4))
	f.Fuzz(func(t *testing.T, pre, value, post string, form, wrapAt uint8) {
		if len(value) > 256 {
			return
		}
		forms := []string{
			value,
			hex.EncodeToString([]byte(value)),
			strings.ToUpper(hex.EncodeToString([]byte(value))),
			base64.StdEncoding.EncodeToString([]byte(pre + value + post)),
			base64.RawURLEncoding.EncodeToString([]byte(pre + value)),
			base32.StdEncoding.EncodeToString([]byte(pre + value)),
		}
		printed := forms[int(form)%len(forms)]
		if int(form)%len(forms) >= 3 {
			printed = "x " + printed + " y" // the encoding already holds pre and post
		} else {
			printed = pre + printed + post
		}
		if wrapAt > 0 {
			var b strings.Builder
			for i := 0; i < len(printed); i += int(wrapAt) {
				b.WriteString(printed[i:min(i+int(wrapAt), len(printed))])
				b.WriteByte('\n')
			}
			printed = b.String()
		}
		out := RedactValues(printed, []string{value})
		if wrapAt == 0 && int(form)%len(forms) == 0 && len(value) >= MinValueLen && !strings.ContainsAny(value, "[]") && strings.Contains(out, value) {
			t.Fatalf("value %q survives in %q", value, out)
		}
		// Outside the replacements nothing that was searched for is left:
		// a pattern surviving whole would be a match that was missed.
		rest := strings.ReplaceAll(out, ValueReplacement, "\x00")
		flat := stripSpace(rest)
		p := compileValues([]string{value})
		for _, pat := range p.exact {
			if !strings.Contains(pat, "\x00") && strings.Contains(rest, pat) {
				t.Fatalf("exact form %q survives in %q (from %q)", pat, out, printed)
			}
		}
		for _, pat := range p.spread {
			if !strings.Contains(pat, "\x00") && strings.Contains(flat, pat) {
				t.Fatalf("form %q survives in %q (from %q)", pat, out, printed)
			}
		}
	})
}
