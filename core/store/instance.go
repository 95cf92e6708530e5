package store

import (
	"context"
	"errors"
	"fmt"
)

// instanceLockKey guards "one serve per database": in-memory conversation
// queues and execution claims assume a single gateway process.
const instanceLockKey = 0x5117A5000001

// ErrAnotherInstance means another `silas serve` holds the database.
var ErrAnotherInstance = errors.New("another silas serve is already using this database")

// AcquireInstance takes a session-level advisory lock on a dedicated
// connection and holds it until release is called (or the process dies,
// which releases it with the connection).
func (s *Store) AcquireInstance(ctx context.Context) (release func(), err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: instance lock: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(instanceLockKey)).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("store: instance lock: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, ErrAnotherInstance
	}
	return func() {
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", int64(instanceLockKey))
		conn.Release()
	}, nil
}
