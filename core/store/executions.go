package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silas-gateway/silas/core"
)

const execSelect = `SELECT approval_id, status, result, report, COALESCE(reason, ''), created_at, started_at, finished_at FROM executions`

func scanExecution(row pgx.Row) (core.Execution, error) {
	var e core.Execution
	var status string
	var result, report []byte
	var started, finished *time.Time
	if err := row.Scan(&e.ApprovalID, &status, &result, &report, &e.Reason, &e.CreatedAt, &started, &finished); err != nil {
		return e, notFound(err)
	}
	e.Status = core.ExecStatus(status)
	if len(result) > 0 {
		r, err := decodeRecord(result)
		if err != nil {
			return e, fmt.Errorf("store: decode execution result: %w", err)
		}
		e.Result = r
	}
	e.Report = report
	if started != nil {
		e.StartedAt = *started
	}
	if finished != nil {
		e.FinishedAt = *finished
	}
	return e, nil
}

// GetExecution reads one execution.
func (s *Store) GetExecution(ctx context.Context, id core.ApprovalID) (core.Execution, error) {
	return scanExecution(s.pool.QueryRow(ctx, execSelect+" WHERE approval_id = $1", id))
}

// GetExecution reads the execution of approval id in the transaction,
// its row locked FOR SHARE until commit: what a tap on the decided
// request's card re-sends (core/decide) is then the state the execution
// still has when that edit is committed. An earlier transition is read
// (committed, or queued earlier in this very transaction); a later one
// waits for this transaction, so its edit of the card is queued after the
// re-send's. (Lock order, approval then execution: see TransitionExecution.)
func (t *Tx) GetExecution(ctx context.Context, id core.ApprovalID) (core.Execution, error) {
	return scanExecution(t.queryRow(ctx, execSelect+" WHERE approval_id = $1 FOR SHARE", id))
}

