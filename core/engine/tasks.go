package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/plan"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/redact"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
)

// The durable task runtime of the LLM agent (docs/agent.md). A task is a
// row in PostgreSQL holding the recovery machine (core/agent/llm/task),
// the plan and the spend; it is advanced by a per-task job that reads the
// row, does one thing (a model call, a proposal, recording a result, the
// final checks) and writes the next state with a compare-and-swap on the
// row's rev. Nothing lives only in memory: at start every unfinished task
// is advanced again, and a sweep re-advances them periodically (approval
// expiry, wall-time budget). A model call in flight at a restart is simply
// made again; an execution in flight is reported interrupted by the
// execution resume and never re-run.
//
// The model proposes; the runtime decides. Each tool call becomes a
// core.Action that goes through propose — the same trust check, policy,
// signed request, card, token and sandbox as /run — and only its recorded
// execution and verification become the result the model is shown. The
// plan's checks are run by the runtime, through policy, in the
// verification sandbox; only they mark a task done.

// TaskConfig enables the task runtime (nil in Config: a task request is
// answered "not available").
type TaskConfig struct {
	Planner  llm.Planner
	Executor llm.Executor
	// Limits are the configured budget per task (llm.budget.*); a plan may
	// only lower them.
	Limits task.Limits
	// Recovery sets the attempts per step and the re-plans per task; the
	// plan chooses on_stuck.
	Recovery task.Policy
	// Sweep is how often unfinished tasks are re-advanced (default 5s).
	Sweep time.Duration
}

type taskRuntime struct {
	cfg     TaskConfig
	mu      sync.Mutex
	running map[string]*taskJob
}

type taskJob struct{ again bool }

// kickTask advances a task in the background unless a job for it runs;
// then that job goes round once more.
func (e *Engine) kickTask(id string) {
	rt := e.tasks
	if rt == nil || id == "" || e.workCtx.Err() != nil {
		return
	}
	rt.mu.Lock()
	if j, ok := rt.running[id]; ok {
		j.again = true
		rt.mu.Unlock()
		return
	}
	// Not once shutdown began: Run is waiting for e.work, and the task
	// resumes from its row at the next start anyway.
	e.mu.Lock()
	closing := e.closing
	if !closing {
		e.work.Add(1)
	}
	e.mu.Unlock()
	if closing {
		rt.mu.Unlock()
		return
	}
	rt.running[id] = &taskJob{}
	rt.mu.Unlock()
	go func() {
		defer e.work.Done()
		e.runTask(id)
	}()
}

func (e *Engine) runTask(id string) {
	rt := e.tasks
	log := e.log.With(slog.String("task", id))
	for {
		more, err := e.advanceTask(e.workCtx, id)
		if err != nil && e.workCtx.Err() == nil {
			// A database error: the sweep tries again later.
			log.Error("task: advance failed", slog.Any("err", err))
			more = false
		}
		rt.mu.Lock()
		j := rt.running[id]
		if e.workCtx.Err() != nil || (!more && !j.again) {
			delete(rt.running, id)
			rt.mu.Unlock()
			return
		}
		j.again = false
		rt.mu.Unlock()
	}
}

// resumeTasks advances every unfinished task (at start and by the sweep).
func (e *Engine) resumeTasks(ctx context.Context) error {
	if e.tasks == nil {
		return nil
	}
	list, err := e.st.ActiveTasks(ctx)
	if err != nil {
		return fmt.Errorf("engine: resume tasks: %w", err)
	}
	for _, k := range list {
		e.kickTask(k.ID)
	}
	return nil
}

func (e *Engine) sweepTasks(ctx context.Context) {
	every := e.tasks.cfg.Sweep
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := e.resumeTasks(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("task sweep failed", slog.Any("err", err))
			}
		}
	}
}

// taskNotice kicks the task an approval belongs to, if any (its execution
// or decision changed).
func (e *Engine) taskNotice(id core.ApprovalID) {
	if e.tasks == nil {
		return
	}
	tid, err := e.st.TaskOfApproval(e.workCtx, id)
	if err != nil {
		e.log.Warn("task: look up the task of an approval", slog.String("approval", string(id)), slog.Any("err", err))
		return
	}
	e.kickTask(tid)
}

