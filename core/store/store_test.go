package store

import (
	"testing"
	"time"

	"github.com/silas-gateway/silas/internal/pgtest"
)

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t)
	ctx := t.Context()
	s := openStore(t, dsn, Options{})

	cur, latest, err := s.SchemaStatus(ctx)
	if err != nil {
		t.Fatalf("SchemaStatus on an empty database: %v", err)
	}
	if cur != 0 || latest < 1 {
		t.Fatalf("empty database: current %d latest %d, want 0 and >= 1", cur, latest)
	}
	p, db, err := s.provider()
	if err != nil {
		t.Fatal(err)
	}
	migrations := len(p.ListSources())
	db.Close()

	// The restart step uses a second Store: a new process migrating a
	// database another one already migrated.
	again := openStore(t, dsn, Options{})
	steps := []struct {
		name        string
		st          *Store
		wantApplied func(int) bool
	}{
		{"first run applies every migration", s, func(n int) bool { return n == migrations }},
		{"second run applies nothing", s, func(n int) bool { return n == 0 }},
		{"third run applies nothing", s, func(n int) bool { return n == 0 }},
		{"another process applies nothing", again, func(n int) bool { return n == 0 }},
	}
	for i, st := range steps {
		n, err := st.st.Migrate(ctx)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if !st.wantApplied(n) {
			t.Fatalf("%s: applied %d", st.name, n)
		}
		cur, l, err := st.st.SchemaStatus(ctx)
		if err != nil {
			t.Fatalf("%s: SchemaStatus: %v", st.name, err)
		}
		if cur != l || l != latest {
			t.Fatalf("%s: current %d latest %d, want both %d", st.name, cur, l, latest)
		}
		// The store still works after Migrate (which borrows its pool),
		// and a re-run keeps existing data.
		mustDo(t, ctx, st.st, entriesOp(numberedEntry(i+1)))
		if n, err := st.st.VerifyAudit(ctx); err != nil || n != int64(i+1) {
			t.Fatalf("%s: VerifyAudit = %d, %v; want %d, nil", st.name, n, err, i+1)
		}
	}
}

// Two processes starting on a fresh database (two `silas serve`, or serve
// and `silas migrate`) both run Migrate.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for round := range 10 {
		dsn := pgtest.NewDatabase(t)
		sts := stores(t, openStore(t, dsn, Options{}), dsn, 4)
		for _, s := range sts {
			// The losers poll for the lock; what is proved is that they
			// wait for the winner, not how long goose's interval is.
			s.migrateLockRetry = 20 * time.Millisecond
		}
		errs := make([]error, len(sts))
		race(len(sts), func(i int) { _, errs[i] = sts[i].Migrate(ctx) })
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, store %d: %v", round, i, err)
			}
		}
		if cur, latest, err := sts[0].SchemaStatus(ctx); err != nil || cur != latest {
			t.Errorf("round %d: SchemaStatus = %d, %d, %v", round, cur, latest, err)
		}
	}
}

// 2, 3. Concurrent appends.
