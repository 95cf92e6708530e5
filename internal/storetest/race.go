package storetest

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/store"
)

// OpenAt opens a Store on dsn (no migration) whose clock stands at now,
// closed when t ends: a second writer or a second instance, at a time of
// the test's choosing (a tap before a card's expiry, another after it).
func OpenAt(t testing.TB, dsn string, now time.Time) *store.Store {
	t.Helper()
	st, err := store.Open(t.Context(), dsn, store.Options{Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// Do runs op in a transaction of st, with no audit entries.
func Do(ctx context.Context, st *store.Store, op func(ctx context.Context, tx *store.Tx) error) error {
	return st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) { return nil, op(ctx, tx) })
}

// WaitLockOr waits until a statement on st's database waits for a row
// lock, or done says the transaction the test watches ended: the point
// where two interleaved transactions are known to be ordered by a lock
// (or not ordered at all, when done comes first).
func WaitLockOr(t testing.TB, st *store.Store, done func() bool) {
	t.Helper()
	for !done() {
		var blocked bool
		if err := st.Pool().QueryRow(t.Context(), `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple')`).Scan(&blocked); err != nil {
			t.Fatal(err)
		}
		if blocked {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// LastEdit is the card of the last edit queued for the message key (the
// outbox delivers a card's edits in id order: the last one stays shown).
func LastEdit(t testing.TB, st *store.Store, key string) *cards.Card {
	t.Helper()
	var payload []byte
	if err := st.Pool().QueryRow(t.Context(), `SELECT payload FROM outbox WHERE message_key = $1 AND op IN ('update', 'answer')
		ORDER BY id DESC LIMIT 1`, key).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var m core.OutMessage
	if err := json.Unmarshal(payload, &m); err != nil || m.Card == nil {
		t.Fatalf("last edit of %s: %s: %v", key, payload, err)
	}
	return m.Card
}

// Interleave runs first in a transaction of a and holds that transaction
// open once first returned; then runs second in a transaction of b, waits
// until a statement waits for a row lock (second waiting for first's
// locks) or second ended, lets first commit, and waits for both. It fails
// t if either fails. It is the deterministic form of two writers (two
// instances) on one card: whatever second queues is queued after first's
// commit exactly when a lock orders them.
func Interleave(t testing.TB, a *store.Store, first func(ctx context.Context, tx *store.Tx) error,
	b *store.Store, second func(ctx context.Context, tx *store.Tx) error) {
	t.Helper()
	ctx := t.Context()
	held, release := make(chan struct{}), make(chan struct{})
	firstDone, secondDone := make(chan error, 1), make(chan error, 1)
	go func() {
		firstDone <- Do(ctx, a, func(ctx context.Context, tx *store.Tx) error {
			err := first(ctx, tx)
			close(held)
			<-release
			return err
		})
	}()
	<-held
	go func() { secondDone <- Do(ctx, b, second) }()
	WaitLockOr(t, a, func() bool { return len(secondDone) > 0 })
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatalf("first transaction: %v", err)
	}
	if err := <-secondDone; err != nil {
		t.Fatalf("second transaction: %v", err)
	}
}

// Shown is a core.TaskOut keeping the card edits a tap shows (the rest is
// dropped), for QueueEdits.
type Shown struct{ Updates []*cards.Card }

func (s *Shown) Reply(string, ...any) {}
func (s *Shown) Card(*cards.Card)     {}
func (s *Shown) Update(c *cards.Card) { s.Updates = append(s.Updates, c) }
func (s *Shown) Audit(...audit.Entry) {}
func (s *Shown) After(func())         {}

// QueueEdits queues s's card edits in tx, in order, as the engine queues a
// tap's.
func (s *Shown) QueueEdits(tx *store.Tx, ch core.ChannelName, conv core.ConversationID) error {
	for _, c := range s.Updates {
		if err := tx.QueueMessage(ch, core.OpUpdate, string(c.ID), core.OutMessage{Conversation: conv, Card: c}); err != nil {
			return err
		}
	}
	return nil
}

// InterleaveTaps is Interleave of one tap, tapped first through a (held
// open after it) and then through b: each tap shows its card edits into a
// Shown of its own, queued in its transaction as the engine queues a
// tap's. It returns both taps' results.
func InterleaveTaps(t testing.TB, a, b *store.Store, ch core.ChannelName, conv core.ConversationID,
	tap func(ctx context.Context, tx *store.Tx, out *Shown) (core.TaskTap, error)) (first, second core.TaskTap) {
	t.Helper()
	queued := func(r *core.TaskTap) func(ctx context.Context, tx *store.Tx) error {
		return func(ctx context.Context, tx *store.Tx) error {
			var out Shown
			var err error
			if *r, err = tap(ctx, tx, &out); err != nil {
				return err
			}
			return out.QueueEdits(tx, ch, conv)
		}
	}
	Interleave(t, a, queued(&first), b, queued(&second))
	return first, second
}
