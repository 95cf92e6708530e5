package redact

import (
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

// FuzzRedactValues: the value never survives, whatever surrounds it.
func FuzzRedactValues(f *testing.F) {
	f.Add("before ", "s3cr3t-value", " after")
	f.Add("", "pa55:w/rd+", "")
	f.Fuzz(func(t *testing.T, pre, value, post string) {
		out := RedactValues(pre+value+post, []string{value})
		// A value containing "[" or "]" can straddle a replacement; skip those.
		if len(value) >= MinValueLen && !strings.ContainsAny(value, "[]") && strings.Contains(out, value) {
			t.Fatalf("value %q survives in %q", value, out)
		}
	})
}
