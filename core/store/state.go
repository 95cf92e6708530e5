package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

var _ core.StateStore = (*Store)(nil)

// GetState reads an adapter's durable value.
func (s *Store) GetState(ctx context.Context, ch core.ChannelName, key string) (string, bool, error) {
	var v string
	err := s.pool.QueryRow(ctx, `SELECT value FROM channel_state WHERE channel = $1 AND key = $2`, ch, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("store: get state %s/%s: %w", ch, key, err)
	}
	return v, true, nil
}

// SetState writes an adapter's durable value (committed when it returns).
func (s *Store) SetState(ctx context.Context, ch core.ChannelName, key, value string) error {
	_, err := s.pool.Exec(ctx, upsertState, ch, key, value)
	if err != nil {
		return fmt.Errorf("store: set state %s/%s: %w", ch, key, err)
	}
	return nil
}

const upsertState = `INSERT INTO channel_state (channel, key, value, updated_at) VALUES ($1, $2, $3, now())
	ON CONFLICT (channel, key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`
