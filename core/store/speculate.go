package store

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Speculation (issue 26). A compare-and-swap whose result decides what an
// op writes next costs a round trip of its own: run now (its result read
// before the op goes on), or sent with the next round trip and followed by
// a Finally function — which then needs one more round trip for what it
// queues, and COMMIT. Each round trip costs both processes CPU (thread
// wake-ups, protocol work), not only latency.
//
// An op that speculates (Speculate) queues the compare-and-swap with a
// guard instead (guard): a statement that fails the whole transaction on
// the server — a division by zero — when the swap did not apply. It then
// queues what follows as if it applied. The swap, what depends on it, the
// audit rows and COMMIT can so travel in one round trip: a failed guard
// aborts the transaction where it stands, PostgreSQL skips what follows
// in the pipeline (COMMIT included, or answers it ROLLBACK), and nothing
// of it commits. Because the guard is checked on the server, a guarded
// statement leaves the transaction "unchecked" (Tx.unchecked): COMMIT may
// go with it.
//
// When a guard fails, the writer runs the batch again with speculation off
// (commitOnce): every op runs anew, Speculate answers false, and each takes
// its ordinary path — the swap run or queued plainly, its result read —
// which gives the answers a swap that did not apply gives (already
// decided, a lost race, a replayed nonce). Ops are re-run safe already (a
// failed batch is retried op by op); a speculating op must, as every op,
// keep nothing of an earlier run.

// errSpeculationLost: a guard failed (a speculated compare-and-swap did not
// apply); nothing of the transaction was committed. The writer re-runs the
// batch without speculation; no caller sees it.
var errSpeculationLost = errors.New("store: a speculated compare-and-swap did not apply")

// Speculate reports whether the op may speculate in this run of its batch
// (see above): false when the batch runs again after a failed guard.
func (t *Tx) Speculate() bool { return !t.noSpeculation }

// guard queues sql, a statement returning one row of one integer column
// whose value is a division by zero when what it guards did not apply (for
// a compare-and-swap: guardOne). When it is zero the transaction fails on
// the server and the writer re-runs the batch without speculation.
func (t *Tx) guard(label, sql string, args ...any) {
	q := t.later(label, sql, args...)
	q.QueryRow(func(row pgx.Row) error {
		var one int64
		if err := row.Scan(&one); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "22012" { // division_by_zero: the guard
				t.lost = true
				return fmt.Errorf("%w (%s)", errSpeculationLost, label)
			}
			return err
		}
		return nil
	})
	if t.guards == nil {
		t.guards = map[*pgx.QueuedQuery]bool{}
	}
	t.guards[q] = true
}

// guardOne is the guard of a compare-and-swap: dml (an UPDATE, without
// RETURNING) must change exactly one row.
func guardOne(dml string) string {
	return `WITH g AS (` + dml + ` RETURNING 1) SELECT 1 / (CASE WHEN count(*) = 1 THEN 1 ELSE 0 END) FROM g`
}
