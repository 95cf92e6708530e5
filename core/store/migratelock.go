package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/pressly/goose/v3/lock"
)

// migrateLocker serialises concurrent migrators (two serves, or serve and
// `silas migrate`) with the session-level advisory lock goose's own
// PostgreSQL locker uses (same key, so either kind of migrator waits for
// the other). It differs only in its retry interval, which goose fixes at
// whole seconds: tests that race migrators wait milliseconds, not seconds.
type migrateLocker struct {
	id    int64
	every time.Duration // between tries
	limit time.Duration // give up after this long (as goose: 5 minutes)
}

var _ lock.SessionLocker = migrateLocker{}

// defaultMigrateLockRetry is goose's interval between tries.
const defaultMigrateLockRetry = 5 * time.Second

func (l migrateLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, l.limit)
	defer cancel()
	for {
		var locked bool
		if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", l.id).Scan(&locked); err != nil {
			return fmt.Errorf("store: migrations lock: %w", err)
		}
		if locked {
			return nil
		}
		t := time.NewTimer(l.every)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("store: migrations lock: another migrator holds it: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func (l migrateLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	var unlocked bool
	if err := conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", l.id).Scan(&unlocked); err != nil {
		return fmt.Errorf("store: migrations unlock: %w", err)
	}
	if !unlocked {
		// Released at the end of the session anyway; say so rather than
		// retrying as goose does.
		return errors.New("store: migrations unlock: the lock was not held by this session")
	}
	return nil
}
