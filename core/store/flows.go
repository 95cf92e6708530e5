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

// Flow runs (migration 00050, core/flowrun): the run row, compare-and-
// swapped on seq by every writer; its transitions; its work nodes'
// attempts; flow-scoped state.

const flowRunSelect = `SELECT id, flow, version, flow_hash, document, file, channel, conversation, requester, origin, status,
	state, seq, progress_card, reason, created_at, updated_at, finished_at, COALESCE(parent_run, ''), parent_step, parent_index FROM flow_runs`

func scanFlowRun(row pgx.Row) (core.FlowRun, error) {
	var r core.FlowRun
	var fin *time.Time
	// jsonb into *[]byte: the bytes as stored. Into a json.RawMessage pgx
	// would run json.Unmarshal over them — a validation of what jsonb
	// already holds valid, and the largest cost of reading a run with
	// many nodes (its state), on every transition.
	err := row.Scan(&r.ID, &r.Flow, &r.Version, &r.FlowHash, &r.Document, &r.File, &r.Channel, &r.Conversation, &r.Requester,
		(*[]byte)(&r.Origin), &r.Status, (*[]byte)(&r.State), &r.Seq, &r.ProgressCard, &r.Reason, &r.CreatedAt, &r.UpdatedAt, &fin, &r.Parent, &r.ParentStep, &r.ParentIndex)
	if err != nil {
		return r, notFound(err)
	}
	if fin != nil {
		r.FinishedAt = *fin
	}
	return r, nil
}

func collectFlowRuns(rows pgx.Rows, err error) ([]core.FlowRun, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.FlowRun, error) { return scanFlowRun(r) })
}

// QueueInsertFlowRun stores a new run at r.Seq.
func (t *Tx) QueueInsertFlowRun(r core.FlowRun) {
	now := t.now()
	t.later("insert flow run", `INSERT INTO flow_runs (id, flow, version, flow_hash, document, file, channel, conversation, requester,
		origin, status, state, seq, progress_card, reason, created_at, updated_at, parent_run, parent_step, parent_index)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$16,NULLIF($17, ''),$18,$19)`,
		r.ID, r.Flow, r.Version, r.FlowHash, r.Document, r.File, r.Channel, r.Conversation, r.Requester, jsonbSafe(r.Origin), r.Status,
		jsonbSafe(r.State), r.Seq, r.ProgressCard, displayText(r.Reason), now, r.Parent, r.ParentStep, r.ParentIndex)
}

