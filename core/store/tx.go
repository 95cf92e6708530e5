package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silas-gateway/silas/core"
)

// Tx is the transaction an Op runs in. Its methods are the only writes.
//
// Statements whose result nobody reads are queued and sent together in one
// pipelined round trip, before the next statement that returns something
// and before commit. An error in a queued statement therefore surfaces a
// little later — still inside the same batch, which then fails and is
// retried op by op, so it is attributed to the right op.
type Tx struct {
	tx     pgx.Tx
	now    func() time.Time
	queued *pgx.Batch
	labels []string
}

// later queues a statement whose result is not needed.
func (t *Tx) later(label, sql string, args ...any) {
	if t.queued == nil {
		t.queued = &pgx.Batch{}
	}
	t.queued.Queue(sql, args...)
	t.labels = append(t.labels, label)
}

// flush sends queued statements.
func (t *Tx) flush(ctx context.Context) error {
	if t.queued == nil || t.queued.Len() == 0 {
		return nil
	}
	b, labels := t.queued, t.labels
	t.queued, t.labels = nil, nil
	br := t.tx.SendBatch(ctx, b)
	for _, l := range labels {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return fmt.Errorf("store: %s: %w", l, err)
		}
	}
	return br.Close()
}

// Now is the store's clock.
func (t *Tx) Now() time.Time { return t.now() }

// InsertTurn stores a turn unless (channel, event id) exists. dup reports a
// redelivery; seq is the turn's sequence either way.
func (t *Tx) InsertTurn(ctx context.Context, turn core.Turn) (seq int64, dup bool, err error) {
	body, err := json.Marshal(turn)
	if err != nil {
		return 0, false, fmt.Errorf("store: marshal turn: %w", err)
	}
	if err := t.flush(ctx); err != nil {
		return 0, false, err
	}
	// One round trip either way: the insert, or the existing row's seq.
	err = t.queryRow(ctx, `WITH ins AS (
			INSERT INTO turns (channel, event_id, conversation, sender, body, received_at)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (channel, event_id) DO NOTHING RETURNING seq)
		SELECT seq, false FROM ins
		UNION ALL SELECT seq, true FROM turns WHERE channel = $1 AND event_id = $2 AND NOT EXISTS (SELECT 1 FROM ins)`,
		turn.Channel, turn.EventID, turn.Conversation, turn.Sender, body, t.now()).Scan(&seq, &dup)
	if errors.Is(err, pgx.ErrNoRows) {
		// A concurrent transaction inserted the same event after this
		// statement's snapshot: read it with a fresh one.
		dup = true
		err = t.queryRow(ctx, `SELECT seq FROM turns WHERE channel = $1 AND event_id = $2`, turn.Channel, turn.EventID).Scan(&seq)
	}
	if err != nil {
		return 0, false, fmt.Errorf("store: insert turn: %w", err)
	}
	return seq, dup, nil
}

// FinishTurn marks a turn processed (status "done" or "failed").
func (t *Tx) FinishTurn(ctx context.Context, seq int64, status, errText string) error {
	t.later("finish turn", `UPDATE turns SET status = $2, processed_at = $3, error = NULLIF($4, '') WHERE seq = $1 AND status = 'pending'`,
		seq, status, t.now(), errText)
	return nil
}

// InsertApproval stores a new approval request.
func (t *Tx) InsertApproval(ctx context.Context, a core.ApprovalRequest) error {
	var turnSeq *int64
	if a.TurnSeq > 0 {
		turnSeq = &a.TurnSeq
	}
	t.later("insert approval", `INSERT INTO approvals (id, channel, conversation, requester, turn_seq, action_canonical, action_hash,
		intent, rationale, risk, approvers, status, created_at, expires_at)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14)`,
		a.ID, a.Channel, a.Conversation, a.Requester, turnSeq, a.ActionCanonical, a.ActionHash,
		a.Intent, a.Rationale, a.Risk, a.Approvers, a.Status, a.CreatedAt, a.ExpiresAt)
	return nil
}

// GetApproval reads an approval inside the transaction, locking the row so
// concurrent decisions serialise on it.
func (t *Tx) GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error) {
	return scanApproval(t.queryRow(ctx, approvalSelect+" WHERE id = $1 FOR UPDATE", id))
}

