package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

const approvalSelect = `SELECT id, channel, conversation, requester, COALESCE(turn_seq, 0), action_canonical, action_hash,
	intent, rationale, risk, approvers, status, created_at, expires_at, COALESCE(decided_by, ''), decided_at, token, request_sig FROM approvals`

func scanApproval(row pgx.Row) (core.ApprovalRequest, error) {
	var a core.ApprovalRequest
	var risk, status string
	var decidedAt *time.Time
	err := row.Scan(&a.ID, &a.Channel, &a.Conversation, &a.Requester, &a.TurnSeq, &a.ActionCanonical, &a.ActionHash,
		&a.Intent, &a.Rationale, &risk, &a.Approvers, &status, &a.CreatedAt, &a.ExpiresAt, &a.DecidedBy, &decidedAt, &a.Token, &a.Signature)
	if err != nil {
		return a, notFound(err)
	}
	a.Risk, a.Status = cards.Risk(risk), core.ApprovalStatus(status)
	if decidedAt != nil {
		a.DecidedAt = *decidedAt
	}
	return a, nil
}

// GetApproval reads one approval request.
func (s *Store) GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, approvalSelect+" WHERE id = $1", id))
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return a, fmt.Errorf("store: get approval: %w", err)
	}
	return a, err
}

// OpenApprovals lists pending and confirming requests in a conversation
// (all conversations when conv is empty), oldest first.
func (s *Store) OpenApprovals(ctx context.Context, conv core.ConversationID) ([]core.ApprovalRequest, error) {
	rows, err := s.pool.Query(ctx, approvalSelect+` WHERE status IN ('pending', 'confirming') AND ($1 = '' OR conversation = $1)
		ORDER BY created_at`, conv)
	if err != nil {
		return nil, fmt.Errorf("store: open approvals: %w", err)
	}
	out, err := pgx.CollectRows(rows, rowToApproval)
	if err != nil {
		return nil, fmt.Errorf("store: open approvals: %w", err)
	}
	return out, nil
}

func rowToApproval(row pgx.CollectableRow) (core.ApprovalRequest, error) { return scanApproval(row) }

