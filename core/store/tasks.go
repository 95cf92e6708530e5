package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

const taskSelect = `SELECT id, channel, conversation, requester, origin, goal, state, machine, plan, plan_no, limits,
	tokens, model_calls, tool_calls, cost_usd, cost_known, rev, reason, summary, COALESCE(escalation_card, ''),
	COALESCE(question_card, ''), COALESCE(flow_run, ''), flow_step, flow_tools, created_at, updated_at, finished_at FROM tasks`

func scanTask(row pgx.Row) (core.Task, error) {
	var t core.Task
	var fin *time.Time
	err := row.Scan(&t.ID, &t.Channel, &t.Conversation, &t.Requester, &t.Origin, &t.Goal, &t.State, &t.Machine, &t.Plan, &t.PlanNo, &t.Limits,
		&t.Tokens, &t.ModelCalls, &t.ToolCalls, &t.CostUSD, &t.CostKnown, &t.Rev, &t.Reason, &t.Summary, &t.EscalationCard,
		&t.QuestionCard, &t.FlowRun, &t.FlowStep, &t.FlowTools, &t.CreatedAt, &t.UpdatedAt, &fin)
	if err != nil {
		return t, notFound(err)
	}
	if fin != nil {
		t.FinishedAt = *fin
	}
	return t, nil
}

func collectTasks(rows pgx.Rows, err error) ([]core.Task, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.Task, error) { return scanTask(r) })
}

// QueueInsertTask stores a new task (Rev 0).
func (t *Tx) QueueInsertTask(k core.Task) {
	now := t.now()
	var run *string
	if k.FlowRun != "" {
		run = &k.FlowRun
	}
	tools := k.FlowTools
	if tools == nil {
		tools = []string{}
	}
	t.later("insert task", `INSERT INTO tasks (id, channel, conversation, requester, origin, goal, state, machine, plan, plan_no, limits,
		created_at, updated_at, flow_run, flow_step, flow_tools) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$12,$13,$14,$15)`,
		k.ID, k.Channel, k.Conversation, k.Requester, jsonbSafe(k.Origin), displayText(k.Goal), k.State, jsonbSafe(k.Machine),
		displayText(k.Plan), k.PlanNo, jsonbSafe(k.Limits), now, run, k.FlowStep, tools)
}

// GetTask reads a task.
func (s *Store) GetTask(ctx context.Context, id string) (core.Task, error) {
	k, err := scanTask(s.pool.QueryRow(ctx, taskSelect+" WHERE id = $1", id))
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return k, fmt.Errorf("store: get task: %w", err)
	}
	return k, err
}

// LockTask reads a task inside the transaction, locking its row.
func (t *Tx) LockTask(ctx context.Context, id string) (core.Task, error) {
	return scanTask(t.queryRow(ctx, taskSelect+" WHERE id = $1 FOR UPDATE", id))
}

// LockActiveTask reads (and locks) the newest unfinished task of a
// conversation; core.ErrNotFound when there is none.
func (t *Tx) LockActiveTask(ctx context.Context, conv core.ConversationID) (core.Task, error) {
	return scanTask(t.queryRow(ctx, taskSelect+` WHERE conversation = $1 AND state NOT IN ('done', 'stopped')
		ORDER BY created_at DESC LIMIT 1 FOR UPDATE`, conv))
}

// LockTaskByCard reads (and locks) the task whose open escalation card is
// card; core.ErrNotFound when none is.
func (t *Tx) LockTaskByCard(ctx context.Context, card string) (core.Task, error) {
	return scanTask(t.queryRow(ctx, taskSelect+" WHERE escalation_card = $1 FOR UPDATE", card))
}

// LockTaskByQuestion reads (and locks) the task whose open question card
// is card; core.ErrNotFound when none is.
func (t *Tx) LockTaskByQuestion(ctx context.Context, card string) (core.Task, error) {
	return scanTask(t.queryRow(ctx, taskSelect+" WHERE question_card = $1 FOR UPDATE", card))
}

// FlowTask reads the task a flow run's agent.run step started
// (core.ErrNotFound when none).
func (s *Store) FlowTask(ctx context.Context, run, step string) (core.Task, error) {
	k, err := scanTask(s.pool.QueryRow(ctx, taskSelect+" WHERE flow_run = $1 AND flow_step = $2", run, step))
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return k, fmt.Errorf("store: flow task: %w", err)
	}
	return k, err
}

