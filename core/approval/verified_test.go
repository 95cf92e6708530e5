package approval

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestVerifiedSet: a remembered verification answers only for exactly the
// same key, message and signature; a failure is never remembered.
func TestVerifiedSet(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	msg := []byte("silas verified-set test message")
	sig := ed25519.Sign(priv, msg)
	if !verify(pub, msg, sig) {
		t.Fatal("a valid signature does not verify")
	}
	flipped := func(b []byte, i int) []byte { c := append([]byte(nil), b...); c[i] ^= 1; return c }
	tests := []struct {
		name     string
		pub      ed25519.PublicKey
		msg, sig []byte
		want     bool
	}{
		{"same bytes", pub, msg, sig, true},
		{"message edited", pub, flipped(msg, 3), sig, false},
		{"message extended", pub, append(append([]byte(nil), msg...), 'x'), sig, false},
		{"signature edited", pub, msg, flipped(sig, 10), false},
		{"other key", otherPub, msg, sig, false},
		{"other key's signature", pub, msg, ed25519.Sign(otherPriv, msg), false},
		{"short signature", pub, msg, sig[:63], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the second time after any remembering
				if got := verify(tt.pub, tt.msg, tt.sig); got != tt.want {
					t.Fatalf("verify = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// TestVerifiedSetForgetsOldest: the set holds verifiedCap entries and
// evicts the oldest.
func TestVerifiedSetForgetsOldest(t *testing.T) {
	v := verifiedSet{keys: map[string]struct{}{}}
	for i := range verifiedCap + 10 {
		v.add(fmt.Sprint(i))
	}
	if len(v.keys) != verifiedCap {
		t.Fatalf("%d entries, want %d", len(v.keys), verifiedCap)
	}
	if _, ok := v.keys["0"]; ok {
		t.Fatal("the oldest entry was kept")
	}
	if _, ok := v.keys[fmt.Sprint(verifiedCap+9)]; !ok {
		t.Fatal("the newest entry was dropped")
	}
}

// BenchmarkExecution is the signature work of one approved execution: the
// decision verifies the request, mints the token and checks it; the gate
// checks the token and the request again (the same bytes, read back).
// Every iteration has a request of its own (signed beforehand), as every
// execution does. Self-contained, so that it runs on earlier versions too;
// cpu-µs/op is the process's CPU time (getrusage), which a busy machine
// does not inflate as it does ns/op.
func BenchmarkExecution(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now()
	const distinct = 1024
	reqs := make([]Request, distinct)
	sigs := make([][]byte, distinct)
	for i := range reqs {
		reqs[i] = Request{ID: fmt.Sprintf("01JDXYZABCDEFGHJKMNPQR%04d", i), Channel: "telegram", Conversation: "telegram:42", Requester: "telegram:7",
			ActionHash: make([]byte, 32), Intent: "/run echo x", Rationale: "the owner asked for it", Risk: "low",
			Approvers: []string{"role:owner"}, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		var err error
		if sigs[i], err = SignRequest(priv, reqs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	i := 0
	for b.Loop() {
		r, sig := reqs[i%distinct], sigs[i%distinct]
		i++
		if err := VerifyRequest(pub, r, sig); err != nil { // the decision
			b.Fatal(err)
		}
		tok, err := Mint(priv, "01JDXYZTOKEN", r.ActionHash, r.Conversation, "telegram:7", now, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		if err := Check(pub, tok, r.ActionHash, now); err != nil {
			b.Fatal(err)
		}
		raw, err := tok.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		stored, err := Unmarshal(raw) // the gate
		if err != nil {
			b.Fatal(err)
		}
		if err := Check(pub, stored, r.ActionHash, now); err != nil {
			b.Fatal(err)
		}
		if err := VerifyRequest(pub, r, sig); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(i), "cpu-µs/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
