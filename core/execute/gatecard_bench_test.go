package execute

import (
	"crypto/ed25519"
	"crypto/rand"
	"syscall"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/approval"
	"github.com/silas-gateway/silas/core/decide"
)

// BenchmarkGateAndCard is the executor's own work on an approved `echo x`
// outside the store and the sandbox: the gate's check of the approval
// (checkApproval; its Ed25519 verifications are answered by the verified
// set after the first, as the decision's already made them) and the
// verified card's rendering. Self-contained (the card step is cardFor,
// the one line that differs: at b8b1d10 it is render.Approval(a, ex, 2000)),
// so that it runs on the branch point too.
func BenchmarkGateAndCard(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now()
	act := core.Action{Tool: "shell", Argv: []string{"echo", "x"}}
	canonical, _ := act.Canonical()
	hash, _ := act.Hash()
	a := core.ApprovalRequest{ID: "01JDXYZABCDEFGHJKMNPQR0001", Channel: "telegram", Conversation: "telegram:42", Requester: "telegram:7",
		ActionCanonical: canonical, ActionHash: hash, Intent: "/run echo x", Rationale: "the owner asked for it", Risk: cards.RiskLow,
		Approvers: []string{"role:owner"}, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := decide.SignRequest(priv, &a); err != nil {
		b.Fatal(err)
	}
	tok, err := approval.Mint(priv, "01JDXYZTOKEN", hash, string(a.Conversation), "telegram:7", now, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	a.Token, _ = tok.Marshal()
	a.Status, a.DecidedBy, a.DecidedAt = core.ApprovalApproved, "telegram:7", now
	x := &Executor{cfg: Config{Key: pub, Now: time.Now}}
	ex := core.Execution{ApprovalID: a.ID, Status: core.ExecVerified, Reason: "ran 3 ms; verified: exit code 0",
		Result: &core.ExecRecord{Stdout: "x\n", DurationMS: 3, Isolation: "full"}}
	b.ReportAllocs()
	cpu0 := cpuTime()
	n := 0
	for b.Loop() {
		n++
		_, act, reason := x.checkApproval(a)
		if reason != "" {
			b.Fatal(reason)
		}
		if c := cardFor(a, act, &ex); c.Command != "echo x" {
			b.Fatal(c.Command)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e3/float64(n), "cpu-µs/op")
}

// cardFor is the verified card as the executor renders it.
func cardFor(a core.ApprovalRequest, act core.Action, ex *core.Execution) *cards.Card {
	r := &execution{a: a, act: act, decoded: true}
	return r.card(ex, 2000)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
