package store

import (
	"context"
	"fmt"
)

// OutboxBacklog counts the outbox jobs not delivered yet, across every
// conversation (the silas_outbox_backlog gauge; the partial index
// outbox_pending serves it).
func (s *Store) OutboxBacklog(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status = 'pending'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: outbox backlog: %w", err)
	}
	return n, nil
}
