package redact

import (
	"strings"
	"testing"
	"time"
)

// adversarial inputs of 16 KiB (the largest chat text the engine accepts)
// built to make detectors match and reject repeatedly.
func adversarial() map[string]string {
	n := 16 << 10
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

func TestScanLinear(t *testing.T) {
	t.Parallel()
	for name, in := range adversarial() {
		start := time.Now()
		Redact(in)
		// Linear inputs take a few milliseconds; a quadratic one takes
		// seconds. The budget is generous for a loaded CI machine.
		if d := time.Since(start); d > timeBudgetFactor*time.Second {
			t.Errorf("%s: %v for 16 KiB", name, d)
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