// taskState is a stored task decoded.
type taskState struct {
	k    store.Task
	m    task.Machine
	lim  task.Limits
	pl   *plan.Plan // nil before the first plan
	orig core.Turn
}

func (e *Engine) decodeTask(k store.Task) (*taskState, error) {
	s := &taskState{k: k}
	if err := json.Unmarshal(k.Machine, &s.m); err != nil {
		return nil, fmt.Errorf("engine: task %s: machine: %w", k.ID, err)
	}
	if err := json.Unmarshal(k.Limits, &s.lim); err != nil {
		return nil, fmt.Errorf("engine: task %s: limits: %w", k.ID, err)
	}
	if err := json.Unmarshal(k.Origin, &s.orig); err != nil {
		return nil, fmt.Errorf("engine: task %s: origin: %w", k.ID, err)
	}
	if k.Plan != "" {
		pl, err := plan.Parse(k.Plan)
		if err != nil {
			return nil, fmt.Errorf("engine: task %s: stored plan: %w", k.ID, err)
		}
		s.pl = pl
	}
	return s, nil
}

func (s *taskState) spent() task.Spent {
	return task.Spent{Tokens: s.k.Tokens, ModelCalls: s.k.ModelCalls, ToolCalls: s.k.ToolCalls, CostUSD: s.k.CostUSD, CostKnown: s.k.CostKnown, Started: s.k.CreatedAt}
}

func (s *taskState) setSpent(sp task.Spent) {
	s.k.Tokens, s.k.ModelCalls, s.k.ToolCalls, s.k.CostUSD, s.k.CostKnown = sp.Tokens, sp.ModelCalls, sp.ToolCalls, sp.CostUSD, sp.CostKnown
}

func (s *taskState) title() string {
	if s.pl != nil {
		return s.pl.Title
	}
	return clipText(s.k.Goal, 80)
}

func (s *taskState) recovery(rt *taskRuntime) task.Policy {
	p := rt.cfg.Recovery
	if s.pl != nil {
		p.OnStuck = s.pl.OnStuck
	}
	return p
}

// taskWrite is one transition of a task, written in one transaction with
// the messages, cards and approvals it causes.
type taskWrite struct {
	s        *taskState
	o        outcome // the task's conversation; its turn is the task's origin
	calls    []store.TaskCall
	finished []finishedCall
	spend    []spendRow
	outputs  [][2]string // pointer, content
	attempts []attemptRow
	ends     []attemptRow
	stop     bool
	// checks is the summary of the plan's passed checks (VerifyPassed).
	checks string
	// cancel lists approvals whose running executions are killed after
	// commit (a stop).
	cancel *[]core.ApprovalID
}

type finishedCall struct {
	id     int64
	result json.RawMessage
}

type spendRow struct {
	role   string
	tokens int64
}

type attemptRow struct {
	step, attempt int
	state, reason string
}

func (e *Engine) newTaskWrite(s *taskState) *taskWrite {
	return &taskWrite{s: s, o: outcome{st: core.StoredTurn{Turn: s.orig}}, cancel: new([]core.ApprovalID)}
}

func (w *taskWrite) note(kind audit.Kind, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["task"] = w.s.k.ID
	w.o.audit = append(w.o.audit, auditEntry{Kind: kind, Actor: "silas", Conversation: string(w.s.k.Conversation), Data: data})
}

// modelCall records one model call's usage.
func (w *taskWrite) modelCall(role string, u llm.Usage) {
	w.s.setSpent(w.s.spent().ModelCall(u.TotalTokens, -1))
	w.spend = append(w.spend, spendRow{role: role, tokens: u.TotalTokens})
}

// casTask writes the task row if it is still the one read; ok=false means
// another writer got there first and nothing may be written.
func (e *Engine) casTask(ctx context.Context, tx *store.Tx, w *taskWrite) (bool, error) {
	m, err := json.Marshal(w.s.m)
	if err != nil {
		return false, err
	}
	l, err := json.Marshal(w.s.lim)
	if err != nil {
		return false, err
	}
	k := w.s.k
	k.Machine, k.Limits, k.State, k.Reason = m, l, string(w.s.m.State), w.s.m.Reason
	if k.Final() && k.FinishedAt.IsZero() {
		k.FinishedAt = tx.Now()
	}
	return tx.UpdateTask(ctx, k)
}

