package mcptools

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestPinCardNeverRegresses: an owner's "Not now" on a pin card and a
// later tap on it once past its time, in two transactions (two writers,
// two instances), queue their edits of the card in commit order, so the
// last edit shows "declined", never an "expired" that did not happen
// (security invariant 9). The decline's transaction is held open after
// its tap; the late tap must wait for the card's row lock
// (Tx.GetMCPPinCard, FOR UPDATE) and then see it declined. Read without
// the lock, the late tap would see it pending and fail its expiry
// compare-and-swap once the decline commits; since f927b06 a lost
// compare-and-swap queues no edit either, so this test fails only when
// both guards are gone (checked: with neither, "expired" is queued after
// "declined").
func TestPinCardNeverRegresses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := storetest.NewDatabase(t)
	now := time.Now()
	// early decides before the card expires, late taps after.
	early, late := storetest.OpenAt(t, dsn, now), storetest.OpenAt(t, dsn, now.Add(48*time.Hour))
	tools := &Tools{}
	c := core.MCPPinCard{ID: pinCardPrefix + core.NewID(), Server: "files", Channel: "test", Conversation: "owner-dm",
		Tools: []core.MCPPinned{{Name: "read", Hash: "h1"}}, Status: "pending", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := storetest.Do(ctx, early, func(ctx context.Context, tx *store.Tx) error { return tx.AddMCPPinCard(ctx, c) }); err != nil {
		t.Fatal(err)
	}
	// Each taps "Not now".
	st := core.StoredTurn{Turn: core.Turn{Channel: c.Channel, Conversation: c.Conversation, Sender: "owner"}}
	firstTap, lateTap := storetest.InterleaveTaps(t, early, late, c.Channel, c.Conversation,
		func(ctx context.Context, tx *store.Tx, out *storetest.Shown) (core.TaskTap, error) {
			return tools.Tap(ctx, tx, st, core.TrustOwner, core.Tap{Card: cards.ID(c.ID), Choice: choiceNotNow}, out)
		})
	if !firstTap.Handled || firstTap.Refused != "" {
		t.Errorf("the decline = %+v, want it taken", firstTap)
	}
	if lateTap.Refused != core.RefusedAlreadyDecided {
		t.Errorf("the late tap = %+v, want it refused as already decided", lateTap)
	}
	if u := storetest.LastEdit(t, early, c.ID); u.Status != cards.StatusDeclined {
		t.Errorf("the card's last queued edit shows %q (%s), want %q: the owner declined it", u.Status, u.Outcome, cards.StatusDeclined)
	}
}