// UpdateFlowRun writes r's state, status, seq and reason if the stored seq
// is still prev. ok=false: another writer (a second process, a tap, a
// duplicate job) stored a transition first; nothing was written.
func (t *Tx) UpdateFlowRun(ctx context.Context, r core.FlowRun, prev int64) (bool, error) {
	var fin *time.Time
	if r.Final() {
		now := t.now()
		fin = &now
	}
	tag, err := t.exec(ctx, `UPDATE flow_runs SET state = $3, status = $4, seq = $5, reason = $6, updated_at = $7,
		finished_at = COALESCE(finished_at, $8) WHERE id = $1 AND seq = $2`,
		r.ID, prev, jsonbSafe(r.State), r.Status, r.Seq, displayText(r.Reason), t.now(), fin)
	if err != nil {
		return false, fmt.Errorf("store: update flow run %s: %w", r.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ErrFlowRunChanged: QueueUpdateFlowRun found the run's stored seq no
// longer the one it was read at — another writer stored a transition
// first. The transaction fails and nothing of it is committed.
var ErrFlowRunChanged = errors.New("store: the flow run changed meanwhile")

// QueueUpdateFlowRun is UpdateFlowRun queued with the transaction's other
// statements instead of a round trip of its own: when the stored seq is no
// longer prev, the send that carries it (at the latest the one before
// COMMIT) fails with ErrFlowRunChanged, so the transaction never commits.
func (t *Tx) QueueUpdateFlowRun(r core.FlowRun, prev int64) {
	var fin *time.Time
	if r.Final() {
		now := t.now()
		fin = &now
	}
	t.later("update flow run", `UPDATE flow_runs SET state = $3, status = $4, seq = $5, reason = $6, updated_at = $7,
		finished_at = COALESCE(finished_at, $8) WHERE id = $1 AND seq = $2`,
		r.ID, prev, jsonbSafe(r.State), r.Status, r.Seq, displayText(r.Reason), t.now(), fin).Exec(func(ct pgconn.CommandTag) error {
		if ct.RowsAffected() != 1 {
			return fmt.Errorf("%w: run %s at seq %d", ErrFlowRunChanged, r.ID, prev)
		}
		return nil
	})
}

// QueueFlowTransition records one transition of a run (unique on run and
// seq, so a replayed one fails the transaction instead of doubling).
func (t *Tx) QueueFlowTransition(run string, seq int64, event, commands json.RawMessage, ignored string) {
	t.later("insert flow transition", `INSERT INTO flow_transitions (run_id, seq, event, commands, ignored, at) VALUES ($1,$2,$3,$4,$5,$6)`,
		run, seq, jsonbSafe(event), jsonbSafe(commands), displayText(ignored), t.now())
}

// GetFlowRun reads a run.
func (s *Store) GetFlowRun(ctx context.Context, id string) (core.FlowRun, error) {
	r, err := scanFlowRun(s.pool.QueryRow(ctx, flowRunSelect+" WHERE id = $1", id))
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return r, fmt.Errorf("store: get flow run: %w", err)
	}
	return r, err
}

// FlowRunOpen reads a run and its running attempts (oldest first, as
// FlowAttempts orders them) in one round trip. core.ErrNotFound when the
// run does not exist.
func (s *Store) FlowRunOpen(ctx context.Context, id string) (core.FlowRun, []core.FlowAttempt, error) {
	return s.FlowRunOpenAt(ctx, id, -1)
}

// flowRunSelectAt is flowRunSelect leaving out state, origin and document
// when the run's seq is still $2.
const flowRunSelectAt = `SELECT id, flow, version, flow_hash, CASE WHEN seq = $2 THEN NULL ELSE document END, file, channel, conversation,
	requester, CASE WHEN seq = $2 THEN NULL ELSE origin END, status, CASE WHEN seq = $2 THEN NULL ELSE state END, seq, progress_card,
	reason, created_at, updated_at, finished_at, COALESCE(parent_run, ''), parent_step, parent_index FROM flow_runs`

// FlowRunOpenAt is FlowRunOpen for a caller that already holds the run as
// of seq have (the runtime, which stored it): a run still at that seq
// comes back without its State, Origin and Document (empty), which are
// the largest columns — decompressed, sent and scanned on every step of
// a long flow otherwise. A run at another seq comes back whole. The
// compare-and-swap on seq makes (run, seq) name one stored state.
func (s *Store) FlowRunOpenAt(ctx context.Context, id string, have int64) (core.FlowRun, []core.FlowAttempt, error) {
	var run core.FlowRun
	var atts []core.FlowAttempt
	var runErr, attErr error
	b := &pgx.Batch{}
	b.Queue(flowRunSelectAt+" WHERE id = $1", id, have).QueryRow(func(row pgx.Row) error {
		run, runErr = scanFlowRun(row)
		return nil
	})
	b.Queue(flowAttemptSelect+` WHERE run_id = $1 AND status = 'running' ORDER BY started_at, node, iteration, attempt`, id).Query(func(rows pgx.Rows) error {
		atts, attErr = pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.FlowAttempt, error) { return scanFlowAttempt(r) })
		return nil
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return run, nil, fmt.Errorf("store: flow run open: %w", err)
	}
	if runErr != nil {
		if errors.Is(runErr, core.ErrNotFound) {
			return run, nil, runErr
		}
		return run, nil, fmt.Errorf("store: flow run open: %w", runErr)
	}
	if attErr != nil {
		return run, nil, fmt.Errorf("store: flow run open: attempts: %w", attErr)
	}
	return run, atts, nil
}

// LockFlowRun reads a run inside the transaction, locking its row.
func (t *Tx) LockFlowRun(ctx context.Context, id string) (core.FlowRun, error) {
	return scanFlowRun(t.queryRow(ctx, flowRunSelect+" WHERE id = $1 FOR UPDATE", id))
}

// FindFlowRun reads the run of a conversation whose id is id or starts
// with it (the short form /flow status shows); the newest when "" is given.
// core.ErrNotFound when none matches.
func (s *Store) FindFlowRun(ctx context.Context, conv core.ConversationID, id string) (core.FlowRun, error) {
	r, err := scanFlowRun(s.pool.QueryRow(ctx, flowRunSelect+` WHERE conversation = $1 AND starts_with(id, $2)
		AND (parent_run IS NULL OR $2 <> '') ORDER BY created_at DESC LIMIT 1`, conv, id))
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return r, fmt.Errorf("store: find flow run: %w", err)
	}
	return r, err
}

