// Package storetest gives tests outside core/store a PostgreSQL database with
// the schema already migrated.
//
// The migrations run once per test binary, into a template database (see
// pgtest.NewDatabaseFrom); each test gets a file copy of it, which costs a
// fraction of migrating a fresh database. Tests that are about migrating
// (an empty database, concurrent migrators, `silas migrate`) keep using
// pgtest.NewDatabase. The package's TestMain must call pgtest.Main as usual.
package storetest

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// NewDatabase returns the DSN of a fresh database of t's own with every
// migration applied (as store.Migrate applies them), dropped when t ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return pgtest.NewDatabaseFrom(t, "silas-migrated", Migrate)
}

// Migrate applies the migrations to the database at dsn with store.Migrate
// and closes its connections; it is the prepare function of NewDatabase,
// exported for packages that keep their own template key.
func Migrate(ctx context.Context, dsn string) error {
	st, err := store.Open(ctx, dsn, store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("storetest: %w", err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return fmt.Errorf("storetest: %w", err)
	}
	return nil
}