// writeTaskRows writes what the transition adds besides the task row (after
// casTask and after any approval the calls reference).
func (e *Engine) writeTaskRows(ctx context.Context, tx *store.Tx, o *outcome, w *taskWrite) error {
	id := w.s.k.ID
	if w.stop {
		open, err := tx.OpenTaskApprovals(ctx, id)
		if err != nil {
			return err
		}
		for _, a := range open {
			ok, err := tx.TransitionApproval(ctx, a.ID, []core.ApprovalStatus{core.ApprovalPending, core.ApprovalConfirming}, core.ApprovalDeclined, render.TaskStopped, nil)
			if err != nil {
				return err
			}
			if ok {
				a.Status, a.DecidedBy = core.ApprovalDeclined, render.TaskStopped
				o.updates = append(o.updates, e.card(a, nil))
				o.audit = append(o.audit, auditEntry{Kind: audit.KindApprovalDeclined, Actor: "silas", Conversation: string(a.Conversation),
					Data: map[string]any{"approval": string(a.ID), "task": id, "reason": "task stopped"}})
			}
		}
		calls, err := e.st.TaskCalls(ctx, id)
		if err != nil {
			return err
		}
		for _, c := range calls {
			if c.Status == "waiting" && c.Approval != "" {
				*w.cancel = append(*w.cancel, c.Approval)
			}
		}
	}
	for _, c := range w.calls {
		if err := tx.QueueTaskCall(c); err != nil {
			return err
		}
	}
	for _, f := range w.finished {
		if _, err := tx.FinishTaskCall(ctx, f.id, f.result); err != nil {
			return err
		}
	}
	for _, s := range w.spend {
		tx.QueueTaskSpend(id, s.role, s.tokens)
	}
	for _, p := range w.outputs {
		tx.QueueTaskOutput(p[0], id, p[1])
	}
	for _, a := range w.ends {
		tx.QueueTaskAttemptEnd(id, w.s.k.PlanNo, a.step, a.attempt, a.state, a.reason)
	}
	for _, a := range w.attempts {
		tx.QueueTaskAttempt(id, w.s.k.PlanNo, a.step, a.attempt)
	}
	return nil
}

// commitTask writes w in one transaction: the task row (compare-and-swap),
// approvals (and policy approvals), task rows, messages. applied=false: the
// task changed meanwhile and nothing was written.
func (e *Engine) commitTask(ctx context.Context, w *taskWrite) (bool, error) {
	var applied bool
	var final outcome
	conv := w.s.k.Conversation
	err := e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
		applied = false
		o := w.o
		o.replies = append([]string(nil), w.o.replies...)
		o.cards = append([]*cards.Card(nil), w.o.cards...)
		o.updates = append([]*cards.Card(nil), w.o.updates...)
		o.appr = append([]core.ApprovalRequest(nil), w.o.appr...)
		o.audit = append([]auditEntry(nil), w.o.audit...)
		o.after = nil
		*w.cancel = nil
		ok, err := e.casTask(ctx, tx, w)
		if err != nil || !ok {
			return nil, err
		}
		for _, a := range o.appr {
			tx.QueueApproval(a)
		}
		if o.inTx != nil {
			if err := o.inTx(ctx, tx, &o); err != nil {
				return nil, err
			}
		}
		if err := e.writeTaskRows(ctx, tx, &o, w); err != nil {
			return nil, err
		}
		o.jobs = nil
		for _, r := range o.replies {
			if err := o.send(tx, "r-"+core.NewID(), core.OutMessage{Conversation: conv, Text: r}); err != nil {
				return nil, err
			}
		}
		for _, c := range o.cards {
			if err := o.send(tx, string(c.ID), core.OutMessage{Conversation: conv, Card: c}); err != nil {
				return nil, err
			}
		}
		for _, c := range o.updates {
			if err := tx.QueueMessage(w.s.k.Channel, core.OpUpdate, string(c.ID), core.OutMessage{Conversation: conv, Card: c}); err != nil {
				return nil, err
			}
		}
		applied, final = true, o
		return o.audit, nil
	})
	if err != nil || !applied {
		return false, err
	}
	for _, f := range final.after {
		f()
	}
	e.cancelRuns(*w.cancel)
	e.out.HandOff(conv, final.jobs, len(final.updates))
	return true, nil
}

