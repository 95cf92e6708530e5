package engine_test

import (
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
)

// TestTapCost: from the tap to the verified card, a low-risk tap in an
// idle conversation costs three write transactions — the tap stored with
// its decision, the claim, and the result written with its verdict. They
// are counted in the database: every write of the pipeline appends audit
// entries, and an entry's xmin is the transaction that wrote it (delivery
// records, "message.*", are left out: they ride along where they can).
// The approval row's reads are counted by core/decide's and
// core/execute's own tests.
func TestTapCost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/run echo cost")
	c := b.pendingCard(t, "echo cost")
	deadline := time.Now().Add(10 * time.Second)
	for !b.eng.Idle("test:chat") {
		if time.Now().After(deadline) {
			t.Fatal("the conversation did not become idle")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var before int64
	mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT COALESCE(max(seq), 0) FROM audit_log`), &before)
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusDone)
	var txns int
	var kinds string
	mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT count(DISTINCT xmin::text), string_agg(kind, ' ' ORDER BY seq)
		FROM audit_log WHERE seq > $1 AND kind NOT LIKE 'message.%'`, before), &txns, &kinds)
	if txns != 3 {
		t.Fatalf("%d write transactions from the tap to the verified card, want 3 (entries: %s)", txns, kinds)
	}
}