// ActiveFlowRuns lists every running run, oldest first (the sweep).
func (s *Store) ActiveFlowRuns(ctx context.Context) ([]core.FlowRun, error) {
	out, err := collectFlowRuns(s.pool.Query(ctx, flowRunSelect+` WHERE status = 'running' ORDER BY created_at`))
	if err != nil {
		return nil, fmt.Errorf("store: active flow runs: %w", err)
	}
	return out, nil
}

// FlowRunsToSweep lists the running runs the sweep must advance: not
// started yet, with a running action attempt whose approval is no
// longer open (settled by a path that queues no step job: a card's
// expiry, or a job that gave up), or with a running agent.run attempt
// whose task ended (its step job gave up). A run waiting on a tap, a
// gate, a timer or a running task is not listed, so waiting runs cost one
// query per sweep in all.
func (s *Store) FlowRunsToSweep(ctx context.Context) ([]core.FlowRun, error) {
	out, err := collectFlowRuns(s.pool.Query(ctx, flowRunSelect+` r WHERE r.status = 'running' AND (r.seq = 0 OR EXISTS (
		SELECT 1 FROM flow_attempts fa JOIN approvals a ON a.id = fa.approval_id
		WHERE fa.run_id = r.id AND fa.status = 'running' AND a.status NOT IN ('pending', 'confirming')) OR EXISTS (
		SELECT 1 FROM flow_attempts fa JOIN tasks k ON k.flow_run = fa.run_id AND k.flow_step = fa.node || '/' || fa.iteration || '/' || fa.attempt
		WHERE fa.run_id = r.id AND fa.status = 'running' AND fa.type = 'agent.run' AND k.state IN ('done', 'stopped')))
		ORDER BY r.created_at`))
	if err != nil {
		return nil, fmt.Errorf("store: flow runs to sweep: %w", err)
	}
	return out, nil
}

// ConversationFlowRuns lists a conversation's newest runs, newest first.
func (s *Store) ConversationFlowRuns(ctx context.Context, conv core.ConversationID, n int) ([]core.FlowRun, error) {
	out, err := collectFlowRuns(s.pool.Query(ctx, flowRunSelect+` WHERE conversation = $1 AND parent_run IS NULL ORDER BY created_at DESC LIMIT $2`, conv, n))
	if err != nil {
		return nil, fmt.Errorf("store: conversation flow runs: %w", err)
	}
	return out, nil
}

