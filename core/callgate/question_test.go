package callgate

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
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
// tap would read it pending, try to expire it (its compare-and-swap fails
// once the answer commits, but the card's edit is queued regardless) and
// queue "expired" after "answered".
func TestQuestionCardNeverRegresses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := storetest.NewDatabase(t)
	now := time.Now()
	open := func(clock time.Time) *store.Store {
		st, err := store.Open(ctx, dsn, store.Options{Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return clock }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		return st
	}
	// early answers before the question expires, late taps after.
	early, late := open(now), open(now.Add(time.Hour))
	g := &Gate{}
	q := core.Question{ID: "q-" + core.NewID(), Kind: core.QuestionAsk, Caller: "agent", Channel: "test", Conversation: "owner-dm",
		Text: "Deploy now?", Choices: []core.QuestionChoice{{ID: "yes", Label: "Yes"}, {ID: "no", Label: "No"}},
		Status: core.QuestionPending, CreatedAt: now, ExpiresAt: now.Add(5 * time.Minute)}
	do := func(st *store.Store, op func(ctx context.Context, tx *store.Tx) error) error {
		return st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) { return nil, op(ctx, tx) })
	}
	if err := do(early, func(ctx context.Context, tx *store.Tx) error {
		if err := tx.QueueQuestion(q); err != nil {
			return err
		}
		return tx.QueueMessage(q.Channel, core.OpSend, q.ID, core.OutMessage{Conversation: q.Conversation, Card: render.CallerQuestion(q)})
	}); err != nil {
		t.Fatal(err)
	}
	// tap taps the card in tx and queues its edits as the engine does.
	tap := func(ctx context.Context, tx *store.Tx) (core.TaskTap, error) {
		var out taskOut
		st := core.StoredTurn{Turn: core.Turn{Channel: q.Channel, Conversation: q.Conversation, Sender: "owner"}}
		r, err := g.Tap(ctx, tx, st, core.TrustOwner, core.Tap{Card: cards.ID(q.ID), Choice: "yes"}, &out)
		if err != nil {
			return r, err
		}
		for _, c := range out.updates {
			if err := tx.QueueMessage(q.Channel, core.OpUpdate, string(c.ID), core.OutMessage{Conversation: q.Conversation, Card: c}); err != nil {
				return r, err
			}
		}
		return r, nil
	}

	tapped, release := make(chan struct{}), make(chan struct{})
	answered := make(chan error, 1)
	go func() {
		answered <- do(early, func(ctx context.Context, tx *store.Tx) error {
			r, err := tap(ctx, tx)
			close(tapped)
			<-release
			if err == nil && (!r.Handled || r.Refused != "") {
				t.Errorf("the answering tap = %+v, want it answered", r)
			}
			return err
		})
	}()
	<-tapped
	var lateTap core.TaskTap
	lated := make(chan error, 1)
	go func() {
		lated <- do(late, func(ctx context.Context, tx *store.Tx) (err error) {
			lateTap, err = tap(ctx, tx)
			return err
		})
	}()
	// The late tap waits for the answer's row lock (the fix), or runs on.
	waitBlockedOr(t, early, lated)
	close(release)
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	if err := <-lated; err != nil {
		t.Fatal(err)
	}
	if lateTap.Refused != core.RefusedAlreadyDecided {
		t.Errorf("the late tap = %+v, want it refused as already decided", lateTap)
	}
	var payload []byte
	if err := early.Pool().QueryRow(ctx, `SELECT payload FROM outbox WHERE message_key = $1 AND op = 'update' ORDER BY id DESC LIMIT 1`,
		q.ID).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var m core.OutMessage
	if err := json.Unmarshal(payload, &m); err != nil || m.Card == nil {
		t.Fatalf("last edit %s: %v", payload, err)
	}
	if m.Card.Status != cards.StatusDone {
		t.Errorf("the card's last queued edit shows %q (%s), want %q: the question was answered", m.Card.Status, m.Card.Outcome, cards.StatusDone)
	}
}

// taskOut collects what a tap shows.
type taskOut struct{ updates []*cards.Card }

func (o *taskOut) Reply(string, ...any) {}
func (o *taskOut) Card(*cards.Card)     {}
func (o *taskOut) Update(c *cards.Card) { o.updates = append(o.updates, c) }
func (o *taskOut) Audit(...audit.Entry) {}
func (o *taskOut) After(func())         {}

// waitBlockedOr waits until a statement on the test's database waits for
// a row lock, or done has a value (left for the caller to read).
func waitBlockedOr(t *testing.T, st *store.Store, done chan error) {
	t.Helper()
	for {
		select {
		case err := <-done:
			done <- err
			return
		default:
		}
		var n int
		if err := st.Pool().QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
