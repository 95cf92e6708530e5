package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// handleChannel is a fakeChannel that answers taps and records the handle
// each answer carried.
type handleChannel struct {
	*fakeChannel
	mu      sync.Mutex
	handles []string
}

func (c *handleChannel) AnswerTap(ctx context.Context, a core.TapAnswer) error {
	if a.Card != nil {
		if err := c.Update(ctx, a.Ref, core.OutMessage{Conversation: a.Conversation, Card: a.Card}); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handles = append(c.handles, a.Handle)
	return nil
}

func (c *handleChannel) answered() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.handles...)
}

// A tap's handle (here Slack-like: a response_url, a bearer capability)
// is a credential: no row of the database holds it in plaintext — neither
// the stored tap turn nor its outbox answer job — while the adapter still
// gets the plain handle in AnswerTap.
func TestTapHandleSealedAtRest(t *testing.T) {
	t.Parallel()
	fc := newFakeChannel()
	hc := &handleChannel{fakeChannel: fc}
	b := setupChannel(t, hc, fc)
	b.send(t, owner, "/run echo sealed")
	c := b.pendingCard(t, "echo sealed")
	const canary = "CANARY-xoxb-7f3a9c1e5d"
	handle := `{"channel":"C1","user":"U1","thread":"","response_url":"https://hooks.slack.test/actions/T1/1/` + canary + `"}`
	if _, err := b.eng.Deliver(b.ctx, core.Turn{Channel: "test", Conversation: "test:chat", Sender: owner, EventID: "tap-sealed",
		Tap: &core.Tap{Card: c.ID, Choice: "decline"}, TapHandle: handle, Evidence: core.Evidence{Authenticated: true, Method: "test"}}); err != nil {
		t.Fatal(err)
	}
	b.waitStatus(t, c.ID, cards.StatusDeclined)
	deadline := time.Now().Add(10 * time.Second)
	for len(hc.answered()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := hc.answered(); len(got) != 1 || got[0] != handle {
		t.Fatalf("AnswerTap got handles %q; want the plain handle once", got)
	}
	rows, err := b.st.Pool().Query(b.ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		t.Fatalf("listing tables: %d, %v", len(tables), err)
	}
	for _, tbl := range tables {
		var n int
		mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM `+tbl+` t WHERE t::text LIKE '%' || $1 || '%'`, canary), &n)
		if n != 0 {
			t.Errorf("the tap handle is in plaintext in %d row(s) of %s", n, tbl)
		}
	}
	// Control: the handle is stored (sealed) with the turn and the job,
	// so the scan above looked where it would be.
	for _, q := range []string{`SELECT count(*) FROM turns t WHERE t::text LIKE '%th1.%'`, `SELECT count(*) FROM outbox o WHERE o.op = 'answer' AND o::text LIKE '%th1.%'`} {
		var n int
		mustScan(t, b.st.Pool().QueryRow(b.ctx, q), &n)
		if n != 1 {
			t.Errorf("%s: %d rows; want the sealed handle in one", q, n)
		}
	}
}