// advanceTask does the next thing for a task. more: call again at once.
func (e *Engine) advanceTask(ctx context.Context, id string) (more bool, err error) {
	k, err := e.st.GetTask(ctx, id)
	if errors.Is(err, core.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if k.Final() {
		return false, nil
	}
	s, err := e.decodeTask(k)
	if err != nil {
		return false, err
	}
	// Before anything else (a model call, the checks): every limit but the
	// tool calls, which are counted when a call is proposed — so the last
	// call the budget allows still runs and is reported.
	lim := s.lim
	lim.ToolCalls = 0
	if reason := s.spent().Exhausted(lim, e.now()); reason != "" {
		return e.taskEvent(ctx, e.newTaskWrite(s), task.Event{Kind: task.BudgetExhausted, Detail: reason})
	}
	switch s.m.State {
	case task.Planning, task.Replanning:
		return e.taskPlan(ctx, s)
	case task.Running:
		return e.taskStep(ctx, s)
	case task.Verifying:
		return e.taskVerify(ctx, s)
	case task.Consulting:
		return e.taskConsult(ctx, s)
	}
	return false, nil // escalated: waiting for the user
}

// taskEvent applies ev with w's other changes and commits. A stale write
// (the task changed meanwhile) is dropped and the caller reads again.
func (e *Engine) taskEvent(ctx context.Context, w *taskWrite, ev task.Event) (bool, error) {
	if err := e.applyEvent(w, ev); err != nil {
		return false, err
	}
	if w.s.m.State == task.Done {
		if err := e.finishSummary(ctx, w); err != nil {
			return false, err
		}
	}
	applied, err := e.commitTask(ctx, w)
	if err != nil {
		return false, err
	}
	if !applied {
		return true, nil
	}
	return !w.s.k.Final() && w.s.m.State != task.Escalated, nil
}

// applyEvent runs the recovery machine and prepares what its directive
// shows: the attempt rows, the escalation card, the summary, the stop.
func (e *Engine) applyEvent(w *taskWrite, ev task.Event) error {
	s := w.s
	before := s.m
	m, d, err := task.Next(s.m, ev, s.recovery(e.tasks))
	if err != nil {
		return fmt.Errorf("engine: task %s: %w", s.k.ID, err)
	}
	s.m = m
	switch ev.Kind {
	case task.StepSucceeded, task.StepFailed, task.VerifyFailed:
		state := "succeeded"
		if ev.Kind != task.StepSucceeded {
			state = "failed"
		}
		w.ends = append(w.ends, attemptRow{step: before.Step, attempt: before.Attempt, state: state, reason: ev.Detail})
		w.note(audit.KindTaskStepFinished, map[string]any{"plan": s.k.PlanNo, "step": before.Step + 1, "attempt": before.Attempt,
			"outcome": string(ev.Kind), "detail": clipText(ev.Detail, 300)})
	}
	switch d.Kind {
	case task.DoRunStep:
		w.attempts = append(w.attempts, attemptRow{step: d.Step, attempt: d.Attempt})
		w.note(audit.KindTaskStepStarted, map[string]any{"plan": s.k.PlanNo, "step": d.Step + 1, "attempt": d.Attempt, "retry": d.Failure != ""})
	case task.DoEscalate:
		s.k.EscalationCard = "esc-" + core.NewID()
		w.o.cards = append(w.o.cards, render.EscalationCard(render.TaskEscalation{Card: cards.ID(s.k.EscalationCard), Title: s.title(),
			Step: d.Step + 1, Reason: clipText(strings.TrimPrefix(d.Reason, fmt.Sprintf("stuck on step %d: ", d.Step+1)), 150)}))
		w.note(audit.KindTaskEscalated, map[string]any{"step": d.Step + 1, "reason": clipText(d.Reason, 300), "card": s.k.EscalationCard})
	case task.DoStop:
		w.stop = true
		e.closeEscalation(w, "stop", "silas")
		s.k.Summary = "Stopped: " + d.Reason
		w.o.replies = append(w.o.replies, fmt.Sprintf("Stopped the task %q: %s. Nothing further will run for it.", s.title(), d.Reason))
		if s.pl != nil {
			w.o.updates = append(w.o.updates, e.planCard(s, "Stopped: "+d.Reason, false))
		}
		w.note(audit.KindTaskStopped, map[string]any{"reason": d.Reason})
	}
	return nil
}

// closeEscalation edits an open escalation card to show the choice.
func (e *Engine) closeEscalation(w *taskWrite, choice, by string) {
	s := w.s
	if s.k.EscalationCard == "" {
		return
	}
	w.o.updates = append(w.o.updates, render.EscalationCard(render.TaskEscalation{Card: cards.ID(s.k.EscalationCard), Title: s.title(),
		Step: s.m.Step + 1, Reason: "", Chosen: choice, By: by}))
	s.k.EscalationCard = ""
}

func (e *Engine) planCard(s *taskState, outcome string, done bool) *cards.Card {
	p := render.TaskPlan{Card: cards.ID(fmt.Sprintf("plan-%s-%d", s.k.ID, s.k.PlanNo)), Title: s.pl.Title, Steps: s.pl.Steps,
		Outcome: outcome, Done: done, Budget: budgetLine(s.lim)}
	for _, c := range s.pl.Verify {
		name := c.Name
		if name == "" {
			name = "check"
		}
		if len(c.Run) > 0 {
			name += ": " + (core.Action{Argv: c.Run}).CommandLine()
		}
		p.Checks = append(p.Checks, name)
	}
	return render.PlanCard(p)
}

func budgetLine(l task.Limits) string {
	var parts []string
	if l.Tokens > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens", l.Tokens))
	}
	if l.ModelCalls > 0 {
		parts = append(parts, fmt.Sprintf("%d model calls", l.ModelCalls))
	}
	if l.ToolCalls > 0 {
		parts = append(parts, fmt.Sprintf("%d tool calls", l.ToolCalls))
	}
	if l.WallTime > 0 {
		parts = append(parts, l.WallTime.String())
	}
	if l.CostUSD > 0 {
		parts = append(parts, fmt.Sprintf("$%.2f", l.CostUSD))
	}
	return strings.Join(parts, ", ")
}

