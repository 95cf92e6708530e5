package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/redact"
)

// maxDeadLetterPayload bounds what is kept of one event (platform events
// are a few KB; the adapters cap request bodies well below this).
const maxDeadLetterPayload = 1 << 20

// InsertDeadLetter keeps an event the adapter gives up on and returns its
// id. The same event quarantined again (a redelivery) updates the row. The
// payload is bytes (any bytes fit), but it is a platform event that may
// contain a credential typed into chat, so it goes through the same
// redactor as turn text first: no plaintext secret column.
func (t *Tx) InsertDeadLetter(ctx context.Context, d core.DeadLetter) (int64, error) {
	payload := d.Payload
	if len(payload) > maxDeadLetterPayload {
		payload = payload[:maxDeadLetterPayload]
	}
	clean, _ := redact.Redact(string(payload))
	var id int64
	now := t.now()
	err := t.queryRow(ctx, `INSERT INTO dead_letters (channel, event_id, payload, error, attempts, first_seen, last_seen)
		VALUES ($1, $2, $3, $4, $5, $6, $6)
		ON CONFLICT (channel, event_id) DO UPDATE SET payload = EXCLUDED.payload, error = EXCLUDED.error,
			attempts = dead_letters.attempts + EXCLUDED.attempts, last_seen = EXCLUDED.last_seen
		RETURNING id`, displayText(string(d.Channel)), displayText(d.EventID), []byte(clean), displayText(d.Error), max(d.Attempts, 1), now).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("store: insert dead letter: %w", err)
	}
	return id, nil
}

// DeadLetters returns how many events are quarantined and the newest
// limit of them (payloads included).
func (s *Store) DeadLetters(ctx context.Context, limit int) (int64, []core.DeadLetter, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM dead_letters`).Scan(&n); err != nil {
		return 0, nil, fmt.Errorf("store: count dead letters: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT id, channel, event_id, payload, error, attempts, first_seen, last_seen
		FROM dead_letters ORDER BY last_seen DESC, id DESC LIMIT $1`, limit)
	if err != nil {
		return 0, nil, fmt.Errorf("store: list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (core.DeadLetter, error) {
		var d core.DeadLetter
		err := row.Scan(&d.ID, &d.Channel, &d.EventID, &d.Payload, &d.Error, &d.Attempts, &d.FirstSeen, &d.LastSeen)
		return d, err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("store: list dead letters: %w", err)
	}
	return n, out, nil
}
