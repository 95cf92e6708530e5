package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

// Leases (core.Lease, core/lease): compare-and-swap on the row, on the
// database's clock (now()), so instances with drifting clocks still agree
// on who holds what. A lease past expires_at is free; a renewal needs the
// same holder, the same epoch and a lease not yet expired.

const leaseCols = `name, holder, epoch, acquired_at, expires_at, renewed_at`

func scanLease(row pgx.Row) (core.Lease, error) {
	var l core.Lease
	err := row.Scan(&l.Name, &l.Holder, &l.Epoch, &l.AcquiredAt, &l.ExpiresAt, &l.RenewedAt)
	return l, err
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// AcquireLease takes the lease name for holder for ttl when it is free
// (never held, released or expired), under the next epoch. When another
// holder has it, ok is false and the lease returned is theirs.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (l core.Lease, ok bool, err error) {
	if holder == "" || ttl <= 0 {
		return l, false, fmt.Errorf("store: acquire lease %s: a holder and a positive ttl are needed", name)
	}
	// old locks the existing row (if any) so the holder it reports is the
	// one this statement replaces, for Lease.Previous; the INSERT's source
	// reads it so it is evaluated (once) before the row changes.
	var prev string
	err = s.pool.QueryRow(ctx, `
		WITH old AS (SELECT holder FROM leases WHERE name = $1 FOR UPDATE)
		INSERT INTO leases AS l (name, holder, epoch, acquired_at, renewed_at, expires_at)
		SELECT $1, $2, 1, now(), now(), now() + $3 * interval '1 microsecond' FROM (SELECT 1) one LEFT JOIN old ON true
		ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, epoch = l.epoch + 1,
			acquired_at = EXCLUDED.acquired_at, renewed_at = EXCLUDED.renewed_at, expires_at = EXCLUDED.expires_at
		WHERE l.expires_at <= now()
		RETURNING `+leaseCols+`, coalesce((SELECT holder FROM old), '')`, name, holder, micros(ttl)).
		Scan(&l.Name, &l.Holder, &l.Epoch, &l.AcquiredAt, &l.ExpiresAt, &l.RenewedAt, &prev)
	l.Previous = prev
	if err == nil {
		return l, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return l, false, fmt.Errorf("store: acquire lease %s: %w", name, err)
	}
	l, err = scanLease(s.pool.QueryRow(ctx, `SELECT `+leaseCols+` FROM leases WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		// Released and taken between the two statements is impossible
		// (rows are never deleted); a row deleted by hand is.
		return l, false, fmt.Errorf("store: acquire lease %s: the lease row disappeared", name)
	}
	if err != nil {
		return l, false, fmt.Errorf("store: acquire lease %s: %w", name, err)
	}
	return l, false, nil
}

// RenewLease extends l by ttl from now when its holder still holds it at
// its epoch and it has not expired. false means it is lost: expired, or
// taken by another holder.
func (s *Store) RenewLease(ctx context.Context, l core.Lease, ttl time.Duration) (core.Lease, bool, error) {
	n, err := scanLease(s.pool.QueryRow(ctx, `
		UPDATE leases SET renewed_at = now(), expires_at = now() + $4 * interval '1 microsecond'
		WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > now()
		RETURNING `+leaseCols, l.Name, l.Holder, l.Epoch, micros(ttl)))
	if errors.Is(err, pgx.ErrNoRows) {
		return l, false, nil
	}
	if err != nil {
		return l, false, fmt.Errorf("store: renew lease %s: %w", l.Name, err)
	}
	return n, true, nil
}

// ReleaseLease ends l now, if its holder still holds it at its epoch, so
// another instance need not wait for it to expire. The epoch stays: the
// next holder gets a newer one.
func (s *Store) ReleaseLease(ctx context.Context, l core.Lease) error {
	_, err := s.pool.Exec(ctx, `UPDATE leases SET holder = '', expires_at = now()
		WHERE name = $1 AND holder = $2 AND epoch = $3`, l.Name, l.Holder, l.Epoch)
	if err != nil {
		return fmt.Errorf("store: release lease %s: %w", l.Name, err)
	}
	return nil
}

// Leases lists every lease (for doctor and metrics), by name.
func (s *Store) Leases(ctx context.Context) ([]core.Lease, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+leaseCols+` FROM leases ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("store: list leases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.Lease, error) { return scanLease(r) })
	if err != nil {
		return nil, fmt.Errorf("store: list leases: %w", err)
	}
	return out, nil
}

// fenced runs write in a transaction after checking that no epoch of the
// lease name newer than epoch exists. The lease row is locked FOR SHARE
// until the write commits, so a new holder's acquisition waits for it and
// cannot slip in between the check and the write: the write either
// commits before the new epoch exists, or is refused with core.ErrFenced.
func (s *Store) fenced(ctx context.Context, name string, epoch int64, write func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var cur int64
		err := tx.QueryRow(ctx, `SELECT epoch FROM leases WHERE name = $1 FOR SHARE`, name).Scan(&cur)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("store: fenced write under lease %s: %w", name, core.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("store: fenced write under lease %s: %w", name, err)
		}
		if cur > epoch {
			return fmt.Errorf("store: write under lease %s epoch %d, now at %d: %w", name, epoch, cur, core.ErrFenced)
		}
		return write(tx)
	})
}

// SetStateFenced is SetState for a value whose writer must hold the lease
// name at epoch (the Telegram offset under its polling lease): refused with
// core.ErrFenced once a newer epoch exists.
func (s *Store) SetStateFenced(ctx context.Context, ch core.ChannelName, key, value, lease string, epoch int64) error {
	return s.fenced(ctx, lease, epoch, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, upsertState, ch, key, value)
		if err != nil {
			return fmt.Errorf("store: set state %s/%s: %w", ch, key, err)
		}
		return nil
	})
}