// taskPlan asks the planner for a (new) plan.
func (e *Engine) taskPlan(ctx context.Context, s *taskState) (bool, error) {
	known := ""
	if s.m.State == task.Replanning && s.pl != nil {
		known = "The previous plan did not work: " + s.m.Failure + "\n\nPrevious plan:\n" + s.pl.Markdown()
	}
	pl, u, err := e.tasks.cfg.Planner.Plan(ctx, s.k.Goal, known)
	if ctx.Err() != nil {
		return false, ctx.Err() // a restart: the call is made again
	}
	w := e.newTaskWrite(s)
	w.modelCall("planner", u)
	if err != nil {
		return e.taskEvent(ctx, w, task.Event{Kind: task.PlanFailed, Detail: clipText(err.Error(), 300)})
	}
	s.pl = pl
	s.k.Plan = pl.Markdown()
	s.k.PlanNo++
	s.lim = s.lim.Apply(pl.Budget)
	w.o.cards = append(w.o.cards, e.planCard(s, "", false))
	w.note(audit.KindTaskPlanned, map[string]any{"plan": s.k.PlanNo, "title": pl.Title, "steps": len(pl.Steps), "checks": len(pl.Verify)})
	return e.taskEvent(ctx, w, task.Event{Kind: task.PlanReady, Steps: len(pl.Steps), HasChecks: len(pl.Verify) > 0})
}

// taskConsult asks the planner for guidance on the stuck step.
func (e *Engine) taskConsult(ctx context.Context, s *taskState) (bool, error) {
	g, u, err := e.tasks.cfg.Planner.Consult(ctx, s.pl, s.m.Step, s.m.Failure)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	w := e.newTaskWrite(s)
	w.modelCall("planner", u)
	w.note(audit.KindTaskConsulted, map[string]any{"step": s.m.Step + 1, "ok": err == nil})
	if err != nil {
		return e.taskEvent(ctx, w, task.Event{Kind: task.GuidanceFailed, Detail: clipText(err.Error(), 300)})
	}
	return e.taskEvent(ctx, w, task.Event{Kind: task.GuidanceReady, Detail: clipText(g, 2000)})
}

// attemptCalls are the calls of the current attempt at the current step.
func attemptCalls(all []store.TaskCall, s *taskState) []store.TaskCall {
	var out []store.TaskCall
	for _, c := range all {
		if c.PlanNo == s.k.PlanNo && c.Step == s.m.Step && c.Attempt == s.m.Attempt {
			out = append(out, c)
		}
	}
	return out
}

