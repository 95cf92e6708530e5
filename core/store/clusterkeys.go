package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ClaimClusterKeys compares this instance's key fingerprints (key name →
// fingerprint) with the ones the database recorded, under a lock so that
// two first starts cannot record different keys. When every recorded one
// matches, the missing ones are recorded (a first start, or a key this
// version checks for the first time); when one differs nothing is
// recorded. It returns what the database holds for the names asked, for
// the caller to compare and name the key that differs.
func (s *Store) ClaimClusterKeys(ctx context.Context, fps map[string]string) (map[string]string, error) {
	rec := map[string]string{}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE cluster_keys IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT name, fingerprint FROM cluster_keys`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var name, fp string
			if err := rows.Scan(&name, &fp); err != nil {
				rows.Close()
				return err
			}
			if _, asked := fps[name]; asked {
				rec[name] = fp
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for name, fp := range fps {
			if r, ok := rec[name]; ok && r != fp {
				return nil // a mismatch: record nothing
			}
		}
		for name, fp := range fps {
			if _, ok := rec[name]; ok {
				continue
			}
			if _, err := tx.Exec(ctx, `INSERT INTO cluster_keys (name, fingerprint) VALUES ($1, $2)`, name, fp); err != nil {
				return err
			}
			rec[name] = fp
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: cluster keys: %w", err)
	}
	return rec, nil
}

// ForgetClusterKey deletes a recorded key fingerprint (the operator
// replaced that key on every instance on purpose); the next start records
// its own. It reports whether one was recorded.
func (s *Store) ForgetClusterKey(ctx context.Context, name string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM cluster_keys WHERE name = $1`, name)
	if err != nil {
		return false, fmt.Errorf("store: forget cluster key %s: %w", name, err)
	}
	return tag.RowsAffected() > 0, nil
}
