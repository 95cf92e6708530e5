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
	"github.com/silas-gateway/silas/core/tracing"
)

const approvalSelect = `SELECT id, channel, conversation, requester, COALESCE(turn_seq, 0), action_canonical, action_hash,
	intent, rationale, risk, approvers, status, created_at, expires_at, COALESCE(decided_by, ''), decided_at, token, request_sig, COALESCE(task_id, ''), traceparent, preview, COALESCE(tap_traceparent, '') FROM approvals`

func scanApproval(row pgx.Row) (core.ApprovalRequest, error) {
	var a core.ApprovalRequest
	var risk, status string
	var decidedAt *time.Time
	err := row.Scan(&a.ID, &a.Channel, &a.Conversation, &a.Requester, &a.TurnSeq, &a.ActionCanonical, &a.ActionHash,
		&a.Intent, &a.Rationale, &risk, &a.Approvers, &status, &a.CreatedAt, &a.ExpiresAt, &a.DecidedBy, &decidedAt, &a.Token, &a.Signature, &a.Task, &a.Traceparent, &a.Preview, &a.TapTraceparent)
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

// QueueApproval stores a new approval request.
func (t *Tx) QueueApproval(a core.ApprovalRequest) {
	var turnSeq *int64
	if a.TurnSeq > 0 {
		turnSeq = &a.TurnSeq
	}
	t.later("insert approval", `INSERT INTO approvals (id, channel, conversation, requester, turn_seq, action_canonical, action_hash,
		intent, rationale, risk, approvers, status, created_at, expires_at, request_sig, task_id, traceparent, preview)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,NULLIF($16, ''),$17,$18)`,
		a.ID, a.Channel, a.Conversation, a.Requester, turnSeq, a.ActionCanonical, a.ActionHash,
		a.Intent, a.Rationale, a.Risk, a.Approvers, a.Status, a.CreatedAt, a.ExpiresAt, a.Signature, a.Task, a.Traceparent, a.Preview)
	t.seen(a.ID)
}

// GetApproval reads an approval inside the transaction, locking the row so
// concurrent decisions serialise on it.
func (t *Tx) GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error) {
	a, err := scanApproval(t.queryRow(ctx, approvalSelect+" WHERE id = $1 FOR UPDATE", id))
	if err == nil {
		t.seen(a.ID)
	}
	return a, err
}

