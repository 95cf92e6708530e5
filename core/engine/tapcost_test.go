package engine_test

import (
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/storetest"
)

// tapCost taps b's pending card for cmd in an idle conversation and waits
// for the verified card. It returns how many write transactions appended
// the audit entries from the tap on (delivery records, "message.*", left
// out: they ride along where they can), the entries' kinds, and whether
// the execution's start was written by the decision's transaction. An
// entry's xmin is the transaction that wrote it, and every write of the
// pipeline appends entries.
func tapCost(t *testing.T, b *bundle, cmd string) (txns int, kinds string, startWithDecision bool) {
	t.Helper()
	b.send(t, owner, "/run "+cmd)
	c := b.pendingCard(t, cmd)
	b.waitIdle(t, "test:chat")
	var before int64
	mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT COALESCE(max(seq), 0) FROM audit_log`), &before)
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusDone)
	mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT count(DISTINCT xmin::text), string_agg(kind, ' ' ORDER BY seq)
		FROM audit_log WHERE seq > $1 AND kind NOT LIKE 'message.%'`, before), &txns, &kinds)
	mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT count(DISTINCT xmin::text) = 1 AND count(*) = 2 FROM audit_log
		WHERE seq > $1 AND kind IN ('token.consumed', 'execution.started')`, before), &startWithDecision)
	return txns, kinds, startWithDecision
}

// waitIdle waits until conv has nothing queued or running in the engine.
func (b *bundle) waitIdle(t *testing.T, conv core.ConversationID) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !b.eng.Idle(conv) {
		if time.Now().After(deadline) {
			t.Fatal("the conversation did not become idle")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTapCost: from the tap to the verified card, a low-risk tap in an
// idle conversation costs two write transactions — the tap stored with its
// decision and its execution's claim, then the result written with its
// verdict. (Three before issue 26: the claim had a transaction of its own
// after the decision's; the executor of the deciding process now claims
// the execution inside the decision's transaction, core/execute
// ClaimWithDecision.) Should the claim fall back to a transaction of its
// own without anyone noticing, this counts three and fails.
// The approval row's reads are counted by core/decide's and
// core/execute's own tests.
func TestTapCost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	txns, kinds, with := tapCost(t, b, "echo cost")
	if txns != 2 || !with {
		t.Fatalf("%d write transactions from the tap to the verified card, the start with the decision: %v; want 2, true (entries: %s)", txns, with, kinds)
	}
}

// TestTapClaimApart: an execution the deciding process's executor does not
// claim with its decision (gateway.Config.ClaimApart, the path of one it
// does not run at once) is claimed in a transaction of its own and runs
// as before: three write transactions.
func TestTapClaimApart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.apart = true
	txns, kinds, with := tapCost(t, b, "echo apart")
	if txns != 3 || with {
		t.Fatalf("%d write transactions, the start with the decision: %v; want 3, false (entries: %s)", txns, with, kinds)
	}
}

// TestTapHeldStaysQueued: a held executor (as if the process stopped right
// after the decision committed) claims nothing with the decision: the
// execution stays queued, nothing started.
func TestTapHeldStaysQueued(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.hold = func(core.ApprovalID) bool { return true }
	b.send(t, owner, "/run echo held")
	c := b.pendingCard(t, "echo held")
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusRunning)
	var status string
	var started int
	mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT e.status, (SELECT count(*) FROM audit_log WHERE kind = 'execution.started' AND data->>'approval' = $1)
		FROM executions e WHERE e.approval_id = $1`, string(c.ID)), &status, &started)
	if status != "queued" || started != 0 {
		t.Fatalf("execution %s with %d start entries, want queued, none", status, started)
	}
}

// TestStandingTapClaimedWithDecision: the tap on "Allow this for 1 h"
// stores its consent with the decision and is claimed with it too (the
// consent's insert, a round trip of its own, comes after the claim); so is
// the run the consent then approves in its /run turn's transaction.
func TestStandingTapClaimedWithDecision(t *testing.T) {
	t.Parallel()
	b, sc := setupStanding(t, 2)
	b.mintStanding(t, "echo hi")
	const withDecision = `SELECT count(*) FROM audit_log s JOIN audit_log c ON c.kind = 'token.consumed' AND c.data->>'approval' = s.data->>'approval'
		AND c.xmin::text = s.xmin::text WHERE s.kind = 'execution.started'`
	if n, consents := b.count(t, withDecision), b.count(t, `SELECT count(*) FROM consents`); n != 1 || consents != 1 {
		t.Fatalf("%d executions claimed with their decision, %d consents; want 1, 1", n, consents)
	}
	if c, asked := b.runCard(t, sc, "echo hi"); asked || c.Status != cards.StatusDone {
		t.Fatalf("under the consent: asked=%v card=%+v", asked, c)
	}
	if n := b.count(t, withDecision); n != 2 {
		t.Fatalf("%d executions claimed with their decision, want 2", n)
	}
}

// TestTapOutboxReads: from the tap to the verified card the conversation's
// lane reads no job back from the database. The tap's answer (which
// carries the card's "running…" state) and the verdict's card edit are
// handed to the lane in memory by the transactions that queued them, with
// the ref of the card's message as their insert read it (store.Queued);
// they used to be read back, a round trip each (issue 26). The engine is
// stopped before counting, so every lane has ended.
func TestTapOutboxReads(t *testing.T) {
	t.Parallel()
	ch := newFakeChannel()
	reads := &storetest.JobReads{}
	b := setupStore(t, ch, ch, "", store.Options{QueryTracer: reads})
	b.send(t, owner, "/run echo reads")
	c := b.pendingCard(t, "echo reads")
	deadline := time.Now().Add(10 * time.Second)
	for !b.eng.Idle("test:chat") || b.pendingJobs(t) > 0 {
		// The card's delivery recorded (its ref): an edit queued while
		// that record is on its way is read back, as it may carry no ref.
		if time.Now().After(deadline) {
			t.Fatal("the conversation did not become idle")
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := reads.Count()
	b.tap(t, owner, c.ID, "approve")
	done := b.waitStatus(t, c.ID, cards.StatusDone)
	b.stop()
	if n := reads.Count() - before; n != 0 {
		t.Fatalf("the lane read %d jobs from the tap to the verified card; want 0 (the answer and the verdict's edit are handed over)", n)
	}
	// Both edits went to the card's message in place: none was sent as a
	// new message for want of the ref.
	if sent := ch.sentCards(c.ID); sent != 1 {
		t.Fatalf("card %s was sent as %d messages, want 1 (edited in place: %+v)", c.ID, sent, done)
	}
}

// pendingJobs counts the outbox jobs not delivered yet.
func (b *bundle) pendingJobs(t *testing.T) int {
	t.Helper()
	var n int
	mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM outbox WHERE status = 'pending'`), &n)
	return n
}

// sentCards counts the messages Send showed card id in (edits in place
// are not counted).
func (f *fakeChannel) sentCards(id cards.ID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.order {
		if c := f.msgs[r].Card; c != nil && c.ID == id {
			n++
		}
	}
	return n
}
