package redact

import (
	"strings"
	"testing"
	"time"
)

// adversarial inputs of n bytes (16 KiB: the largest chat text the engine
// accepts) built to make detectors match and reject repeatedly.
func adversarialN(n int) map[string]string {
	fill := func(unit string) string { return strings.Repeat(unit, n/len(unit)+1)[:n] }
	return map[string]string{
		"sk":        fill("sk-"),
		"xsk":       fill("xsk-abcdefghijklmnopqrstuvwxyz"),
		"password":  fill("xpassword="),
		"password$": fill("password=$"),
		"slack":     fill("axoxb-"),
		"digits":    fill("1234567890:"),
		"telegram":  fill("1:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
		"jwt":       fill("xeyJaaaaaaaaa.eyJaaaaaaaaa."),
		"url":       fill("a://b:c"),
		"pem":       fill("-----BEGIN PRIVATE KEY-----"),
		"b64":       fill("aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3gH5+/"),
		"words":     fill("Hello world, this is ordinary text. "),
		"quoted":    fill(`password: "`),
	}
}

func adversarial() map[string]string { return adversarialN(16 << 10) }

// TestScanLinear: redaction time grows linearly with the input, on inputs
// built to make the detectors backtrack. Not a speed limit (a busy machine
// only scales both sides): four times the input may take at most ten
// times as long (quadratic work takes sixteen), each the best of three
// and at least 20 ms (shorter times are mostly noise).
func TestScanLinear(t *testing.T) {
	small, big := adversarialN(8<<10), adversarialN(32<<10)
	best := func(in string) time.Duration {
		d := time.Duration(1<<63 - 1)
		for range 3 {
			start := time.Now()
			Redact(in)
			d = min(d, time.Since(start))
		}
		return max(d, 20*time.Millisecond) // below that, noise
	}
	for name := range small {
		s, b := best(small[name]), best(big[name])
		if b > 10*s {
			t.Errorf("%s: %v for 8 KiB but %v for 32 KiB: not linear", name, s, b)
		}
	}
}

func BenchmarkScan(b *testing.B) {
	for name, in := range adversarial() {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				Scan(in)
			}
		})
	}
}
