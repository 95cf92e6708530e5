package callgate

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestQuestionCardNeverRegresses: a tap that answers a caller's question
// and a later tap on its card once it is past its time, in two
// transactions (two writers, two instances), queue their edits of the card
// in the order they commit, so the last edit — the one delivered last —
// shows "answered", never an "expired" that did not happen (security
// invariant 9). The answer's transaction is held open after its tap; the
// late tap must wait for it (the question's row lock, Tx.GetQuestion) and
// then see the answer. Were the question read without the lock, the late
// tap would read it pending and try to expire it; its compare-and-swap
// fails once the answer commits, and since f927b06 a lost
// compare-and-swap queues no edit either — so this test fails only when
// both guards are gone (checked: with neither, "expired" is queued after
// "answered").
func TestQuestionCardNeverRegresses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := storetest.NewDatabase(t)
	now := time.Now()
	// early answers before the question expires, late taps after.
	early, late := storetest.OpenAt(t, dsn, now), storetest.OpenAt(t, dsn, now.Add(time.Hour))
	g := &Gate{}
	q := core.Question{ID: "q-" + core.NewID(), Kind: core.QuestionAsk, Caller: "agent", Channel: "test", Conversation: "owner-dm",
		Text: "Deploy now?", Choices: []core.QuestionChoice{{ID: "yes", Label: "Yes"}, {ID: "no", Label: "No"}},
		Status: core.QuestionPending, CreatedAt: now, ExpiresAt: now.Add(5 * time.Minute)}
	if err := storetest.Do(ctx, early, func(ctx context.Context, tx *store.Tx) error {
		if err := tx.QueueQuestion(q); err != nil {
			return err
		}
		return tx.QueueMessage(q.Channel, core.OpSend, q.ID, core.OutMessage{Conversation: q.Conversation, Card: render.CallerQuestion(q)})
	}); err != nil {
		t.Fatal(err)
	}
	st := core.StoredTurn{Turn: core.Turn{Channel: q.Channel, Conversation: q.Conversation, Sender: "owner"}}
	firstTap, lateTap := storetest.InterleaveTaps(t, early, late, q.Channel, q.Conversation,
		func(ctx context.Context, tx *store.Tx, out *storetest.Shown) (core.TaskTap, error) {
			return g.Tap(ctx, tx, st, core.TrustOwner, core.Tap{Card: cards.ID(q.ID), Choice: "yes"}, out)
		})
	if !firstTap.Handled || firstTap.Refused != "" {
		t.Errorf("the answering tap = %+v, want it answered", firstTap)
	}
	if lateTap.Refused != core.RefusedAlreadyDecided {
		t.Errorf("the late tap = %+v, want it refused as already decided", lateTap)
	}
	if c := storetest.LastEdit(t, early, q.ID); c.Status != cards.StatusDone {
		t.Errorf("the card's last queued edit shows %q (%s), want %q: the question was answered", c.Status, c.Outcome, cards.StatusDone)
	}
}
