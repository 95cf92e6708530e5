package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/engine"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/store"
)

// withOthers is a cluster view in which other instances exist and this
// one's heartbeat is fresh.
type withOthers struct{}

func (withOthers) Solo() bool                   { return false }
func (withOthers) Fresh() (gen uint64, ok bool) { return 0, true }

// TestAdoptKeepsOrder: a dead instance's pending turn of a conversation is
// taken over by the takeover pass (Adopt) while a later turn of the same
// conversation arrives here. The later turn is answered after the adopted
// one even when it arrives after the takeover claimed the turn and before
// it queued it — the gap in which a worker saw no earlier turn (this
// instance's own turns are not "another instance's") and answered out of
// order across a takeover (issue 25, TestClusterTelegramBurstFailover).
func TestAdoptKeepsOrder(t *testing.T) {
	ch := newFakeChannel()
	b := setupAccess(t, ch, ch, "", func(c *gateway.Config) {
		c.Store.SetInstance("instance-b")
		c.Cluster = withOthers{}
	})
	ctx := b.ctx
	if err := b.st.RegisterInstance(ctx, "host", 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Instance A stored the conversation's turn and died before answering.
	if _, err := b.st.Pool().Exec(ctx, `INSERT INTO instances (id, expires_at) VALUES ('instance-a', now() - interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	var first int64
	if err := b.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		var err error
		first, _, err = tx.InsertTurn(ctx, core.Turn{Channel: "test", Conversation: "test:chat", Sender: owner, EventID: "from-a",
			Text: "/whoami", At: time.Now(), Evidence: core.Evidence{Authenticated: true, Method: "test"}})
		return nil, err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.Pool().Exec(ctx, `UPDATE turns SET instance = 'instance-a' WHERE seq = $1`, first); err != nil {
		t.Fatal(err)
	}

	engine.SetAdoptedHook(func() {
		// The turn is this instance's now and not yet queued: the next
		// turn of the conversation arrives.
		b.send(t, owner, "hello")
		// Give its worker the time to answer it, were it allowed to.
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			ch.mu.Lock()
			n := len(ch.order)
			ch.mu.Unlock()
			if n > 0 {
				return
			}
		}
	})
	defer engine.SetAdoptedHook(nil)
	if err := b.eng.Adopt(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := ch.waitFor(t, "both answers", func(m []core.OutMessage) bool { return len(m) >= 2 })
	if !strings.Contains(msgs[0].Text, "You are test:owner") || !strings.Contains(msgs[1].Text, "I run commands") {
		t.Fatalf("answers out of order across the takeover:\n%s", dump(msgs))
	}
}
