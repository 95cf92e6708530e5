package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// Tx is the transaction an Op runs in. Its methods are the only writes.
//
// Two kinds of method, told apart by name:
//
//   - Queue… methods (QueueTurn, QueueMessage, QueueApproval, …) queue a
//     statement whose result nobody reads; they take no context and return
//     at once. Queued statements are sent together in one pipelined round
//     trip, before the next statement that runs now and before commit. An
//     error in one therefore surfaces a little later — still inside the
//     same batch, which then fails and is retried op by op, so it is
//     attributed to the right op.
//   - Every other method runs its statement now (after everything queued,
//     in the same round trip) and returns its result.
//
// Foreign keys fix an order: a row that references another may only be
// queued once its parent is in this transaction's view — inserted earlier
// in it (QueueApproval) or read in it (GetApproval, which locks the row).
// QueueExecution and QueueOutput check this and refuse with ErrOrder
// instead of letting the database fail the whole batch. (A turn's seq, the
// other referenced key, is only known once its insert was sent, so an
// approval naming it cannot precede it.)
//
// The transaction itself is driven by hand on one pooled connection, so
// that BEGIN travels with the first statements and COMMIT with the audit
// rows: a batch of inline turns costs two round trips (BEGIN, the turns,
// the chain lock and head; then the outbox rows, the audit rows and
// COMMIT) instead of one per statement.
type Tx struct {
	conn   *pgxpool.Conn
	begun  bool // BEGIN was sent
	now    func() time.Time
	queued *pgx.Batch
	labels []string

	// Rows of the hot statements, gathered across all ops of the batch and
	// sent as one multi-row statement each at the next flush: PostgreSQL's
	// per-statement cost then does not grow with the number of turns.
	turns     []queuedTurn
	enqueues  []queuedJob
	finishes  []queuedFinish
	delivered []queuedDelivered
	// River jobs queued by QueueJob, inserted before COMMIT through river.
	jobs  []river.InsertManyParams
	river jobInserter
	// approvals this transaction inserted or read: the parents its
	// executions and outputs may reference (see ErrOrder).
	approvals map[core.ApprovalID]bool
	// finally runs after the batch's statements were sent (see Finally).
	finally []func() ([]audit.Entry, error)
}

type queuedTurn struct {
	turn   core.Turn
	body   string
	status core.TurnStatus
	then   func(seq int64, dup bool)
}

type queuedJob struct {
	ch      core.ChannelName
	conv    core.ConversationID
	op      core.OutboxOp
	key     string
	payload string
	then    func(id int64)
}

type queuedFinish struct {
	seq    int64
	status core.TurnStatus
	err    string
}

type queuedDelivered struct {
	id     int64
	status core.OutboxStatus
}

// Finally registers f to run once the statements queued so far (by every
// op of the batch) were sent, so their callbacks have fired. The entries it
// returns are appended to the audit log with the batch; it may queue more
// statements. It runs again if the batch is retried.
func (t *Tx) Finally(f func() ([]audit.Entry, error)) {
	t.finally = append(t.finally, f)
}

