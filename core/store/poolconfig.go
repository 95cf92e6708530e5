package store

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// noDescriptionCache turns off pgx's description cache when nothing can
// use it: it serves only the cache_describe query mode (for poolers such
// as PgBouncer in transaction mode), every query of Silas and River runs
// in cache_statement mode, and each connection's cache preallocated a
// 512-entry map (≈ 25 kB, 400 kB over a 16-connection pool: three times
// that in the collector's goal; BENCHMARKS.md "Issue 26 — RSS"). An
// operator whose database URL picks another mode, or sizes the cache
// (description_cache_capacity), keeps pgx's behaviour.
func noDescriptionCache(cc *pgx.ConnConfig, dsn string) {
	if cc.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || strings.Contains(dsn, "description_cache_capacity") {
		return
	}
	cc.DescriptionCacheCapacity = 0
}
