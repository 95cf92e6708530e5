package store

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestNoDescriptionCache: the description cache goes only where nothing
// reads it; a URL that asks for cache_describe, or sizes the cache, keeps
// it, and the statement cache is never touched.
func TestNoDescriptionCache(t *testing.T) {
	for _, tc := range []struct {
		dsn       string
		wantDesc  int
		wantStmts int
	}{
		{"postgres://u@localhost/db", 0, 512},
		{"host=localhost dbname=db", 0, 512},
		{"postgres://u@localhost/db?statement_cache_capacity=64", 0, 64},
		{"postgres://u@localhost/db?default_query_exec_mode=cache_describe", 512, 512},
		{"postgres://u@localhost/db?default_query_exec_mode=simple_protocol", 512, 512},
		{"postgres://u@localhost/db?description_cache_capacity=100", 100, 512},
		{"host=localhost default_query_exec_mode=cache_describe", 512, 512},
	} {
		cfg, err := pgxpool.ParseConfig(tc.dsn)
		if err != nil {
			t.Fatalf("%s: %v", tc.dsn, err)
		}
		noDescriptionCache(cfg.ConnConfig, tc.dsn)
		if got := cfg.ConnConfig.DescriptionCacheCapacity; got != tc.wantDesc {
			t.Errorf("%s: description cache %d, want %d", tc.dsn, got, tc.wantDesc)
		}
		if got := cfg.ConnConfig.StatementCacheCapacity; got != tc.wantStmts {
			t.Errorf("%s: statement cache %d, want %d", tc.dsn, got, tc.wantStmts)
		}
	}
}