// runFinally runs the registered Finally functions (and any they add).
func (t *Tx) runFinally(ctx context.Context) ([]audit.Entry, error) {
	var out []audit.Entry
	for len(t.finally) > 0 {
		if err := t.flush(ctx); err != nil {
			return nil, err
		}
		fs := t.finally
		t.finally = nil
		for _, f := range fs {
			e, err := f()
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
	}
	return out, nil
}

// ErrOrder is returned by a Queue… method asked to queue a row before the
// row it references is in the transaction's view (see Tx). It is a
// programming error, reported where it is made rather than as a foreign
// key violation that fails the whole batch.
var ErrOrder = errors.New("store: a row was queued before the row it references")

// seen records that approval id is in this transaction's view.
func (t *Tx) seen(id core.ApprovalID) {
	if t.approvals == nil {
		t.approvals = map[core.ApprovalID]bool{}
	}
	t.approvals[id] = true
}

// parent checks the statement-order rule for a row referencing approval id.
func (t *Tx) parent(what string, id core.ApprovalID) error {
	if !t.approvals[id] {
		return fmt.Errorf("%w: %s of approval %s (insert or read the approval first in this transaction)", ErrOrder, what, id)
	}
	return nil
}

// later queues a statement whose result is not needed.
func (t *Tx) later(label, sql string, args ...any) {
	if t.queued == nil {
		t.queued = &pgx.Batch{}
	}
	t.queued.Queue(sql, args...)
	t.labels = append(t.labels, label)
}

// flush sends queued statements, then the gathered multi-row ones, in one
// round trip. Nothing queued depends on a multi-row statement of the same
// flush (they are inserts and updates of rows no queued statement reads).
func (t *Tx) flush(ctx context.Context) error { return t.send(ctx, nil) }

// extra is a statement sent after everything queued, in the same round
// trip (a read, the chain lock, COMMIT).
type extra struct {
	label string
	queue func(b *pgx.Batch)
}

// send sends BEGIN (the first time), the queued statements, the gathered
// multi-row ones and then extras, in one round trip, and reads every
// result in order (running callbacks).
func (t *Tx) send(ctx context.Context, extras []extra) error {
	if len(extras) == 0 && (t.queued == nil || t.queued.Len() == 0) && len(t.turns) == 0 && len(t.enqueues) == 0 && len(t.finishes) == 0 && len(t.delivered) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	var labels []string
	if !t.begun {
		b.Queue("BEGIN")
		labels = append(labels, "begin")
		t.begun = true
	}
	if t.queued != nil {
		b.QueuedQueries = append(b.QueuedQueries, t.queued.QueuedQueries...)
		labels = append(labels, t.labels...)
	}
	t.queued, t.labels = nil, nil
	turns := t.turns
	t.turns = nil
	if len(turns) > 0 {
		queueTurns(b, turns, t.now())
		labels = append(labels, "insert turns")
	}
	if len(t.enqueues) > 0 {
		queueJobs(b, t.enqueues, t.now())
		labels = append(labels, "enqueue")
		t.enqueues = nil
	}
	if len(t.finishes) > 0 {
		fs := t.finishes
		t.finishes = nil
		seqs, sts, errs := make([]int64, len(fs)), make([]string, len(fs)), make([]string, len(fs))
		for i, f := range fs {
			seqs[i], sts[i], errs[i] = f.seq, string(f.status), f.err
		}
		b.Queue(`UPDATE turns SET status = u.status, processed_at = $2, error = NULLIF(u.err, '')
			FROM unnest($1::bigint[], $3::text[], $4::text[]) AS u(seq, status, err)
			WHERE turns.seq = u.seq AND turns.status = 'pending'`, seqs, t.now(), sts, errs)
		labels = append(labels, "finish turns")
	}
	if len(t.delivered) > 0 {
		ds := t.delivered
		t.delivered = nil
		ids, sts := make([]int64, len(ds)), make([]string, len(ds))
		for i, d := range ds {
			ids[i], sts[i] = d.id, string(d.status)
		}
		b.Queue(`UPDATE outbox SET status = u.status, delivered_at = $2, attempts = attempts + 1
			FROM unnest($1::bigint[], $3::text[]) AS u(id, status)
			WHERE outbox.id = u.id AND outbox.status = 'pending'`, ids, t.now(), sts)
		labels = append(labels, "outbox delivered")
	}
	for _, x := range extras {
		x.queue(b)
		labels = append(labels, x.label)
	}
	br := t.conn.SendBatch(ctx, b)
	for i, l := range labels {
		// Results are read in order; a statement with a callback gets it
		// here (Close would run it too, but without the label).
		var err error
		if fn := b.QueuedQueries[i].Fn; fn != nil {
			err = fn(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			br.Close()
			return fmt.Errorf("store: %s: %w", l, err)
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	// Events that were already stored (a redelivery, a repeat within this
	// batch, or a concurrent transaction that stored the same event first)
	// need their seq: one more round trip, with a fresh snapshot, only then.
	var chans, evs []string
	for _, q := range turns {
		if q.then != nil {
			chans, evs = append(chans, string(q.turn.Channel)), append(evs, q.turn.EventID)
		}
	}
	if len(chans) == 0 {
		return nil
	}
	rows, err := t.conn.Query(ctx, `SELECT channel, event_id, seq FROM turns
		WHERE (channel, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, chans, evs)
	if err != nil {
		return fmt.Errorf("store: find stored turns: %w", err)
	}
	found := map[[2]string]int64{}
	for rows.Next() {
		var ch, ev string
		var seq int64
		if err := rows.Scan(&ch, &ev, &seq); err != nil {
			rows.Close()
			return fmt.Errorf("store: find stored turns: %w", err)
		}
		found[[2]string{ch, ev}] = seq
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: find stored turns: %w", err)
	}
	for i := range turns {
		if turns[i].then == nil {
			continue
		}
		seq, ok := found[[2]string{string(turns[i].turn.Channel), turns[i].turn.EventID}]
		if !ok {
			return fmt.Errorf("store: insert turn %s/%s: neither stored nor found", turns[i].turn.Channel, turns[i].turn.EventID)
		}
		turns[i].then(seq, true)
		turns[i].then = nil
	}
	return nil
}

// queueTurns adds one INSERT for all queued turns. Each turn's then gets
// its seq and whether the event was stored before (dup); then is set to nil
// once called, so flush can tell that every turn was answered.
func queueTurns(b *pgx.Batch, turns []queuedTurn, now time.Time) {
	n := len(turns)
	chans, evs, convs, senders, bodies, sts := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, q := range turns {
		chans[i], evs[i], convs[i], senders[i], bodies[i], sts[i] = string(q.turn.Channel), q.turn.EventID, string(q.turn.Conversation), string(q.turn.Sender), q.body, string(q.status)
	}
	// Rows that conflict (stored before, or twice in this batch) come back
	// from the second SELECT with their existing seq; ON CONFLICT DO NOTHING
	// skips a key repeated within the statement, so the first op queued
	// with it is the one that stored it.
	b.Queue(`WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::text[]) WITH ORDINALITY
				AS u(channel, event_id, conversation, sender, body, status, n)),
			ins AS (INSERT INTO turns (channel, event_id, conversation, sender, body, status, received_at, processed_at)
				SELECT channel, event_id, conversation, sender, body, status, $7, CASE WHEN status = 'pending' THEN NULL ELSE $7::timestamptz END
				FROM u ORDER BY n
				ON CONFLICT (channel, event_id) DO NOTHING RETURNING channel, event_id, seq)
		SELECT channel, event_id, seq FROM ins`, chans, evs, convs, senders, bodies, sts, now).Query(func(rows pgx.Rows) error {
		byKey := make(map[[2]string]int64, n)
		for rows.Next() {
			var ch, ev string
			var seq int64
			if err := rows.Scan(&ch, &ev, &seq); err != nil {
				return err
			}
			byKey[[2]string{ch, ev}] = seq
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for i := range turns {
			k := [2]string{string(turns[i].turn.Channel), turns[i].turn.EventID}
			if seq, ok := byKey[k]; ok {
				delete(byKey, k) // a repeat of the key in this batch is a duplicate
				turns[i].then(seq, false)
				turns[i].then = nil
			}
		}
		return nil
	})
}

// queueJobs adds one INSERT for all queued outbox jobs, in queue order (ids
// ascend in that order, which is the delivery order).
func queueJobs(b *pgx.Batch, jobs []queuedJob, now time.Time) {
	n := len(jobs)
	chans, convs, ops, keys, payloads := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, j := range jobs {
		chans[i], convs[i], ops[i], keys[i], payloads[i] = string(j.ch), string(j.conv), string(j.op), j.key, j.payload
	}
	b.Queue(`INSERT INTO outbox (channel, conversation, op, message_key, payload, created_at, next_at)
		SELECT channel, conversation, op, message_key, payload, $6, $6
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[]) WITH ORDINALITY AS u(channel, conversation, op, message_key, payload, n)
		ORDER BY n RETURNING id`, chans, convs, ops, keys, payloads, now).Query(func(rows pgx.Rows) error {
		ids := make([]int64, 0, n)
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ids) != n {
			return fmt.Errorf("%d rows inserted for %d jobs", len(ids), n)
		}
		// One statement draws its ids in row order: ascending ids are the
		// jobs in queue order.
		slices.Sort(ids)
		for i, j := range jobs {
			if j.then != nil {
				j.then(ids[i])
			}
		}
		return nil
	})
}

// Now is the store's clock.
func (t *Tx) Now() time.Time { return t.now() }

// InsertTurn stores a turn unless (channel, event id) exists. dup reports a
// redelivery; seq is the turn's sequence either way. It is QueueTurn sent
// at once, for callers that need the answer before going on.
func (t *Tx) InsertTurn(ctx context.Context, turn core.Turn) (seq int64, dup bool, err error) {
	if err := t.QueueTurn(turn, core.TurnPending, func(s int64, d bool) { seq, dup = s, d }); err != nil {
		return 0, false, err
	}
	if err := t.flush(ctx); err != nil {
		return 0, false, err
	}
	return seq, dup, nil
}

// QueueFinishTurn marks a pending turn processed (done or failed).
func (t *Tx) QueueFinishTurn(seq int64, status core.TurnStatus, errText string) {
	t.finishes = append(t.finishes, queuedFinish{seq: seq, status: status, err: errText})
}

// QueueTurn stores a turn unless (channel, event id) exists, like
// InsertTurn, but gathered with the other turns of the batch into one
// statement: then receives the seq (and dup for a redelivery) when the
// batch's statements are sent, before any Finally function runs. status is
// TurnPending for a turn still to be processed, or TurnDone for one whose
// outcome commits in the same transaction.
func (t *Tx) QueueTurn(turn core.Turn, status core.TurnStatus, then func(seq int64, dup bool)) error {
	body, err := json.Marshal(turn)
	if err != nil {
		return fmt.Errorf("store: marshal turn: %w", err)
	}
	t.turns = append(t.turns, queuedTurn{turn: storableTurn(turn), body: string(jsonbSafe(body)), status: status, then: then})
	return nil
}

// QueueApproval stores a new approval request.
func (t *Tx) QueueApproval(a core.ApprovalRequest) {
	var turnSeq *int64
	if a.TurnSeq > 0 {
		turnSeq = &a.TurnSeq
	}
	t.later("insert approval", `INSERT INTO approvals (id, channel, conversation, requester, turn_seq, action_canonical, action_hash,
		intent, rationale, risk, approvers, status, created_at, expires_at, request_sig)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15)`,
		a.ID, a.Channel, a.Conversation, a.Requester, turnSeq, a.ActionCanonical, a.ActionHash,
		a.Intent, a.Rationale, a.Risk, a.Approvers, a.Status, a.CreatedAt, a.ExpiresAt, a.Signature)
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

// Decision is what storage holds of the decision that consumed a token:
// the token_nonces row of its nonce and the first "token.consumed" audit
// entry naming the approval and the token id, with the hashes of the
// entries either side of it (to check that it is linked into the chain).
// Nil fields: not found.
type Decision struct {
	// NonceApproval and NonceTokenID are the token_nonces row for the nonce.
	NonceApproval *core.ApprovalID
	NonceTokenID  *string
	// Entry is the audit entry; PrevHash is the hash of the entry before it
	// (nil for seq 1) and NextPrevHash the prev_hash of the entry after it
	// (nil when it is the newest).
	Entry        *audit.Row
	PrevHash     []byte
	NextPrevHash []byte
	// Started: the audit log has an "execution.started" entry for the
	// approval — its execution began before, whatever its row says now.
	Started bool
}

// RecordedDecision reads, in one round trip, what storage holds of the
// decision that consumed the token (nonce, tokenID) of approval id, and
// whether the audit log records a start of its execution. The kinds are
// literals in the statement (not parameters) so the planner can use the
// partial indexes of migration 00006.
func (t *Tx) RecordedDecision(ctx context.Context, id core.ApprovalID, nonce []byte, tokenID string) (Decision, error) {
	var d Decision
	var nApproval, nToken, kind, actor, conv, data *string
	var seq *int64
	var at *time.Time
	var prevHash, hash []byte
	err := t.queryRow(ctx, `SELECT n.approval_id, n.token_id,
			l.seq, l.at, l.kind, l.actor, l.conversation, l.data::text, l.prev_hash, l.hash,
			(SELECT p.hash FROM audit_log p WHERE p.seq = l.seq - 1),
			(SELECT x.prev_hash FROM audit_log x WHERE x.seq = l.seq + 1),
			EXISTS (SELECT 1 FROM audit_log s WHERE s.kind = '`+string(audit.KindExecutionStarted)+`' AND s.data->>'approval' = $3)
		FROM (SELECT 1) AS one
		LEFT JOIN token_nonces n ON n.nonce = $1
		LEFT JOIN LATERAL (SELECT * FROM audit_log WHERE kind = '`+string(audit.KindTokenConsumed)+`' AND data->>'token_id' = $2 AND data->>'approval' = $3
			ORDER BY seq LIMIT 1) l ON true`, nonce, tokenID, id).
		Scan(&nApproval, &nToken, &seq, &at, &kind, &actor, &conv, &data, &prevHash, &hash, &d.PrevHash, &d.NextPrevHash, &d.Started)
	if err != nil {
		return Decision{}, fmt.Errorf("store: recorded decision of %s: %w", id, err)
	}
	if nApproval != nil {
		a := core.ApprovalID(*nApproval)
		d.NonceApproval, d.NonceTokenID = &a, nToken
	}
	if seq != nil {
		r := audit.Row{Seq: *seq, At: *at, Entry: audit.Entry{Kind: audit.Kind(*kind), Actor: *actor, Conversation: *conv},
			DataJSON: []byte(*data), PrevHash: prevHash, Hash: hash}
		if err := json.Unmarshal(r.DataJSON, &r.Entry.Data); err != nil {
			return Decision{}, fmt.Errorf("store: decode audit row %d: %w", r.Seq, err)
		}
		d.Entry = &r
	}
	return d, nil
}

// QueueExecution queues the execution of an approved action. The approval
// must be in the transaction's view (ErrOrder).
func (t *Tx) QueueExecution(id core.ApprovalID) error {
	if err := t.parent("execution", id); err != nil {
		return err
	}
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
		if result, err = encodeRecord(u.Result); err != nil {
			return false, fmt.Errorf("store: marshal result: %w", err)
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
	tag, err := t.exec(ctx, `UPDATE executions SET status = $3,
		result = COALESCE($4, result), report = COALESCE($5, report), reason = COALESCE(NULLIF($6, ''), reason),
		started_at = COALESCE($7, started_at), finished_at = COALESCE($8, finished_at)
		WHERE approval_id = $1 AND status = $2`, id, from, to, result, report, u.Reason, started, finished)
	if err != nil {
		return false, fmt.Errorf("store: transition execution %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// QueueOutput stores an execution's full output under ref. The approval
// must be in the transaction's view (ErrOrder).
func (t *Tx) QueueOutput(ref string, id core.ApprovalID, content string) error {
	if err := t.parent("output", id); err != nil {
		return err
	}
	t.later("insert output", `INSERT INTO outputs (ref, approval_id, content, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (ref) DO NOTHING`, ref, id, displayText(content), t.now())
	return nil
}

// QueueMessage adds an outbound delivery.
func (t *Tx) QueueMessage(ch core.ChannelName, op core.OutboxOp, key string, m core.OutMessage) error {
	return t.QueueMessageThen(ch, op, key, m, nil)
}

// QueueMessageThen is QueueMessage that hands the job's id to then once the batch's
// statements were sent (nil: not needed).
func (t *Tx) QueueMessageThen(ch core.ChannelName, op core.OutboxOp, key string, m core.OutMessage, then func(id int64)) error {
	payload, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("store: marshal outbound message: %w", err)
	}
	t.enqueues = append(t.enqueues, queuedJob{ch: ch, conv: m.Conversation, op: op, key: key, payload: string(jsonbSafe(payload)), then: then})
	return nil
}

// QueuePairingCode stores the hash of a one-time pairing code.
func (t *Tx) QueuePairingCode(codeHash []byte, role, platform string, expires time.Time) {
	t.later("insert pairing code", `INSERT INTO pairing_codes (code_hash, role, platform, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)`,
		codeHash, role, platform, t.now(), expires)
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

// QueueBinding stores (or replaces) a signed identity binding.
func (t *Tx) QueueBinding(identity core.IdentityID, role string, record, sig []byte) {
	t.later("upsert binding", `INSERT INTO identity_bindings (identity, role, record, signature, created_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (identity) DO UPDATE SET role = EXCLUDED.role, record = EXCLUDED.record, signature = EXCLUDED.signature, created_at = EXCLUDED.created_at`,
		identity, role, record, sig, t.now())
}

// exec runs a statement whose result is read, after the queued ones.
func (t *Tx) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := t.send(ctx, []extra{{"statement", func(b *pgx.Batch) {
		b.Queue(sql, args...).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	}}})
	return tag, err
}

// queryRow runs a query after the queued statements, in the same round
// trip, when the returned row is scanned.
func (t *Tx) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return &lazyRow{t: t, ctx: ctx, sql: sql, args: args}
}

// query runs a query after the queued statements (a round trip of its own;
// for the rare statements that return many rows).
func (t *Tx) query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.send(ctx, nil); err != nil {
		return nil, err
	}
	return t.conn.Query(ctx, sql, args...)
}

type lazyRow struct {
	t    *Tx
	ctx  context.Context
	sql  string
	args []any
}

// Scan sends the query; "no rows" comes back as pgx.ErrNoRows, unwrapped,
// as from pgx.Row.
func (r *lazyRow) Scan(dest ...any) error {
	var scanErr error
	err := r.t.send(r.ctx, []extra{{"query", func(b *pgx.Batch) {
		b.Queue(r.sql, r.args...).QueryRow(func(row pgx.Row) error { scanErr = row.Scan(dest...); return nil })
	}}})
	if err != nil {
		return err
	}
	return scanErr
}

// rollback ends the transaction after a failure. A connection left in an
// unknown state is not reused (the pool closes connections released inside
// a transaction).
func (t *Tx) rollback() {
	if !t.begun {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = t.conn.Exec(ctx, "ROLLBACK")
}