// LockFlowTask reads (and locks) the task a flow run's agent.run step
// started; core.ErrNotFound when none.
func (t *Tx) LockFlowTask(ctx context.Context, run, step string) (core.Task, error) {
	return scanTask(t.queryRow(ctx, taskSelect+" WHERE flow_run = $1 AND flow_step = $2 FOR UPDATE", run, step))
}

// ActiveTasks lists every unfinished task, oldest first (resumed at start
// and by the sweep).
func (s *Store) ActiveTasks(ctx context.Context) ([]core.Task, error) {
	out, err := collectTasks(s.pool.Query(ctx, taskSelect+` WHERE state NOT IN ('done', 'stopped') ORDER BY created_at`))
	if err != nil {
		return nil, fmt.Errorf("store: active tasks: %w", err)
	}
	return out, nil
}

// ConversationTasks lists a conversation's newest tasks, newest first.
func (s *Store) ConversationTasks(ctx context.Context, conv core.ConversationID, n int) ([]core.Task, error) {
	out, err := collectTasks(s.pool.Query(ctx, taskSelect+` WHERE conversation = $1 ORDER BY created_at DESC LIMIT $2`, conv, n))
	if err != nil {
		return nil, fmt.Errorf("store: conversation tasks: %w", err)
	}
	return out, nil
}

