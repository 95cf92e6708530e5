package approval

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"syscall"
	"testing"
	"time"
)

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