// taskStep moves the current step on: record a settled call's result, or
// wait for it, or ask the executor for the next move.
func (e *Engine) taskStep(ctx context.Context, s *taskState) (bool, error) {
	all, err := e.st.TaskCalls(ctx, s.k.ID)
	if err != nil {
		return false, err
	}
	calls := attemptCalls(all, s)
	for _, c := range calls {
		if c.Status != "waiting" {
			continue
		}
		status, text, settled, err := e.callOutcome(ctx, c)
		if err != nil || !settled {
			return false, err
		}
		w := e.newTaskWrite(s)
		res, err := task.Interpret(status, text, func(out string) (string, error) {
			p := "taskout-" + core.NewID()
			w.outputs = append(w.outputs, [2]string{p, out})
			return p, nil
		})
		if err != nil {
			return false, err
		}
		raw, _ := json.Marshal(res)
		w.finished = append(w.finished, finishedCall{id: c.ID, result: raw})
		w.note(audit.KindTaskCallResult, map[string]any{"call": c.ID, "approval": string(c.Approval), "status": status, "evicted": res.Evicted})
		applied, err := e.commitTask(ctx, w)
		return applied || err == nil, err
	}
	b := llm.Briefing{Plan: s.pl, Step: s.m.Step, Attempt: s.m.Attempt, Failure: s.m.Failure, Guidance: s.m.Guidance}
	for _, c := range calls {
		b.History = append(b.History,
			llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: c.CallID, Name: c.Tool, Arguments: c.Arguments}}},
			llm.Message{Role: llm.RoleTool, ToolCallID: c.CallID, Content: llm.Fence("tool result", string(c.Result))})
	}
	out, err := e.tasks.cfg.Executor.Next(ctx, b)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	w := e.newTaskWrite(s)
	if err != nil {
		w.modelCall("executor", llm.Usage{})
		return e.taskEvent(ctx, w, task.Event{Kind: task.StepFailed, Detail: "the model could not be asked: " + clipText(err.Error(), 300)})
	}
	w.modelCall("executor", out.Usage)
	switch {
	case out.Done:
		// The model's claim is not enough: the step's last action must
		// have run and passed its checks.
		if n := len(calls); n > 0 && resultStatus(calls[n-1].Result) == "ok" {
			return e.taskEvent(ctx, w, task.Event{Kind: task.StepSucceeded, Detail: clipText(out.Text, 300)})
		}
		return e.taskEvent(ctx, w, task.Event{Kind: task.StepFailed,
			Detail: "the executor said the step was done, but no action of this attempt ran and passed its checks"})
	case out.Stuck:
		return e.taskEvent(ctx, w, task.Event{Kind: task.StepFailed, Detail: clipText(strings.TrimPrefix(out.Text, "STUCK:"), 500)})
	}
	if reason := s.spent().Exhausted(s.lim, e.now()); reason != "" {
		return e.taskEvent(ctx, w, task.Event{Kind: task.BudgetExhausted, Detail: reason})
	}
	s.setSpent(s.spent().ToolCall())
	tc := out.ToolCall
	if tc.ID == "" {
		tc.ID = "call_" + core.NewID()[:12]
	}
	call := store.TaskCall{TaskID: s.k.ID, PlanNo: s.k.PlanNo, Step: s.m.Step, Attempt: s.m.Attempt, CallID: tc.ID, Tool: tc.Name, Arguments: tc.Arguments, Status: "done"}
	done := func(status, text string) (bool, error) {
		raw, _ := json.Marshal(task.Result{Status: status, Output: text, SizeChars: len([]rune(text)), RehydrationAllowed: true})
		call.Result = raw
		w.calls = append(w.calls, call)
		w.note(audit.KindTaskCallProposed, map[string]any{"tool": tc.Name, "step": s.m.Step + 1, "outcome": status})
		applied, err := e.commitTask(ctx, w)
		return applied || err == nil, err
	}
	if out.Invalid {
		return done("invalid", out.Text+". Call the tool again with valid arguments.")
	}
	c := *out.Call
	pa, ok := c.Action()
	if !ok {
		// ask_user and plan_task are not actions and not offered here as
		// such: tell the model what it can do instead.
		return done("failed", "ask_user is not available while a task runs: choose a sensible default, or answer with STUCK: and the question so the user is asked.")
	}
	label := fmt.Sprintf("Step %d of %d — %s", s.m.Step+1, len(s.pl.Steps), s.pl.Title)
	pa.Intent = label + ": " + pa.Intent
	trust, _ := e.trust.Of(ctx, s.orig)
	w.o.trust = trust
	e.propose(&w.o, pa)
	if len(w.o.appr) == 0 {
		// Not proposed: refused (trust), blocked by policy or malformed.
		// propose told the user; the model is told why, as data.
		why := "not proposed"
		if len(w.o.replies) > 0 {
			why = w.o.replies[len(w.o.replies)-1]
		}
		if res := e.cfg.Policy.Evaluate(pa.Action); trust != core.TrustExternal && res.Decision == "blocked" {
			reason := res.Reason
			if reason == "" {
				reason = "the risk policy blocks it"
			}
			why = "blocked by policy: " + reason
		}
		w.o.replies = append(w.o.replies[:max(len(w.o.replies)-1, 0)], fmt.Sprintf("%s — `%s` was not run: %s The assistant was told.",
			label, pa.Action.CommandLine(), strings.TrimSuffix(why, ".")+"."))
		return done("blocked", why)
	}
	call.Approval, call.Status = w.o.appr[0].ID, "waiting"
	w.calls = append(w.calls, call)
	w.note(audit.KindTaskCallProposed, map[string]any{"tool": tc.Name, "step": s.m.Step + 1, "approval": string(call.Approval), "outcome": "proposed"})
	applied, err := e.commitTask(ctx, w)
	return applied || err == nil, err
}