// UpdateTask writes k's mutable fields if the stored rev is still k.Rev,
// bumping it. ok=false: the task changed since it was read (a stop, a tap,
// another advance); nothing was written, and that is an answer.
func (t *Tx) UpdateTask(ctx context.Context, k core.Task) (bool, error) {
	var fin *time.Time
	if !k.FinishedAt.IsZero() {
		fin = &k.FinishedAt
	}
	var card, question *string
	if k.EscalationCard != "" {
		card = &k.EscalationCard
	}
	if k.QuestionCard != "" {
		question = &k.QuestionCard
	}
	tag, err := t.exec(ctx, `UPDATE tasks SET state = $3, machine = $4, plan = $5, plan_no = $6, limits = $7,
		tokens = $8, model_calls = $9, tool_calls = $10, cost_usd = $11, cost_known = $12, reason = $13, summary = $14,
		escalation_card = $15, updated_at = $16, finished_at = $17, question_card = $18, rev = rev + 1
		WHERE id = $1 AND rev = $2`, k.ID, k.Rev, k.State, jsonbSafe(k.Machine), displayText(k.Plan), k.PlanNo, jsonbSafe(k.Limits),
		k.Tokens, k.ModelCalls, k.ToolCalls, k.CostUSD, k.CostKnown, displayText(k.Reason), displayText(k.Summary), card, t.now(), fin, question)
	if err != nil {
		return false, fmt.Errorf("store: update task %s: %w", k.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// QueueTaskSpend records one model call's tokens.
func (t *Tx) QueueTaskSpend(taskID, role string, tokens int64) {
	t.later("insert task spend", `INSERT INTO task_spend (task_id, role, tokens, at) VALUES ($1, $2, $3, $4)`, taskID, role, tokens, t.now())
}

// QueueTaskAttempt records the start of an attempt at a step (a repeat of
// the same attempt is ignored).
func (t *Tx) QueueTaskAttempt(taskID string, planNo, step, attempt int) {
	t.later("insert task attempt", `INSERT INTO task_attempts (task_id, plan_no, step, attempt, state, started_at)
		VALUES ($1, $2, $3, $4, 'running', $5) ON CONFLICT DO NOTHING`, taskID, planNo, step, attempt, t.now())
}

// QueueTaskAttemptEnd records how an attempt ended ("succeeded" or
// "failed"); a succeeded attempt can still fail afterwards, when the
// plan's checks run after the last step.
func (t *Tx) QueueTaskAttemptEnd(taskID string, planNo, step, attempt int, state, failure string) {
	t.later("finish task attempt", `UPDATE task_attempts SET state = $5, failure = $6, finished_at = $7
		WHERE task_id = $1 AND plan_no = $2 AND step = $3 AND attempt = $4 AND state <> 'failed'`,
		taskID, planNo, step, attempt, state, displayText(failure), t.now())
}

// TaskAttempts lists a task's attempts in order.
func (s *Store) TaskAttempts(ctx context.Context, taskID string) ([]core.TaskAttempt, error) {
	rows, err := s.pool.Query(ctx, `SELECT plan_no, step, attempt, state, failure FROM task_attempts WHERE task_id = $1
		ORDER BY started_at, plan_no, step, attempt`, taskID)
	if err != nil {
		return nil, fmt.Errorf("store: task attempts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.TaskAttempt, error) {
		var a core.TaskAttempt
		return a, r.Scan(&a.PlanNo, &a.Step, &a.Attempt, &a.State, &a.Failure)
	})
	if err != nil {
		return nil, fmt.Errorf("store: task attempts: %w", err)
	}
	return out, nil
}

// QueueTaskCall stores a tool call. A call naming an approval must come
// after that approval in the transaction (ErrOrder).
func (t *Tx) QueueTaskCall(c core.TaskCall) error {
	var appr *core.ApprovalID
	if c.Approval != "" {
		if err := t.parent("task call", c.Approval); err != nil {
			return err
		}
		appr = &c.Approval
	}
	var result []byte
	if len(c.Result) > 0 {
		result = jsonbSafe(c.Result)
	}
	var fin *time.Time
	now := t.now()
	if c.Status == "done" {
		fin = &now
	}
	t.later("insert task call", `INSERT INTO task_calls (task_id, plan_no, step, attempt, call_id, tool, arguments, approval_id, status, result,
		created_at, finished_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)`,
		c.TaskID, c.PlanNo, c.Step, c.Attempt, displayText(c.CallID), displayText(c.Tool), displayText(c.Arguments), appr, c.Status, result, now, fin)
	return nil
}

// FinishTaskCall records the result of a waiting call. ok=false: it was
// not waiting (already recorded).
func (t *Tx) FinishTaskCall(ctx context.Context, id int64, result json.RawMessage) (bool, error) {
	tag, err := t.exec(ctx, `UPDATE task_calls SET status = 'done', result = $2, finished_at = $3 WHERE id = $1 AND status = 'waiting'`,
		id, jsonbSafe(result), t.now())
	if err != nil {
		return false, fmt.Errorf("store: finish task call %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// TaskCalls lists a task's tool calls in order.
func (s *Store) TaskCalls(ctx context.Context, taskID string) ([]core.TaskCall, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, task_id, plan_no, step, attempt, call_id, tool, arguments, COALESCE(approval_id, ''), status,
		result, created_at, finished_at FROM task_calls WHERE task_id = $1 ORDER BY id`, taskID)
	if err != nil {
		return nil, fmt.Errorf("store: task calls: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (core.TaskCall, error) {
		var c core.TaskCall
		var fin *time.Time
		err := r.Scan(&c.ID, &c.TaskID, &c.PlanNo, &c.Step, &c.Attempt, &c.CallID, &c.Tool, &c.Arguments, &c.Approval, &c.Status,
			&c.Result, &c.CreatedAt, &fin)
		if fin != nil {
			c.FinishedAt = *fin
		}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: task calls: %w", err)
	}
	return out, nil
}

// OpenTaskApprovals lists the open (pending or confirming) approvals of a
// task's calls, locked, so a stop can close them.
func (t *Tx) OpenTaskApprovals(ctx context.Context, taskID string) ([]core.ApprovalRequest, error) {
	rows, err := t.query(ctx, approvalSelect+` WHERE status IN ('pending', 'confirming')
		AND id IN (SELECT approval_id FROM task_calls WHERE task_id = $1 AND approval_id IS NOT NULL) ORDER BY created_at FOR UPDATE`, taskID)
	if err != nil {
		return nil, fmt.Errorf("store: open task approvals: %w", err)
	}
	out, err := pgx.CollectRows(rows, rowToApproval)
	if err != nil {
		return nil, fmt.Errorf("store: open task approvals: %w", err)
	}
	for _, a := range out {
		t.seen(a.ID)
	}
	return out, nil
}

// QueueTaskOutput stores an evicted tool output under its pointer.
func (t *Tx) QueueTaskOutput(pointer, taskID, content string) {
	t.later("insert task output", `INSERT INTO task_outputs (pointer, task_id, content, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (pointer) DO NOTHING`, pointer, taskID, displayText(content), t.now())
}

// GetTaskOutput reads an evicted tool output of a task.
func (s *Store) GetTaskOutput(ctx context.Context, taskID, pointer string) (string, error) {
	var c string
	err := s.pool.QueryRow(ctx, `SELECT content FROM task_outputs WHERE pointer = $1 AND task_id = $2`, pointer, taskID).Scan(&c)
	if err != nil {
		return "", notFound(err)
	}
	return c, nil
}
