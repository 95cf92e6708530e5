package redact

import (
	"strings"
	"testing"
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

// TestScanLinear: Scan's work grows linearly with the input, on inputs
// built to make the detectors match and reject repeatedly. Work is counted
// (the bytes its searches and loops examine, scan's meter), not timed, so
// a busy machine cannot fail it and noise cannot hide growth: four times
// the input may cost at most 4.4 times the work, and no input more than
// maxWorkPerByte per byte (a search resuming one byte after a rejected
// match instead of at its end stays linear in the input but examines each
// byte hundreds of times). Speed is BenchmarkScan's.
//
// Checked to fail: scanDetector resuming at m[0]+1 instead of m[1] (sk,
// slack: 113-197 per byte), and scanEntropy starting again one byte into
// each run instead of after it (sk, slack, xsk: 16× the work for 4× the
// input).
func TestScanLinear(t *testing.T) {
	const maxWorkPerByte = 40
	small, big := adversarialN(8<<10), adversarialN(32<<10)
	work := func(in string) int {
		var m meter
		scan(in, &m)
		return m.bytes
	}
	for name := range small {
		s, b := work(small[name]), work(big[name])
		if b*10 > s*44 {
			t.Errorf("%s: work %d for 8 KiB but %d for 32 KiB (%.1f×): not linear", name, s, b, float64(b)/float64(s))
		}
		if per := b / len(big[name]); per > maxWorkPerByte {
			t.Errorf("%s: %d units of work per byte of input, want at most %d", name, per, maxWorkPerByte)
		}
		t.Logf("%s: %d / %d (%.2f per byte)", name, s, b, float64(b)/float64(len(big[name])))
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