// FlowTransitions counts a run's stored transitions.
func (s *Store) FlowTransitions(ctx context.Context, run string) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM flow_transitions WHERE run_id = $1`, run).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: flow transitions: %w", err)
	}
	return n, nil
}

const flowAttemptSelect = `SELECT run_id, node, iteration, attempt, type, status, COALESCE(approval_id, ''), COALESCE(card, ''),
	output, error, started_at, finished_at FROM flow_attempts`

func scanFlowAttempt(row pgx.Row) (core.FlowAttempt, error) {
	var a core.FlowAttempt
	var fin *time.Time
	// jsonb as stored (see scanFlowRun).
	err := row.Scan(&a.Run, &a.Node, &a.Iteration, &a.Attempt, &a.Type, &a.Status, &a.Approval, &a.Card, (*[]byte)(&a.Output), (*[]byte)(&a.Error),
		&a.StartedAt, &fin)
	if err != nil {
		return a, notFound(err)
	}
	if fin != nil {
		a.FinishedAt = *fin
	}
	return a, nil
}

// QueueFlowAttempt records an attempt begun (after the approval request
// it references, when it has one).
func (t *Tx) QueueFlowAttempt(a core.FlowAttempt) {
	var appr, card *string
	if a.Approval != "" {
		s := string(a.Approval)
		appr = &s
	}
	if a.Card != "" {
		card = &a.Card
	}
	t.later("insert flow attempt", `INSERT INTO flow_attempts (run_id, node, iteration, attempt, type, status, approval_id, card, started_at)
		VALUES ($1,$2,$3,$4,$5,'running',$6,$7,$8)`, a.Run, a.Node, a.Iteration, a.Attempt, a.Type, appr, card, t.now())
}

// QueueFlowAttemptEnd records how an attempt ended (only a running one).
func (t *Tx) QueueFlowAttemptEnd(a core.FlowAttempt) {
	var out, e []byte
	if len(a.Output) > 0 {
		out = jsonbSafe(a.Output)
	}
	if len(a.Error) > 0 {
		e = jsonbSafe(a.Error)
	}
	t.later("end flow attempt", `UPDATE flow_attempts SET status = $5, output = $6, error = $7, finished_at = $8
		WHERE run_id = $1 AND node = $2 AND iteration = $3 AND attempt = $4 AND status = 'running'`,
		a.Run, a.Node, a.Iteration, a.Attempt, a.Status, out, e, t.now())
}

// FlowAttempts lists a run's attempts, oldest first.
func (s *Store) FlowAttempts(ctx context.Context, run string) ([]core.FlowAttempt, error) {
	rows, err := s.pool.Query(ctx, flowAttemptSelect+` WHERE run_id = $1 ORDER BY started_at, node, iteration, attempt`, run)
	if err != nil {
		return nil, fmt.Errorf("store: flow attempts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.FlowAttempt, error) { return scanFlowAttempt(r) })
	if err != nil {
		return nil, fmt.Errorf("store: flow attempts: %w", err)
	}
	return out, nil
}

// FlowAttemptByCard reads the attempt whose card (a gate's) is card;
// core.ErrNotFound when none is.
func (t *Tx) FlowAttemptByCard(ctx context.Context, card string) (core.FlowAttempt, error) {
	return scanFlowAttempt(t.queryRow(ctx, flowAttemptSelect+` WHERE card = $1`, card))
}

// FlowState reads a flow-scoped value; core.ErrNotFound when unset.
func (t *Tx) FlowState(ctx context.Context, flow, key string) (json.RawMessage, error) {
	var v json.RawMessage
	if err := t.queryRow(ctx, `SELECT value FROM flow_state WHERE flow = $1 AND key = $2`, flow, key).Scan(&v); err != nil {
		return nil, notFound(err)
	}
	return v, nil
}

// QueueSetFlowState stores a flow-scoped value.
func (t *Tx) QueueSetFlowState(flow, key string, v json.RawMessage) {
	t.later("set flow state", `INSERT INTO flow_state (flow, key, value, updated_at) VALUES ($1,$2,$3,$4)
		ON CONFLICT (flow, key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at`, flow, key, jsonbSafe(v), t.now())
}

// FlowAttempt reads one attempt inside the transaction; core.ErrNotFound
// when it was never begun.
func (t *Tx) FlowAttempt(ctx context.Context, run, node string, iteration, attempt int) (core.FlowAttempt, error) {
	return scanFlowAttempt(t.queryRow(ctx, flowAttemptSelect+` WHERE run_id = $1 AND node = $2 AND iteration = $3 AND attempt = $4`,
		run, node, iteration, attempt))
}

// CardAt is the key of the card delivered to conv as the platform message
// ref (sent_messages). ErrNotFound: no card of ours is that message.
func (s *Store) CardAt(ctx context.Context, ch core.ChannelName, conv core.ConversationID, ref core.MessageRef) (string, error) {
	var key string
	err := s.pool.QueryRow(ctx, `SELECT message_key FROM sent_messages WHERE channel = $1 AND ref = $2 AND conversation = $3 LIMIT 1`,
		ch, ref, conv).Scan(&key)
	if err != nil {
		return "", notFound(err)
	}
	return key, nil
}

// ChildFlowRuns lists the child runs of a run's step (a subflow's one, a
// foreach's per item), by item index.
func (t *Tx) ChildFlowRuns(ctx context.Context, parent, step string) ([]core.FlowRun, error) {
	out, err := collectFlowRuns(t.query(ctx, flowRunSelect+` WHERE parent_run = $1 AND parent_step = $2 ORDER BY parent_index`, parent, step))
	if err != nil {
		return nil, fmt.Errorf("store: child flow runs: %w", err)
	}
	return out, nil
}

// ChildFlowRuns is Tx.ChildFlowRuns outside a transaction.
func (s *Store) ChildFlowRuns(ctx context.Context, parent, step string) ([]core.FlowRun, error) {
	out, err := collectFlowRuns(s.pool.Query(ctx, flowRunSelect+` WHERE parent_run = $1 AND parent_step = $2 ORDER BY parent_index`, parent, step))
	if err != nil {
		return nil, fmt.Errorf("store: child flow runs: %w", err)
	}
	return out, nil
}