// ExpiredApprovals lists open requests whose expiry has passed.
func (s *Store) ExpiredApprovals(ctx context.Context, now time.Time, limit int) ([]core.ApprovalRequest, error) {
	rows, err := s.pool.Query(ctx, approvalSelect+` WHERE status IN ('pending', 'confirming') AND expires_at <= $1 ORDER BY expires_at LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("store: expired approvals: %w", err)
	}
	out, err := pgx.CollectRows(rows, rowToApproval)
	if err != nil {
		return nil, fmt.Errorf("store: expired approvals: %w", err)
	}
	return out, nil
}

// PendingTurns lists turns not yet processed, in arrival order.
func (s *Store) PendingTurns(ctx context.Context) ([]core.StoredTurn, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, body FROM turns WHERE status = 'pending' ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("store: pending turns: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (core.StoredTurn, error) {
		var st core.StoredTurn
		var body []byte
		if err := row.Scan(&st.Seq, &body); err != nil {
			return st, err
		}
		if err := json.Unmarshal(body, &st.Turn); err != nil {
			return st, fmt.Errorf("decode turn %d: %w", st.Seq, err)
		}
		return st, nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: pending turns: %w", err)
	}
	return out, nil
}

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

// UnfinishedExecutions lists executions that a restart must resume (queued,
// executed but unverified) or settle (running when the process died).
func (s *Store) UnfinishedExecutions(ctx context.Context) ([]core.Execution, error) {
	rows, err := s.pool.Query(ctx, execSelect+` WHERE status IN ('queued', 'running', 'executed') ORDER BY created_at`)
	if err != nil {
		return nil, fmt.Errorf("store: unfinished executions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (core.Execution, error) { return scanExecution(row) })
	if err != nil {
		return nil, fmt.Errorf("store: unfinished executions: %w", err)
	}
	return out, nil
}

// GetOutput returns stored output by ref.
func (s *Store) GetOutput(ctx context.Context, ref string) (string, error) {
	var c string
	err := s.pool.QueryRow(ctx, `SELECT content FROM outputs WHERE ref = $1`, ref).Scan(&c)
	return c, notFound(err)
}

// GetConversationOutput returns stored output by ref only if it belongs to
// an approval in conv.
func (s *Store) GetConversationOutput(ctx context.Context, conv core.ConversationID, ref string) (string, error) {
	var c string
	err := s.pool.QueryRow(ctx, `SELECT o.content FROM outputs o JOIN approvals a ON a.id = o.approval_id
		WHERE o.ref = $1 AND a.conversation = $2`, ref, conv).Scan(&c)
	return c, notFound(err)
}

// Binding is a stored identity binding.
type Binding struct {
	Identity  core.IdentityID
	Role      string
	Record    []byte
	Signature []byte
}

// Bindings lists all identity bindings.
func (s *Store) Bindings(ctx context.Context) ([]Binding, error) {
	rows, err := s.pool.Query(ctx, `SELECT identity, role, record, signature FROM identity_bindings`)
	if err != nil {
		return nil, fmt.Errorf("store: bindings: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Binding])
	if err != nil {
		return nil, fmt.Errorf("store: bindings: %w", err)
	}
	return out, nil
}

// NextOutboxJob returns a conversation's oldest pending job, whether a newer
// pending edit of the same message supersedes it, and the platform ref of
// the message it edits (empty if none was recorded). ErrNotFound: nothing
// pending.
func (s *Store) NextOutboxJob(ctx context.Context, conv core.ConversationID) (j core.OutboxJob, superseded bool, ref core.MessageRef, err error) {
	var op string
	var payload []byte
	var r *string
	err = s.pool.QueryRow(ctx, `SELECT o.id, o.channel, o.conversation, o.op, o.message_key, o.payload, o.attempts, o.next_at, o.created_at,
			o.op = 'update' AND EXISTS (SELECT 1 FROM outbox l WHERE l.status = 'pending' AND l.channel = o.channel
				AND l.message_key = o.message_key AND l.op = 'update' AND l.id > o.id),
			s.ref
		FROM outbox o LEFT JOIN sent_messages s ON s.channel = o.channel AND s.message_key = o.message_key
		WHERE o.conversation = $1 AND o.status = 'pending' ORDER BY o.id LIMIT 1`, conv).
		Scan(&j.ID, &j.Channel, &j.Conversation, &op, &j.MessageKey, &payload, &j.Attempts, &j.NextAt, &j.CreatedAt, &superseded, &r)
	if err != nil {
		return j, false, "", notFound(err)
	}
	j.Op = core.OutboxOp(op)
	var p answerPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return j, false, "", fmt.Errorf("store: decode outbox job %d: %w", j.ID, err)
	}
	j.Message = p.OutMessage
	if p.Answer != nil {
		a := *p.Answer
		a.Card = j.Message.Card
		j.Answer = &a
	}
	if r != nil {
		ref = core.MessageRef(*r)
	}
	return j, superseded, ref, nil
}

// PendingOutboxConversations lists conversations with pending deliveries
// (for recovery after a restart and for retries).
func (s *Store) PendingOutboxConversations(ctx context.Context, limit int) ([]core.ConversationID, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT conversation FROM outbox WHERE status = 'pending' LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("store: pending outbox conversations: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[core.ConversationID])
	if err != nil {
		return nil, fmt.Errorf("store: pending outbox conversations: %w", err)
	}
	return out, nil
}

// QueueDelivered marks a job delivered (or superseded) and remembers the
// platform ref.
func (t *Tx) QueueDelivered(j core.OutboxJob, ref core.MessageRef, status core.OutboxStatus) {
	t.delivered = append(t.delivered, queuedDelivered{id: j.ID, status: status})
	// Only cards are edited later, so only their platform refs are kept.
	if ref != "" && j.Message.Card != nil {
		t.later("remember sent message", `INSERT INTO sent_messages (channel, message_key, conversation, ref, sent_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (channel, message_key) DO UPDATE SET ref = EXCLUDED.ref`, j.Channel, j.MessageKey, j.Conversation, ref, t.now())
	}
}

// OutboxRetry records a failed attempt and when to try again.
func (t *Tx) OutboxRetry(ctx context.Context, id int64, next time.Time, errText string) error {
	_, err := t.exec(ctx, `UPDATE outbox SET attempts = attempts + 1, next_at = $2, last_error = $3 WHERE id = $1 AND status = 'pending'`, id, next, errText)
	if err != nil {
		return fmt.Errorf("store: outbox retry: %w", err)
	}
	return nil
}

// OutboxFailed gives up on a job.
func (t *Tx) OutboxFailed(ctx context.Context, id int64, errText string) error {
	_, err := t.exec(ctx, `UPDATE outbox SET status = 'failed', attempts = attempts + 1, last_error = $2 WHERE id = $1 AND status = 'pending'`, id, errText)
	if err != nil {
		return fmt.Errorf("store: outbox failed: %w", err)
	}
	return nil
}

// RequestedCommand returns the command recorded in the audit log when the
// approval was requested (its first approval.requested entry: a later one
// for the same id, appended by whoever can write the log, does not count).
// ErrNotFound: the log holds no such entry.
func (s *Store) RequestedCommand(ctx context.Context, id core.ApprovalID) (string, error) {
	var cmd *string
	err := s.pool.QueryRow(ctx, `SELECT data->>'command' FROM audit_log WHERE kind = $1 AND data->>'approval' = $2
		ORDER BY seq LIMIT 1`, string(audit.KindApprovalRequested), string(id)).Scan(&cmd)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && cmd == nil) {
		return "", core.ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("store: requested command of %s: %w", id, err)
	}
	return *cmd, nil
}

// AuditTail returns the last n rows, oldest first (conversation filter
// optional, kinds filter optional).
func (s *Store) AuditTail(ctx context.Context, n int, conv core.ConversationID, kinds []audit.Kind) ([]audit.Row, error) {
	ks := make([]string, len(kinds))
	for i, k := range kinds {
		ks[i] = string(k)
	}
	rows, err := s.pool.Query(ctx, `SELECT * FROM (SELECT seq, at, kind, actor, conversation, data::text, prev_hash, hash FROM audit_log
		WHERE ($2 = '' OR conversation = $2) AND (COALESCE(cardinality($3::text[]), 0) = 0 OR kind = ANY($3)) ORDER BY seq DESC LIMIT $1) t ORDER BY seq`, n, conv, ks)
	if err != nil {
		return nil, fmt.Errorf("store: audit tail: %w", err)
	}
	defer rows.Close()
	return collectAudit(rows)
}

func collectAudit(rows pgx.Rows) ([]audit.Row, error) {
	return pgx.CollectRows(rows, scanAudit)
}

func scanAudit(rows pgx.CollectableRow) (audit.Row, error) {
	var r audit.Row
	var data string
	if err := rows.Scan(&r.Seq, &r.At, &r.Entry.Kind, &r.Entry.Actor, &r.Entry.Conversation, &data, &r.PrevHash, &r.Hash); err != nil {
		return r, fmt.Errorf("store: scan audit row: %w", err)
	}
	r.DataJSON = []byte(data)
	if err := json.Unmarshal(r.DataJSON, &r.Entry.Data); err != nil {
		return r, fmt.Errorf("store: decode audit row %d: %w", r.Seq, err)
	}
	return r, nil
}

// VerifyAudit walks the whole chain in order. It returns the number of rows
// checked and a *audit.BrokenError naming the first bad row. It checks the
// chain only; VerifyAuditAnchored also checks the signed checkpoints.
func (s *Store) VerifyAudit(ctx context.Context) (int64, error) {
	v := audit.NewVerifier()
	var broken error
	err := s.walkAudit(ctx, func(r audit.Row) bool {
		broken = v.Check(r)
		return broken == nil
	})
	if err != nil {
		return v.Checked, err
	}
	return v.Checked, broken
}

// scanAuditRaw does not decode data: verification hashes it as stored, so
// even a row whose data no longer parses is reported as broken, not skipped.
func scanAuditRaw(rows pgx.Rows) (audit.Row, error) {
	var r audit.Row
	var data string
	if err := rows.Scan(&r.Seq, &r.At, &r.Entry.Kind, &r.Entry.Actor, &r.Entry.Conversation, &data, &r.PrevHash, &r.Hash); err != nil {
		return r, fmt.Errorf("store: scan audit row: %w", err)
	}
	r.DataJSON = []byte(data)
	return r, nil
}