// UnfinishedExecutions lists executions that a restart must resume (queued,
// executed but unverified) or settle (running when the process died): with
// several instances, those no live instance owns (a dead one's, or one
// without an owner), so a survivor never settles a run another instance
// is still running. It adopts them (their instance becomes this store's)
// in the same statement, so each is settled by one instance, once.
func (s *Store) UnfinishedExecutions(ctx context.Context) ([]core.Execution, error) {
	rows, err := s.pool.Query(ctx, `WITH a AS (UPDATE executions e SET instance = $1
			WHERE status IN ('queued', 'running', 'executed') AND (e.instance IS DISTINCT FROM $1 OR $1 IS NULL) AND `+fmt.Sprintf(notLive, "e.instance")+`
			RETURNING approval_id)
		`+execSelect+` WHERE approval_id IN (SELECT approval_id FROM a) ORDER BY created_at`, s.instanceArg())
	if err != nil {
		return nil, fmt.Errorf("store: unfinished executions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (core.Execution, error) { return scanExecution(row) })
	if err != nil {
		return nil, fmt.Errorf("store: unfinished executions: %w", err)
	}
	return out, nil
}

// QueueExecution queues the execution of an approved action. The approval
// must be in the transaction's view (ErrOrder).
func (t *Tx) QueueExecution(id core.ApprovalID) error {
	if err := t.parent("execution", id); err != nil {
		return err
	}
	q := t.later("insert execution", `INSERT INTO executions (approval_id, status, created_at, instance) VALUES ($1, 'queued', $2, $3)`, id, t.now(), t.instance)
	if t.execs == nil {
		t.execs = map[core.ApprovalID]*pgx.QueuedQuery{}
	}
	t.execs[id] = q
	return nil
}

// ClaimQueuedExecution makes the execution of approval id, queued in this
// transaction (QueueExecution) and not sent yet, one this process claimed:
// it is inserted running, started now, its instance this store's — the
// row the claim's compare-and-swap (queued → running, TransitionExecution)
// would leave, without a transaction of its own. The caller passed the
// execution gate in this transaction (core/execute ClaimWithDecision).
// false: no such insert is waiting (never queued here, or sent already —
// a refusal wrote the row), and nothing changed.
func (t *Tx) ClaimQueuedExecution(id core.ApprovalID) bool {
	q, ok := t.execs[id]
	if !ok {
		return false
	}
	delete(t.execs, id)
	created := q.Arguments[1]
	q.SQL = `INSERT INTO executions (approval_id, status, created_at, started_at, instance) VALUES ($1, 'running', $2, $3, $4)`
	q.Arguments = []any{id, created, t.now(), t.instance}
	for i := len(t.labels) - 1; i >= 0; i-- {
		if t.labels[i] == "insert execution" {
			// The label of a statement that fails names what it was.
			t.labels[i] = "insert claimed execution"
			break
		}
	}
	return true
}

// TransitionExecution is compare-and-swap on an execution's status. It
// locks the approval's row first (FOR KEY SHARE), then the execution's (the
// UPDATE), in one statement (transitionExecution): the order of a tap, which locks the approval (GetApproval, FOR
// UPDATE) before it reads the execution to re-send its card
// (GetExecution, FOR SHARE). In the opposite order a transition storing
// long output (whose foreign key takes the approval's key-share lock too)
// and such a tap could each wait for the other; in this one a transition
// waits for a tap on its card to commit, or the tap waits for the
// transition, and the later one's card edit is queued after the other's.
func (t *Tx) TransitionExecution(ctx context.Context, id core.ApprovalID, from, to core.ExecStatus, u core.ExecUpdate) (bool, error) {
	sql, args, err := t.transitionExecution(id, from, to, u)
	if err != nil {
		return false, err
	}
	tag, err := t.exec(ctx, sql, args...)
	if err != nil {
		return false, fmt.Errorf("store: transition execution %s: %w", id, err)
	}
	return t.transitioned(id, tag), nil
}

// QueueTransitionExecution is TransitionExecution sent with the
// transaction's next round trip instead of one of its own (the claim's:
// with the audit chain's lock). applied is told whether it applied once
// the statement was sent, before any Finally function runs; nothing the
// caller queues after it may depend on it applying — what does goes in a
// Finally function.
func (t *Tx) QueueTransitionExecution(id core.ApprovalID, from, to core.ExecStatus, u core.ExecUpdate, applied func(bool)) error {
	sql, args, err := t.transitionExecution(id, from, to, u)
	if err != nil {
		return err
	}
	t.later("transition execution", sql, args...).Exec(func(tag pgconn.CommandTag) error {
		applied(t.transitioned(id, tag))
		return nil
	})
	return nil
}

// QueueGuardedTransitionExecution is QueueTransitionExecution for an op that
// speculates (Speculate; speculate.go): the compare-and-swap is queued with
// a guard that fails the whole transaction when it does not apply, so the
// caller queues what depends on it at once, as if it applied — in the same
// round trip as the swap, and COMMIT with them. Refused (an error) when
// the transaction does not speculate.
func (t *Tx) QueueGuardedTransitionExecution(id core.ApprovalID, from, to core.ExecStatus, u core.ExecUpdate) error {
	if !t.Speculate() {
		return errors.New("store: a guarded transition in a transaction that does not speculate")
	}
	sql, args, err := t.transitionExecution(id, from, to, u)
	if err != nil {
		return err
	}
	t.guard("transition execution", guardOne(sql), args...)
	// As transitioned: applied, or nothing commits.
	t.seen(id)
	return nil
}

// transitionExecution returns the execution's compare-and-swap statement
// (see TransitionExecution). The approval's lock is in it: the EXISTS is
// uncorrelated, so PostgreSQL runs it once, as an InitPlan gating the scan
// of executions (a One-Time Filter), before the execution's row is even
// read — the same order as a statement of its own before the UPDATE, one
// statement fewer per transition (TestTransitionLocksApprovalFirst).
func (t *Tx) transitionExecution(id core.ApprovalID, from, to core.ExecStatus, u core.ExecUpdate) (string, []any, error) {
	var result []byte
	if u.Result != nil {
		var err error
		if result, err = encodeRecord(u.Result); err != nil {
			return "", nil, fmt.Errorf("store: marshal result: %w", err)
		}
	}
	var report []byte
	if len(u.Report) > 0 {
		report = jsonbSafe(u.Report)
	}
	now := t.now()
	var started, finished *time.Time
	if u.Started {
		started = &now
	}
	if u.Done {
		finished = &now
	}
	return `UPDATE executions SET status = $3,
		result = COALESCE($4, result), report = COALESCE($5, report), reason = COALESCE(NULLIF($6, ''), reason),
		started_at = COALESCE($7, started_at), finished_at = COALESCE($8, finished_at),
		instance = CASE WHEN $3 = 'running' THEN $9 ELSE instance END
		WHERE approval_id = $1 AND status = $2 AND EXISTS (SELECT FROM approvals WHERE id = $1 FOR KEY SHARE)`, []any{id, from, to, result, report, u.Reason, started, finished, t.instance}, nil
}

// transitioned reports whether a transition's statement applied.
func (t *Tx) transitioned(id core.ApprovalID, tag pgconn.CommandTag) bool {
	if tag.RowsAffected() != 1 {
		return false
	}
	// An execution row exists only for a committed approval: its output
	// may reference the approval without reading it again (see ErrOrder).
	t.seen(id)
	return true
}

// QueueOutput stores an execution's full output under ref; secret marks
// the output of an action that received a secret (outputs.secret), which
// the reads below withhold until the owner tapped to show it. The approval
// must be in the transaction's view (ErrOrder).
func (t *Tx) QueueOutput(ref string, id core.ApprovalID, content string, secret bool) error {
	if err := t.parent("output", id); err != nil {
		return err
	}
	t.later("insert output", `INSERT INTO outputs (ref, approval_id, content, secret, created_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (ref) DO NOTHING`, ref, id, displayText(content), secret, t.now())
	return nil
}

// GetOutput returns stored output by ref. core.ErrWithheld: the output of
// an action that received a secret, not shown by the owner's tap in any
// conversation.
func (s *Store) GetOutput(ctx context.Context, ref string) (string, error) {
	var c string
	var withheld bool
	err := s.pool.QueryRow(ctx, `SELECT o.content, o.secret AND NOT EXISTS (SELECT 1 FROM output_reveals r
		WHERE r.ref = o.ref AND r.status = 'shown') FROM outputs o WHERE o.ref = $1`, ref).Scan(&c, &withheld)
	return withhold(c, withheld, err)
}

// GetConversationOutput returns stored output by ref only if it belongs to
// an approval in conv. core.ErrWithheld: the output of an action that
// received a secret, not shown in conv by the owner's tap
// (RevealOutput): /output asks for that tap instead, and the web chat's
// full-output page refuses.
func (s *Store) GetConversationOutput(ctx context.Context, conv core.ConversationID, ref string) (string, error) {
	var c string
	var withheld bool
	err := s.pool.QueryRow(ctx, `SELECT o.content, o.secret AND NOT EXISTS (SELECT 1 FROM output_reveals r
		WHERE r.ref = o.ref AND r.conversation = $2 AND r.status = 'shown')
		FROM outputs o JOIN approvals a ON a.id = o.approval_id
		WHERE o.ref = $1 AND a.conversation = $2`, ref, conv).Scan(&c, &withheld)
	return withhold(c, withheld, err)
}

func withhold(content string, withheld bool, err error) (string, error) {
	if err != nil {
		return "", notFound(err)
	}
	if withheld {
		return "", core.ErrWithheld
	}
	return content, nil
}