// TransitionApproval moves an approval from one of from to to, recording
// the decider and (for approvals) the token. ok=false means it was no longer
// in any of from: "already decided" is an answer, not an error. A
// transition that records a token (an approval) also keeps the traceparent
// of the decision's span in ctx (tracing on), for its execution to link to
// wherever it runs: the same statement, no round trip of its own.
func (t *Tx) TransitionApproval(ctx context.Context, id core.ApprovalID, from []core.ApprovalStatus, to core.ApprovalStatus, by core.IdentityID, token []byte) (bool, error) {
	fs := make([]string, len(from))
	for i, f := range from {
		fs[i] = string(f)
	}
	var tap string
	if token != nil {
		tap = tracing.Traceparent(ctx)
	}
	tag, err := t.exec(ctx, `UPDATE approvals SET status = $3, decided_by = NULLIF($4, ''), decided_at = $5, token = COALESCE($6, token),
		tap_traceparent = COALESCE(NULLIF($7, ''), tap_traceparent)
		WHERE id = $1 AND status = ANY($2)`, id, fs, to, by, t.now(), token, tap)
	if err != nil {
		return false, fmt.Errorf("store: transition approval %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Approve is TransitionApproval to approved (by, token) and, only when that
// applied, ConsumeNonce of the token's nonce, in one statement: a tap's
// decision in one round trip instead of two. ok=false: the request was no
// longer in any of from (nothing written); fresh=false: the nonce was
// consumed before, a replay (the caller rolls the transaction back).
//
// Speculating (Speculate, speculate.go), it answers ok and fresh, with no
// start recorded, without waiting: the statement is queued with a guard
// that fails the transaction otherwise, and what the caller queues on that
// answer commits only if it held. The nonce is still consumed under its
// unique key in this transaction, with the decision, or nothing commits.
func (t *Tx) Approve(ctx context.Context, id core.ApprovalID, from []core.ApprovalStatus, by core.IdentityID, token, nonce []byte, tokenID string) (ok, fresh bool, err error) {
	fs := make([]string, len(from))
	for i, f := range from {
		fs[i] = string(f)
	}
	args := []any{id, fs, core.ApprovalApproved, by, t.now(), token, tracing.Traceparent(ctx), nonce, tokenID}
	if t.Speculate() {
		// Queued, guarded (speculate.go): it fails the transaction unless
		// the approval applied, the nonce was fresh and no start was
		// recorded — the answer assumed here (ok, fresh; Decided: not
		// started). Anything else runs again without speculation and
		// gets today's answer below. What the caller queues next (the
		// execution, its claim, the card, the audit rows) and COMMIT so
		// go in this statement's round trip.
		t.guard("approve", approveSQL+`
			SELECT 1 / (CASE WHEN (SELECT count(*) FROM u) = 1 AND (SELECT count(*) FROM n) = 1 AND NOT `+startedSQL+` THEN 1 ELSE 0 END)`, args...)
		t.approved(id, nonce, tokenID, false)
		return true, true, nil
	}
	var applied, consumed int
	var started bool
	// The last column is the gate's "no start of this execution recorded"
	// (as RecordedDecision reads it), for a claim with the decision
	// (Decided): an index probe in the same statement, no round trip.
	err = t.queryRow(ctx, approveSQL+`
		SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM n), `+startedSQL, args...).Scan(&applied, &consumed, &started)
	if err != nil {
		return false, false, fmt.Errorf("store: approve %s: %w", id, err)
	}
	if applied == 1 && consumed == 1 {
		t.approved(id, nonce, tokenID, started)
	}
	return applied == 1, consumed == 1, nil
}

// approveSQL is Approve's statement up to its SELECT: the approval's
// compare-and-swap (u) and, only when it applied, the nonce's insert (n).
const approveSQL = `WITH u AS (UPDATE approvals SET status = $3, decided_by = NULLIF($4, ''), decided_at = $5, token = COALESCE($6, token),
		tap_traceparent = COALESCE(NULLIF($7, ''), tap_traceparent)
		WHERE id = $1 AND status = ANY($2) RETURNING id),
	n AS (INSERT INTO token_nonces (nonce, token_id, approval_id, consumed_at) SELECT $8, $9, id, $5 FROM u
		ON CONFLICT DO NOTHING RETURNING 1)`

// startedSQL: the audit log records a start of approval $1's execution.
const startedSQL = `EXISTS (SELECT 1 FROM audit_log s WHERE s.kind = '` + string(audit.KindExecutionStarted) + `' AND s.data->>'approval' = $1)`

// approved records what Approve wrote (see Decided).
func (t *Tx) approved(id core.ApprovalID, nonce []byte, tokenID string, started bool) {
	if t.decided == nil {
		t.decided = map[core.ApprovalID]decided{}
	}
	t.decided[id] = decided{nonce: nonce, tokenID: tokenID, started: started}
}

// decided is an approval this transaction approved (Approve).
type decided struct {
	nonce   []byte
	tokenID string
	started bool
}

// Decided is what this transaction recorded of its approval of id
// (Approve): the nonce it consumed for id under tokenID, and whether the
// audit log already recorded a start of id's execution when it did. ok is
// false when no approval of id consumed a nonce in this transaction. It
// is the recorded decision the execution gate reads (RecordedDecision),
// as this transaction writes it: what a claim with the decision checks
// (core/execute ClaimWithDecision).
func (t *Tx) Decided(id core.ApprovalID) (nonce []byte, tokenID string, startedBefore, ok bool) {
	d, ok := t.decided[id]
	return d.nonce, d.tokenID, d.started, ok
}

// GetApprovalRoute is GetApproval and ApprovalRoute of the same request
// into conv, in one round trip (the row is locked by the first statement
// before the second reads). routeErr is ApprovalRoute's error
// (core.ErrNotFound: not routed there); err is GetApproval's.
//
// A tap stored inline sent this read with its turn's insert
// (InsertInlineTurn): the first call for that request and conversation
// is answered from it, without a round trip of its own, when nothing was
// sent or queued in this transaction since (see takePrefetched).
func (t *Tx) GetApprovalRoute(ctx context.Context, id core.ApprovalID, conv core.ConversationID) (a core.ApprovalRequest, r core.ApprovalRoute, routeErr, err error) {
	if p := t.takePrefetched(id, conv); p != nil {
		return p.answer(t)
	}
	p := &approvalRoute{id: id, conv: conv}
	if err := t.send(ctx, t.approvalRouteExtras(p)); err != nil {
		return a, r, nil, err
	}
	return p.answer(t)
}

// approvalRoute is GetApprovalRoute's read of request id and its route
// into conv: what its two statements returned, and the round trip
// (Tx.trips) that carried them.
type approvalRoute struct {
	id             core.ApprovalID
	conv           core.ConversationID
	a              core.ApprovalRequest
	r              core.ApprovalRoute
	aErr, routeErr error
	trip           int
}

// approvalRouteExtras are the statements of p's read, to be sent after
// everything queued (the lock after them, as any read now).
func (t *Tx) approvalRouteExtras(p *approvalRoute) []extra {
	return []extra{
		{"lock approval", func(b *pgx.Batch) {
			p.trip = t.trips
			b.Queue(approvalSelect+" WHERE id = $1 FOR UPDATE", p.id).QueryRow(func(row pgx.Row) error {
				p.a, p.aErr = scanApproval(row)
				return nil
			})
		}},
		{"approval route", func(b *pgx.Batch) {
			b.Queue(routeSelect+` WHERE approval_id = $1 AND conversation = $2`, p.id, p.conv).QueryRow(func(row pgx.Row) error {
				p.r, p.routeErr = scanRoute(row)
				p.routeErr = notFound(p.routeErr)
				return nil
			})
		}},
	}
}

// answer is GetApprovalRoute's answer from p, read.
func (p *approvalRoute) answer(t *Tx) (core.ApprovalRequest, core.ApprovalRoute, error, error) {
	if p.aErr != nil {
		return p.a, p.r, nil, p.aErr
	}
	t.seen(p.a.ID)
	return p.a, p.r, p.routeErr, nil
}

// takePrefetched returns the read InsertInlineTurn sent ahead for request
// id into conv, when GetApprovalRoute may answer from it: what a read sent
// now would return. The request's row was locked by that read, so no
// other transaction changed it since; this one sent nothing since (the
// read was the last statement of the last round trip) and has nothing
// queued that a read now would send first — so nothing of this
// transaction changed it either. (A route is not locked by the read: one
// committed meanwhile by another transaction is a race either read could
// lose, as between the two statements of one read.) A prefetch answers
// at most once, and only the first GetApprovalRoute after it: any call
// drops it, so a later read of the same request is a read.
func (t *Tx) takePrefetched(id core.ApprovalID, conv core.ConversationID) *approvalRoute {
	p := t.prefetched
	t.prefetched = nil
	if p == nil || p.id != id || p.conv != conv || p.trip != t.trips || t.pending() {
		return nil
	}
	return p
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

// RecordedDecision reads, in one round trip, what storage holds of the
// decision that consumed the token (nonce, tokenID) of approval id, and
// whether the audit log records a start of its execution. The kinds are
// literals in the statement (not parameters) so the planner can use the
// partial indexes of migration 00006.
func (t *Tx) RecordedDecision(ctx context.Context, id core.ApprovalID, nonce []byte, tokenID string) (core.Decision, error) {
	var sc decisionScan
	if err := t.queryRow(ctx, recordedDecisionSQL, nonce, tokenID, id).Scan(sc.dest()...); err != nil {
		return core.Decision{}, fmt.Errorf("store: recorded decision of %s: %w", id, err)
	}
	return sc.decision()
}

// GetApprovalDecision is GetApproval followed by RecordedDecision for the
// token (nonce, tokenID) the caller expects on the row, sent together in
// one round trip: the row is locked by the first statement before the
// second reads, as when they are two calls. The caller compares the token
// of the row it got with the one it expected; the decision read is for
// that token only (when they differ, it calls RecordedDecision with the
// row's).
func (t *Tx) GetApprovalDecision(ctx context.Context, id core.ApprovalID, nonce []byte, tokenID string) (core.ApprovalRequest, core.Decision, error) {
	var a core.ApprovalRequest
	var aErr, dErr error
	var sc decisionScan
	err := t.send(ctx, []extra{
		{"lock approval", func(b *pgx.Batch) {
			b.Queue(approvalSelect+" WHERE id = $1 FOR UPDATE", id).QueryRow(func(row pgx.Row) error {
				a, aErr = scanApproval(row)
				return nil
			})
		}},
		{"recorded decision", func(b *pgx.Batch) {
			b.Queue(recordedDecisionSQL, nonce, tokenID, id).QueryRow(func(row pgx.Row) error {
				dErr = row.Scan(sc.dest()...)
				return nil
			})
		}},
	})
	if err != nil {
		return a, core.Decision{}, err
	}
	if aErr != nil {
		return a, core.Decision{}, aErr
	}
	t.seen(a.ID)
	if dErr != nil {
		return a, core.Decision{}, fmt.Errorf("store: recorded decision of %s: %w", id, dErr)
	}
	d, err := sc.decision()
	return a, d, err
}

const recordedDecisionSQL = `SELECT n.approval_id, n.token_id,
			l.seq, l.at, l.kind, l.actor, l.conversation, l.data::text, l.prev_hash, l.hash,
			(SELECT p.hash FROM audit_log p WHERE p.seq = l.seq - 1),
			(SELECT x.prev_hash FROM audit_log x WHERE x.seq = l.seq + 1),
			EXISTS (SELECT 1 FROM audit_log s WHERE s.kind = '` + string(audit.KindExecutionStarted) + `' AND s.data->>'approval' = $3)
		FROM (SELECT 1) AS one
		LEFT JOIN token_nonces n ON n.nonce = $1
		LEFT JOIN LATERAL (SELECT * FROM audit_log WHERE kind = '` + string(audit.KindTokenConsumed) + `' AND data->>'token_id' = $2 AND data->>'approval' = $3
			ORDER BY seq LIMIT 1) l ON true`

// decisionScan is the row of recordedDecisionSQL.
type decisionScan struct {
	d                                    core.Decision
	nApproval, nToken, kind, actor, conv *string
	data                                 *string
	seq                                  *int64
	at                                   *time.Time
	prevHash, hash                       []byte
}

func (s *decisionScan) dest() []any {
	return []any{&s.nApproval, &s.nToken, &s.seq, &s.at, &s.kind, &s.actor, &s.conv, &s.data, &s.prevHash, &s.hash, &s.d.PrevHash, &s.d.NextPrevHash, &s.d.Started}
}

func (s *decisionScan) decision() (core.Decision, error) {
	d := s.d
	if s.nApproval != nil {
		a := core.ApprovalID(*s.nApproval)
		d.NonceApproval, d.NonceTokenID = &a, s.nToken
	}
	if s.seq != nil {
		r := audit.Row{Seq: *s.seq, At: *s.at, Entry: audit.Entry{Kind: audit.Kind(*s.kind), Actor: *s.actor, Conversation: *s.conv},
			DataJSON: []byte(*s.data), PrevHash: s.prevHash, Hash: s.hash}
		if err := json.Unmarshal(r.DataJSON, &r.Entry.Data); err != nil {
			return core.Decision{}, fmt.Errorf("store: decode audit row %d: %w", r.Seq, err)
		}
		d.Entry = &r
	}
	return d, nil
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
