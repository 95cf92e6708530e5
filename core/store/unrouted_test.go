package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// sqlLog records the SQL of every statement a store sends (batched or not).
type sqlLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *sqlLog) add(s string) { l.mu.Lock(); l.sql = append(l.sql, s); l.mu.Unlock() }

func (l *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.add(d.SQL)
	return ctx
}
func (l *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (l *sqlLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (l *sqlLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.add(d.SQL)
}
func (l *sqlLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// fanOuts counts the statements since mark that carried the card fan-out.
func (l *sqlLog) fanOuts(mark int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.sql[mark:] {
		if strings.Contains(s, "fan AS (") {
			n++
		}
	}
	return n
}

func (l *sqlLog) mark() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.sql) }

// TestUnroutedCardEditsSkipFanOut: an edit of the card of an approval this
// store created without a route goes without the fan-out statement; a
// routed card's edit still fans out to its copy; an approval whose
// creation rolled back, or that another store created, is not taken for
// unrouted.
func TestUnroutedCardEditsSkipFanOut(t *testing.T) {
	t.Parallel()
	log := &sqlLog{}
	s, ctx, dsn := setupDSN(t, Options{QueryTracer: log})
	other := openStore(t, dsn, Options{})

	create := func(st *Store, id string, routes bool, fail bool) error {
		return st.Do(ctx, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			a := testApproval(id, tx.Now())
			tx.QueueApproval(a)
			if routes {
				if err := tx.QueueApprovalRoutes([]core.ApprovalRoute{
					{Approval: a.ID, Channel: a.Channel, Conversation: a.Conversation, MessageKey: id, Kind: core.RouteStatus},
					{Approval: a.ID, Channel: a.Channel, Conversation: "webchat:owner", MessageKey: id + "@webchat:owner", Kind: core.RouteCopy},
				}); err != nil {
					return nil, err
				}
			}
			if err := tx.QueueMessage(a.Channel, core.OpSend, id, core.OutMessage{Conversation: a.Conversation, Card: &cards.Card{ID: cards.ID(a.ID)}}); err != nil {
				return nil, err
			}
			if fail {
				return nil, errors.New("the proposal failed")
			}
			return nil, nil
		})
	}
	// edit queues an update of card id and reports how many statements
	// carried the fan-out.
	edit := func(id string) int {
		m := log.mark()
		mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
			return nil, tx.QueueMessage("webchat", core.OpUpdate, id, core.OutMessage{Conversation: "webchat:local", Card: &cards.Card{ID: cards.ID(id)}})
		})
		return log.fanOuts(m)
	}

	if err := create(s, "plain", false, false); err != nil {
		t.Fatal(err)
	}
	if n := edit("plain"); n != 0 {
		t.Errorf("the edit of an unrouted card carried the fan-out (%d statements)", n)
	}

	if err := create(s, "routed", true, false); err != nil {
		t.Fatal(err)
	}
	if n := edit("routed"); n != 1 {
		t.Errorf("the edit of a routed card: %d statements with the fan-out, want 1", n)
	}
	if n := queryInt(t, ctx, s, `SELECT count(*) FROM outbox WHERE conversation = 'webchat:owner' AND op = 'update' AND message_key = 'routed@webchat:owner'`); n != 1 {
		t.Errorf("the routed card's copy got %d updates, want 1", n)
	}

	if err := create(s, "rolled-back", false, true); err == nil {
		t.Fatal("the failing proposal committed")
	}
	if n := edit("rolled-back"); n != 1 {
		t.Errorf("a card whose creation rolled back was taken for unrouted (%d fan-outs, want 1)", n)
	}

	if err := create(other, "elsewhere", false, false); err != nil {
		t.Fatal(err)
	}
	if n := edit("elsewhere"); n != 1 {
		t.Errorf("a card another store created was taken for unrouted (%d fan-outs, want 1)", n)
	}
}

// TestUnroutedCardsBounded: the memory of unrouted cards keeps the newest
// unroutedCap keys.
func TestUnroutedCardsBounded(t *testing.T) {
	var u unroutedCards
	for i := range unroutedCap + 10 {
		u.add([]cardKey{{"webchat", string(rune('a'+i%26)) + strings.Repeat("x", i/26)}})
	}
	if len(u.keys) != unroutedCap || len(u.ring) != unroutedCap {
		t.Fatalf("%d keys in a ring of %d, want %d", len(u.keys), len(u.ring), unroutedCap)
	}
	if u.has("webchat", "a") {
		t.Error("the oldest key was kept")
	}
	last := unroutedCap + 9
	if !u.has("webchat", string(rune('a'+last%26))+strings.Repeat("x", last/26)) {
		t.Error("the newest key was forgotten")
	}
}