func resultStatus(raw json.RawMessage) string {
	var r task.Result
	if json.Unmarshal(raw, &r) != nil {
		return ""
	}
	return r.Status
}

// callOutcome reads what became of a call's approval and execution.
// settled=false: still waiting (a tap, the run, its verification).
func (e *Engine) callOutcome(ctx context.Context, c store.TaskCall) (status, text string, settled bool, err error) {
	a, err := e.st.GetApproval(ctx, c.Approval)
	if err != nil {
		return "", "", false, err
	}
	switch a.Status {
	case core.ApprovalDeclined:
		if a.DecidedBy == render.TaskStopped {
			return "declined", "Cancelled because the task was stopped; nothing was run.", true, nil
		}
		return "declined", "The user declined this call; nothing was run.", true, nil
	case core.ApprovalExpired:
		return "declined", "The approval card expired without a decision; nothing was run.", true, nil
	case core.ApprovalApproved:
	default:
		return "", "", false, nil
	}
	ex, err := e.st.GetExecution(ctx, a.ID)
	if errors.Is(err, core.ErrNotFound) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, err
	}
	switch ex.Status {
	case core.ExecRefused:
		return "refused", "Refused before it ran: " + ex.Reason + ". Nothing was run.", true, nil
	case core.ExecInterrupted:
		return "interrupted", "Interrupted (" + ex.Reason + "): it may or may not have completed, and it was not run again.", true, nil
	case core.ExecVerified, core.ExecFailed:
	default:
		return "", "", false, nil
	}
	out := ""
	if ex.Result != nil {
		out = fullOutput(ex.Result)
		if ex.Result.OutputRef != "" {
			if full, err := e.st.GetOutput(ctx, ex.Result.OutputRef); err == nil {
				out = full
			}
		}
		var act core.Action
		if json.Unmarshal(a.ActionCanonical, &act) == nil && len(act.Secrets) > 0 {
			out = "(output hidden: the action received a secret)"
		}
	}
	// Credentials the program printed are cut out before the model sees
	// them (secret values are already redacted by the execution).
	out = redactText(out)
	status = "ok"
	if ex.Status == core.ExecFailed {
		status = "failed"
	}
	code := 0
	if ex.Result != nil {
		code = ex.Result.ExitCode
	}
	return status, fmt.Sprintf("exit code %d; %s\n%s", code, ex.Reason, out), true, nil
}

