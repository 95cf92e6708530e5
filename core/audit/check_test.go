package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"
)

// rechain changes the data of row seq and recomputes every hash from there
// on, as someone with write access to the table but not the audit key
// would: the chain itself verifies again.
func rechain(t *testing.T, rows []Row, seq int64) []Row {
	t.Helper()
	out := append([]Row(nil), rows...)
	prev := Genesis
	if seq > 1 {
		prev = out[seq-2].Hash
	}
	for i := seq - 1; i < int64(len(out)); i++ {
		r := out[i]
		if r.Seq == seq {
			r.Entry.Data = map[string]any{"i": "forged"}
			p, err := Prepare(r.At, r.Entry)
			if err != nil {
				t.Fatal(err)
			}
			r.DataJSON = p.DataJSON
		}
		p, err := Prepare(r.At, r.Entry)
		if err != nil {
			t.Fatal(err)
		}
		r.PrevHash = prev
		r.Hash = Chain(prev, p.Canonical(r.Seq))
		prev = r.Hash
		out[i] = r
	}
	return out
}

// TestCheckCatchesRechainAndForgery: the two things that make checkpoints
// evidence, each checked here without a database — the hash a checkpoint
// was signed over is compared with the row's (a re-chained log verifies
// as a chain), and a checkpoint counts only if its signature verifies
// with a trusted key (whoever re-chains can also write checkpoint rows and
// a head file, naming the trusted key's id).
//
// Checked to fail: with Row's comparison `string(want) == string(r.Hash)`
// made always true, "re-chained" reports nothing; with signatureProblem
// returning ok for every checkpoint, "forged checkpoints" and "forged
// head" report nothing.
func TestCheckCatchesRechainAndForgery(t *testing.T) {
	t.Parallel()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	_, forger, _ := ed25519.GenerateKey(rand.Reader)
	rows := chainOf(t, 30)
	signWith := func(k ed25519.PrivateKey, rows []Row, seq int64) Checkpoint {
		c, err := Sign(k, seq, rows[seq-1].Hash, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		c.KeyID = KeyID(pub) // a forger names the trusted key
		return c
	}
	check := func(rows []Row, cps []Checkpoint, head *Checkpoint) *Report {
		c := NewCheck([]ed25519.PublicKey{pub}, cps, head, "head.log")
		for _, r := range rows {
			c.Row(r)
		}
		return c.Finish()
	}
	forged := rechain(t, rows, 15)
	if err := func() error {
		v := NewVerifier()
		for _, r := range forged {
			if err := v.Check(r); err != nil {
				return err
			}
		}
		return nil
	}(); err != nil {
		t.Fatalf("the re-chained log does not verify as a chain, so this test proves nothing: %v", err)
	}
	honest := []Checkpoint{signWith(key, rows, 10), signWith(key, rows, 20), signWith(key, rows, 30)}
	head := honest[2]
	// The same forged checkpoint in the table and the head file.
	forgedHead := signWith(forger, forged, 30)
	tests := []struct {
		name string
		rows []Row
		cps  []Checkpoint
		head *Checkpoint
		want string
		msg  string
	}{
		{name: "re-chained", rows: forged, cps: honest, head: &head, want: ProblemRechained,
			msg: "chain hashes valid but checkpoint at seq 20 was signed over a different hash: a row in seq 11..20 was changed"},
		{name: "forged checkpoints", rows: forged, cps: []Checkpoint{signWith(forger, forged, 20), signWith(forger, forged, 30)}, want: ProblemBadSignature,
			msg: "checkpoint at seq 20 has a bad signature"},
		{name: "forged head", rows: forged, cps: []Checkpoint{forgedHead}, head: &forgedHead, want: ProblemBadSignature,
			msg: "checkpoint at seq 30 has a bad signature"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := check(tc.rows, tc.cps, tc.head)
			if r.OK() || len(r.Problems) == 0 || r.Problems[0].Kind != tc.want || !strings.HasPrefix(r.Problems[0].Message, tc.msg) {
				t.Fatalf("problems %+v; want first %s %q", r.Problems, tc.want, tc.msg)
			}
		})
	}
	if r := check(rows, honest, &head); !r.OK() {
		t.Fatalf("the intact log: %+v", r.Problems)
	}
}

// TestCheckComparesEveryHeadLine: a log truncated past a head line and
// then grown again (the sequence reset, the gateway appending and signing
// new checkpoints over the new rows, the old checkpoint rows deleted)
// agrees with the head file's newest line; only the older line still
// witnesses what was cut. Verify compares every line it reads.
//
// Checked to fail: with NewCheck ignoring older, "regrown" reports nothing.
func TestCheckComparesEveryHeadLine(t *testing.T) {
	t.Parallel()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	sign := func(rows []Row, seq int64) Checkpoint {
		c, err := Sign(key, seq, rows[seq-1].Hash, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	orig := chainOf(t, 40)
	regrown := rechain(t, orig, 13) // rows 13.. cut, then appended anew
	oldLine := sign(orig, 20)
	newCPs := []Checkpoint{sign(orig, 10), sign(regrown, 30), sign(regrown, 40)}
	head := newCPs[2]
	check := func(older ...Checkpoint) *Report {
		c := NewCheck([]ed25519.PublicKey{pub}, newCPs, &head, "head.log", older...)
		for _, r := range regrown {
			c.Row(r)
		}
		return c.Finish()
	}
	if r := check(); !r.OK() {
		t.Fatalf("without the older lines the regrown log should pass (else this test proves nothing): %+v", r.Problems)
	}
	r := check(newCPs[0], oldLine, newCPs[1], head)
	if r.OK() || r.Problems[0].Kind != ProblemRechained || r.Problems[0].Seq != 20 {
		t.Fatalf("regrown: problems %+v; want %s at seq 20", r.Problems, ProblemRechained)
	}
	if r := check(sign(regrown, 20)); !r.OK() {
		t.Fatalf("an older line that agrees: %+v", r.Problems)
	}
}
