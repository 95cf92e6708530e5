package store

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// setup returns a migrated store on a fresh database of its own; the store
// is closed and the database dropped when the test ends.
func setup(t testing.TB) (*Store, context.Context) {
	t.Helper()
	s, ctx, _ := setupDSN(t, Options{})
	return s, ctx
}

// setupDSN is setup with options, also returning the DSN so a test can open
// a second Store (a second process) on the same database.
func setupDSN(t testing.TB, opt Options) (*Store, context.Context, string) {
	t.Helper()
	dsn := migratedDatabase(t)
	ctx := t.Context()
	s := openStore(t, dsn, opt)
	return s, ctx, dsn
}

// migratedDatabase returns a fresh database with every migration applied:
// a copy of a template migrated once per test binary by Migrate itself, so
// each test sees exactly the schema Migrate builds without paying for the
// migrations again. (internal/storetest does the same for other packages;
// it imports this package, so the tests here cannot use it.) The tests of
// Migrate itself start from pgtest.NewDatabase.
func migratedDatabase(t testing.TB) string {
	t.Helper()
	return pgtest.NewDatabaseFrom(t, "silas-migrated", func(ctx context.Context, dsn string) error {
		s, err := Open(ctx, dsn, Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return err
		}
		defer s.Close()
		_, err = s.Migrate(ctx)
		return err
	})
}

// openStore opens a Store (its own pool and writer) without migrating.
func openStore(t testing.TB, dsn string, opt Options) *Store {
	t.Helper()
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := Open(context.Background(), dsn, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func mustDo(t testing.TB, ctx context.Context, s *Store, op Op) {
	t.Helper()
	if err := s.Do(ctx, op); err != nil {
		t.Fatal(err)
	}
}

// mustExec runs SQL directly, as an operator in psql would, and returns the
// number of rows affected.
func mustExec(t testing.TB, ctx context.Context, s *Store, sql string, args ...any) int64 {
	t.Helper()
	tag, err := s.Pool().Exec(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tag.RowsAffected()
}

func queryInt(t testing.TB, ctx context.Context, s *Store, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := s.Pool().QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// entriesOp returns an op that only appends entries.
func entriesOp(entries ...audit.Entry) Op {
	return func(context.Context, *Tx) ([]audit.Entry, error) { return entries, nil }
}

// numberedEntry is the i-th entry of a test chain; every field depends on i
// so any two entries differ in every column.
func numberedEntry(i int) audit.Entry {
	return audit.Entry{
		Kind:         audit.Kind(fmt.Sprintf("test.kind%d", i%4)),
		Actor:        fmt.Sprintf("webchat:actor%d", i),
		Conversation: fmt.Sprintf("webchat:conv%d", i%3),
		Data:         map[string]any{"i": i, "note": fmt.Sprintf("entry %d", i)},
	}
}

// appendNumbered appends entries 1..n sequentially in ops of 1–3 entries, so
// entry i is the row with seq i on an empty chain.
func appendNumbered(t testing.TB, ctx context.Context, s *Store, n int) {
	t.Helper()
	for i, op := 1, 0; i <= n; op++ {
		var batch []audit.Entry
		for k := 0; k < 1+op%3 && i <= n; k++ {
			batch = append(batch, numberedEntry(i))
			i++
		}
		mustDo(t, ctx, s, entriesOp(batch...))
	}
}

func testTurn(ch, eventID string) core.Turn {
	return core.Turn{
		Channel:      core.ChannelName(ch),
		Conversation: core.ConversationID(ch + ":chat1"),
		Sender:       core.IdentityID(ch + ":user1"),
		EventID:      eventID,
		Text:         "hello " + eventID,
		Evidence:     core.Evidence{Authenticated: true, Method: "test"},
		At:           time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
	}
}

func testApproval(id string, now time.Time) core.ApprovalRequest {
	return core.ApprovalRequest{
		ID:              core.ApprovalID(id),
		Channel:         "webchat",
		Conversation:    "webchat:local",
		Requester:       "webchat:local",
		ActionCanonical: []byte(`{"command":"true"}`),
		ActionHash:      make([]byte, 32),
		Intent:          "test",
		Rationale:       "test",
		Risk:            cards.RiskLow,
		Approvers:       []string{"role:owner"},
		Status:          core.ApprovalPending,
		CreatedAt:       now,
		ExpiresAt:       now.Add(time.Hour),
	}
}

// insertApproval stores a pending approval (and, with exec, its queued
// execution).
func insertApproval(t testing.TB, ctx context.Context, s *Store, id string, exec bool) {
	t.Helper()
	mustDo(t, ctx, s, func(ctx context.Context, tx *Tx) ([]audit.Entry, error) {
		tx.QueueApproval(testApproval(id, tx.Now()))
		if exec {
			if err := tx.QueueExecution(core.ApprovalID(id)); err != nil {
				return nil, err
			}
		}
		return []audit.Entry{{Kind: "approval.requested", Actor: "webchat:local", Conversation: "webchat:local", Data: map[string]any{"approval": id}}}, nil
	})
}

// stores returns s plus n-1 more Stores on the same database: separate pools
// and writers, as separate processes would have.
func stores(t testing.TB, s *Store, dsn string, n int) []*Store {
	out := []*Store{s}
	for len(out) < n {
		out = append(out, openStore(t, dsn, Options{}))
	}
	return out
}

// race runs f(i) for i in [0,n) at once (released together) and waits.
func race(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

// fakeClock is a settable Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// mustScan scans row into dest; a failed read fails the test instead of
// leaving dest at its zero value for the assertion that follows.
func mustScan(t testing.TB, row pgx.Row, dest ...any) {
	t.Helper()
	if err := row.Scan(dest...); err != nil {
		t.Fatalf("scan: %v", err)
	}
}