// taskVerify runs the plan's checks: each command through the risk policy
// (only an "allow" runs without a person; anything else fails the check),
// then the verification sandbox.
func (e *Engine) taskVerify(ctx context.Context, s *taskState) (bool, error) {
	checks := s.pl.Verify
	report := verifyReport{results: make([]verifyLine, len(checks))}
	var run []int
	var runnable = checks[:0:0]
	for i, c := range checks {
		name := c.Name
		if name == "" {
			name = fmt.Sprintf("check %d", i+1)
		}
		report.results[i].name = name
		if len(c.Run) > 0 {
			res := e.cfg.Policy.Evaluate(core.Action{Tool: "shell", Argv: c.Run})
			if res.Decision != "allow" {
				why := res.Reason
				if why == "" {
					why = "it needs a person's approval"
				}
				report.results[i].reason = fmt.Sprintf("not run: the risk policy says %s (%s)", res.Decision, why)
				continue
			}
		}
		run = append(run, i)
		runnable = append(runnable, c)
	}
	if len(runnable) > 0 {
		// No execution evidence: a check judging the (absent) execution's
		// own exit code fails rather than passes by default.
		rep := e.cfg.Verifier.Run(ctx, runnable, verifyEvidence())
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		for j, r := range rep.Results {
			i := run[j]
			report.results[i].passed, report.results[i].reason = r.Passed, r.Reason
		}
	}
	w := e.newTaskWrite(s)
	summary, passed := report.summary()
	w.note(audit.KindTaskVerified, map[string]any{"plan": s.k.PlanNo, "passed": passed, "summary": clipText(summary, 500)})
	if !passed {
		return e.taskEvent(ctx, w, task.Event{Kind: task.VerifyFailed, Detail: summary})
	}
	w.checks = summary
	return e.taskEvent(ctx, w, task.Event{Kind: task.VerifyPassed})
}

// finishSummary prepares the report of a verified task, in plain words
// with what was run.
func (e *Engine) finishSummary(ctx context.Context, w *taskWrite) error {
	s := w.s
	all, err := e.st.TaskCalls(ctx, s.k.ID)
	if err != nil {
		return err
	}
	var ran []string
	for _, c := range all {
		if st := resultStatus(c.Result); c.Approval == "" || (st != "ok" && st != "failed") {
			continue
		}
		a, err := e.st.GetApproval(ctx, c.Approval)
		if err != nil {
			return err
		}
		var act core.Action
		if json.Unmarshal(a.ActionCanonical, &act) == nil {
			ran = append(ran, fmt.Sprintf("`%s` (step %d)", act.CommandLine(), c.Step+1))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Done: %s ✓", s.pl.Title)
	if len(ran) > 0 {
		fmt.Fprintf(&b, "\nWhat ran: %s.", strings.Join(ran, "; "))
	}
	if w.checks != "" {
		fmt.Fprintf(&b, "\nChecked by the gateway: %s.", w.checks)
	} else {
		b.WriteString("\nThe plan had no final checks; each action passed its own.")
	}
	fmt.Fprintf(&b, "\nSpent: %d model call(s), %d tokens, %d tool call(s).", s.k.ModelCalls, s.k.Tokens, s.k.ToolCalls)
	s.k.Summary = b.String()
	w.o.replies = append(w.o.replies, s.k.Summary)
	w.o.updates = append(w.o.updates, e.planCard(s, "Done: verified by the gateway.", true))
	w.note(audit.KindTaskDone, map[string]any{"checks": clipText(w.checks, 300), "ran": len(ran)})
	return nil
}

func clipText(s string, n int) string {
	s = strings.TrimSpace(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// verifyLine is one plan check's result; verifyReport all of them.
type verifyLine struct {
	name, reason string
	passed       bool
}

type verifyReport struct{ results []verifyLine }

func (r verifyReport) summary() (string, bool) {
	if len(r.results) == 0 {
		return "no checks", false
	}
	ok := true
	parts := make([]string, len(r.results))
	for i, l := range r.results {
		if l.passed {
			parts[i] = l.name + " ✓"
			continue
		}
		ok = false
		parts[i] = l.name + " ✗ (" + l.reason + ")"
	}
	return strings.Join(parts, "; "), ok
}

// verifyEvidence is the evidence plan checks run against: there is no
// execution of their own, so a check that would judge one (its exit code
// or output) fails instead of passing on a zero value.
func verifyEvidence() verify.Evidence { return verify.Evidence{ExitCode: -1} }

// redactText cuts credentials out of tool output before a model sees it.
func redactText(s string) string {
	out, _ := redact.Redact(s)
	return out
}