// TransitionApproval moves an approval from one of from to to, recording
// the decider and (for approvals) the token. ok=false means it was no longer
// in any of from: "already decided" is an answer, not an error.
func (t *Tx) TransitionApproval(ctx context.Context, id core.ApprovalID, from []core.ApprovalStatus, to core.ApprovalStatus, by core.IdentityID, token []byte) (bool, error) {
	fs := make([]string, len(from))
	for i, f := range from {
		fs[i] = string(f)
	}
	tag, err := t.exec(ctx, `UPDATE approvals SET status = $3, decided_by = NULLIF($4, ''), decided_at = $5, token = COALESCE($6, token)
		WHERE id = $1 AND status = ANY($2)`, id, fs, to, by, t.now(), token)
	if err != nil {
		return false, fmt.Errorf("store: transition approval %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ConsumeNonce records a token's nonce. ok=false means it was consumed
// before: a replay.
func (t *Tx) ConsumeNonce(ctx context.Context, nonce []byte, tokenID string, id core.ApprovalID) (bool, error) {
	tag, err := t.exec(ctx, `INSERT INTO token_nonces (nonce, token_id, approval_id, consumed_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT DO NOTHING`, nonce, tokenID, id, t.now())
	if err != nil {
		return false, fmt.Errorf("store: consume nonce: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// InsertExecution queues the execution of an approved action.
func (t *Tx) InsertExecution(ctx context.Context, id core.ApprovalID) error {
	t.later("insert execution", `INSERT INTO executions (approval_id, status, created_at) VALUES ($1, 'queued', $2)`, id, t.now())
	return nil
}

// ExecUpdate carries the fields a transition sets (nil = unchanged).
type ExecUpdate struct {
	Result  *core.ExecRecord
	Report  json.RawMessage
	Reason  string
	Started bool
	Done    bool
}

// TransitionExecution is compare-and-swap on an execution's status.
func (t *Tx) TransitionExecution(ctx context.Context, id core.ApprovalID, from, to core.ExecStatus, u ExecUpdate) (bool, error) {
	var result []byte
	if u.Result != nil {
		var err error
		if result, err = json.Marshal(u.Result); err != nil {
			return false, fmt.Errorf("store: marshal result: %w", err)
		}
	}
	var report []byte
	if len(u.Report) > 0 {
		report = u.Report
	}
	now := t.now()
	var started, finished *time.Time
	if u.Started {
		started = &now
	}
	if u.Done {
		finished = &now
	}
	tag, err := t.exec(ctx, `UPDATE executions SET status = $3,
		result = COALESCE($4, result), report = COALESCE($5, report), reason = COALESCE(NULLIF($6, ''), reason),
		started_at = COALESCE($7, started_at), finished_at = COALESCE($8, finished_at)
		WHERE approval_id = $1 AND status = $2`, id, from, to, result, report, u.Reason, started, finished)
	if err != nil {
		return false, fmt.Errorf("store: transition execution %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// InsertOutput stores output too long for chat under ref.
func (t *Tx) InsertOutput(ctx context.Context, ref string, id core.ApprovalID, content string) error {
	t.later("insert output", `INSERT INTO outputs (ref, approval_id, content, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (ref) DO NOTHING`, ref, id, content, t.now())
	return nil
}

// Enqueue adds an outbound delivery.
func (t *Tx) Enqueue(ctx context.Context, ch core.ChannelName, op core.OutboxOp, key string, m core.OutMessage) error {
	payload, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("store: marshal outbound message: %w", err)
	}
	t.later("enqueue", `INSERT INTO outbox (channel, conversation, op, message_key, payload, created_at, next_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6)`, ch, m.Conversation, op, key, payload, t.now())
	return nil
}

// InsertPairingCode stores the hash of a one-time pairing code.
func (t *Tx) InsertPairingCode(ctx context.Context, codeHash []byte, role, platform string, expires time.Time) error {
	t.later("insert pairing code", `INSERT INTO pairing_codes (code_hash, role, platform, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)`,
		codeHash, role, platform, t.now(), expires)
	return nil
}

// UsePairingCode consumes a code for identity. ok=false: unknown, used,
// expired, or for another platform.
func (t *Tx) UsePairingCode(ctx context.Context, codeHash []byte, identity core.IdentityID) (role string, ok bool, err error) {
	err = t.queryRow(ctx, `UPDATE pairing_codes SET used_at = $2, used_by = $3
		WHERE code_hash = $1 AND used_at IS NULL AND expires_at > $2 AND (platform = '' OR platform = $4)
		RETURNING role`, codeHash, t.now(), identity, identity.Platform()).Scan(&role)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("store: use pairing code: %w", err)
	}
	return role, true, nil
}

// UpsertBinding stores a signed identity binding.
func (t *Tx) UpsertBinding(ctx context.Context, identity core.IdentityID, role string, record, sig []byte) error {
	t.later("upsert binding", `INSERT INTO identity_bindings (identity, role, record, signature, created_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (identity) DO UPDATE SET role = EXCLUDED.role, record = EXCLUDED.record, signature = EXCLUDED.signature, created_at = EXCLUDED.created_at`,
		identity, role, record, sig, t.now())
	return nil
}

// exec runs a statement whose result is read, after the queued ones.
func (t *Tx) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.flush(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.tx.Exec(ctx, sql, args...)
}

// queryRow runs a query after the queued statements.
func (t *Tx) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.flush(ctx); err != nil {
		return errRow{err}
	}
	return t.tx.QueryRow(ctx, sql, args...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
