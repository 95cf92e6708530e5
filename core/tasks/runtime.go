// Package tasks is the LLM agent's durable task runtime (docs/agent.md).
// A task is a row in PostgreSQL holding the recovery machine
// (core/agent/llm/task), the plan and the spend; it is advanced by a
// per-task job that reads the row, does one thing (a model call, a
// proposal, recording a result, the final checks) and writes the next state
// with a compare-and-swap on the row's rev. Nothing lives only in memory:
// at start every unfinished task is advanced again, and a sweep re-advances
// them periodically (approval expiry, wall-time budget). A model call in
// flight at a restart is simply made again; an execution in flight is
// reported interrupted by the engine's execution resume and never re-run.
//
// The model proposes; the core decides. Each tool call becomes a
// core.Action that a step hands to the core's proposing port (Actions,
// declared here) inside the step's transaction — the same trust check,
// policy, signed request, card, token and sandbox as /run — and only its
// recorded execution and verification, read back from the store, become
// the result the model is shown. The plan's checks are run by the
// runtime, through policy, in the verification sandbox; only they mark a
// task done.
//
// The runtime never imports the engine, never approves, executes or
// verifies an action itself, never sees a secret's value (the executor is
// shown names), and never trusts the model's word that a step or a task is
// done. A person's turn that reaches a task (/stop, an answer, a tap)
// writes into that turn's outcome through Out, committed with the turn.
package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/plan"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/redact"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
)

// Actions is the core's proposing port, as a task step uses it
// (core/propose's Steps).
type Actions interface {
	// Propose puts pa through the path of /run for the task's origin
	// turn, inside tx: the sender's trust, validation, policy, the signed
	// request (its Task set to task, so its decision and execution queue
	// the task's step) and its card (queued to origin's conversation) and
	// — when policy allows it — the approval with its single-use token.
	Propose(ctx context.Context, tx propose.Tx, task string, origin core.Turn, pa core.ProposedAction) (Proposal, error)
	// Proposed is called once the transaction of p committed: an action
	// policy approved starts to run.
	Proposed(p Proposal)
	// StopRuns kills the running executions of a stopped task; each is
	// recorded interrupted, never run again.
	StopRuns(ids []core.ApprovalID)
}

// Proposal is what became of a proposed action, in its transaction.
type Proposal = propose.Step

// Outbox delivers what a commit queued for a conversation.
type Outbox interface {
	Kick(conv core.ConversationID, n int)
}

// Config enables the task runtime.
type Config struct {
	Store    *store.Store
	Planner  llm.Planner
	Executor llm.Executor
	// MCPTools, when set, lists the pinned tools of the configured MCP
	// servers (core/mcptools): the executor is offered them next to its
	// own at each move, and a call to one is proposed like any other tool
	// call — policy, card, single-use token — bound to the pinned
	// definition (the core refuses it if the pin no longer holds).
	MCPTools func(context.Context) ([]llm.MCPTool, error)
	// Policy is the risk policy plan checks are run through; Verifier
	// runs the allowed ones in the verification sandbox.
	Policy   *policy.Policy
	Verifier *verify.Runner
	// Limits are the configured budget per task (llm.budget.*); a plan may
	// only lower them.
	Limits task.Limits
	// Recovery sets the attempts per step and the re-plans per task; the
	// plan chooses on_stuck.
	Recovery task.Policy
	// Sweep is how often unfinished tasks are re-advanced (default 5s).
	Sweep  time.Duration
	Logger *slog.Logger
	Now    func() time.Time
}

// Runtime advances tasks.
type Runtime struct {
	cfg     Config
	st      *store.Store
	log     *slog.Logger
	actions Actions
	out     Outbox

	mu      sync.Mutex
	running map[string]*taskJob
	closing bool
	jobs    sync.WaitGroup
	// work is the jobs' context, cancelled when Close runs out of time.
	work       context.Context
	cancelWork context.CancelFunc
}

type taskJob struct{ again bool }

// New builds the runtime on the core's proposing port and the outbox.
func New(cfg Config, actions Actions, out Outbox) (*Runtime, error) {
	if cfg.Store == nil || cfg.Policy == nil || actions == nil || out == nil {
		return nil, errors.New("tasks: Store, Policy, the proposing port and the outbox are required")
	}
	if cfg.Verifier == nil {
		cfg.Verifier = &verify.Runner{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sweep <= 0 {
		cfg.Sweep = 5 * time.Second
	}
	r := &Runtime{cfg: cfg, st: cfg.Store, log: cfg.Logger, actions: actions, out: out, running: map[string]*taskJob{}}
	r.work, r.cancelWork = context.WithCancel(context.Background())
	return r, nil
}

// Close stops starting jobs and waits for the running ones until ctx
// ends; then it cancels them (each resumes from its row at the next start)
// and waits for them to return.
func (r *Runtime) Close(ctx context.Context) {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.jobs.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.cancelWork()
		<-done
	}
	r.cancelWork()
}

// kick advances a task in the background unless a step for it runs; then
// that step goes round once more (the sweep: state changes queue a step
// job instead). Not once Close began: the task resumes from its row at the
// next start anyway.
func (r *Runtime) kick(id string) {
	if !r.claim(id) {
		return
	}
	// The job locks r.mu only after its first advance, so it finds itself
	// registered.
	go func() {
		defer r.jobs.Done()
		r.runTask(r.work, id)
	}()
}

func (r *Runtime) runTask(ctx context.Context, id string) {
	log := r.log.With(slog.String("task", id))
	for {
		more, err := r.advanceTask(ctx, id)
		if err != nil && ctx.Err() == nil {
			// A database error: the sweep tries again later.
			log.Error("task: advance failed", slog.Any("err", err))
			more = false
		}
		r.mu.Lock()
		j := r.running[id]
		if ctx.Err() != nil || (!more && !j.again) {
			delete(r.running, id)
			r.mu.Unlock()
			return
		}
		j.again = false
		r.mu.Unlock()
	}
}

// Resume advances every unfinished task (at start, and as the sweep).
func (r *Runtime) Resume(ctx context.Context) error {
	list, err := r.st.ActiveTasks(ctx)
	if err != nil {
		return fmt.Errorf("tasks: resume: %w", err)
	}
	for _, k := range list {
		r.kick(k.ID)
	}
	return nil
}

// SweepEvery is how often Resume should run to re-advance unfinished
// tasks (Config.Sweep); the background room (core/background) runs it.
func (r *Runtime) SweepEvery() time.Duration { return r.cfg.Sweep }

// taskState is a stored task decoded.
type taskState struct {
	k    core.Task
	m    task.Machine
	lim  task.Limits
	pl   *plan.Plan // nil before the first plan
	orig core.Turn
}

func (r *Runtime) decodeTask(k core.Task) (*taskState, error) {
	s := &taskState{k: k}
	if err := json.Unmarshal(k.Machine, &s.m); err != nil {
		return nil, fmt.Errorf("tasks: task %s: machine: %w", k.ID, err)
	}
	if err := json.Unmarshal(k.Limits, &s.lim); err != nil {
		return nil, fmt.Errorf("tasks: task %s: limits: %w", k.ID, err)
	}
	if err := json.Unmarshal(k.Origin, &s.orig); err != nil {
		return nil, fmt.Errorf("tasks: task %s: origin: %w", k.ID, err)
	}
	if k.Plan != "" {
		pl, err := plan.Parse(k.Plan)
		if err != nil {
			return nil, fmt.Errorf("tasks: task %s: stored plan: %w", k.ID, err)
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

func (s *taskState) recovery(cfg Config) task.Policy {
	p := cfg.Recovery
	if s.pl != nil {
		p.OnStuck = s.pl.OnStuck
	}
	return p
}

// taskWrite is one transition of a task, written in one transaction with
// the messages, cards and approvals it causes.
type taskWrite struct {
	s *taskState
	// fx is what the transition shows in the task's conversation.
	fx shown
	// action, when set, is the call the transition proposes: the core's
	// port proposes it inside the transaction, and proposed records what
	// became of it (the call row to write, what it shows).
	action   *core.ProposedAction
	proposed func(o *shown, p Proposal) core.TaskCall
	calls    []core.TaskCall
	// dropped are the further tool calls of the executor's reply, stored
	// after the call taken (whatever became of it) as answered "not run".
	dropped  []core.TaskCall
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
	// closeQuestion is the open question card a stop closes.
	closeQuestion string
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

func (r *Runtime) newTaskWrite(s *taskState) *taskWrite {
	return &taskWrite{s: s, cancel: new([]core.ApprovalID)}
}

func (w *taskWrite) note(kind audit.Kind, data map[string]any) { w.fx.Audit(w.entry(kind, data)) }

// entry is an audit entry of the task, in the gateway's name.
func (w *taskWrite) entry(kind audit.Kind, data map[string]any) audit.Entry {
	if data == nil {
		data = map[string]any{}
	}
	data["task"] = w.s.k.ID
	return audit.Entry{Kind: kind, Actor: "silas", Conversation: string(w.s.k.Conversation), Data: data}
}

// modelCall records a model call's usage. A call that needed its repair
// round-trip counts as the two calls it was (and both calls' tokens): one
// spend row each, the tokens, reported as one sum, on the first.
func (w *taskWrite) modelCall(role string, u llm.Usage) {
	for i := range u.ModelCalls() {
		tokens, r := u.TotalTokens, role
		if i > 0 {
			tokens, r = 0, role+" repair"
		}
		w.s.setSpent(w.s.spent().ModelCall(tokens, -1))
		w.spend = append(w.spend, spendRow{role: r, tokens: tokens})
	}
}

// casTask writes the task row if it is still the one read; ok=false means
// another writer got there first and nothing may be written.
func (r *Runtime) casTask(ctx context.Context, tx *store.Tx, w *taskWrite) (bool, error) {
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
	ok, err := tx.UpdateTask(ctx, k)
	if ok && k.Final() && !w.s.k.Final() {
		flowWake(tx, k) // an agent.run node's task ended: its run goes on
	}
	return ok, err
}

// writeTaskRows writes what the transition adds besides the task row (after
// casTask and after any approval the calls reference).
func (r *Runtime) writeTaskRows(ctx context.Context, tx *store.Tx, o Out, w *taskWrite, calls []core.TaskCall) error {
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
				o.Update(render.Approval(a, nil, 0))
				o.Audit(audit.Entry{Kind: audit.KindApprovalDeclined, Actor: "silas", Conversation: string(a.Conversation),
					Data: map[string]any{"approval": string(a.ID), "task": id, "reason": "task stopped"}})
			}
		}
		stored, err := r.st.TaskCalls(ctx, id)
		if err != nil {
			return err
		}
		for _, c := range stored {
			if c.Status == "waiting" && c.Approval != "" {
				*w.cancel = append(*w.cancel, c.Approval)
			}
			if c.Status == "waiting" && c.Tool == llm.ToolAskUser && w.closeQuestion != "" {
				o.Update(r.questionCard(w.s, w.closeQuestion, c, render.TaskQuestion{Cancelled: "Cancelled: its task was stopped."}))
			}
		}
	}
	for _, c := range calls {
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
// the proposal (its approval request, and policy's approval), task rows,
// messages. applied=false: the task changed meanwhile and nothing was
// written.
func (r *Runtime) commitTask(ctx context.Context, w *taskWrite) (bool, error) {
	var applied bool
	var final *shown
	var prop Proposal
	k := w.s.k
	err := r.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		applied, prop = false, Proposal{}
		o := w.fx.clone() // a fresh copy on every (re)try
		*w.cancel = nil
		ok, err := r.casTask(ctx, tx, w)
		if err != nil || !ok {
			return nil, err
		}
		calls := slices.Clone(w.calls)
		if w.action != nil {
			if prop, err = r.actions.Propose(ctx, tx, k.ID, w.s.orig, *w.action); err != nil {
				return nil, err
			}
			o.Audit(prop.Audit...)
			calls = append(calls, w.proposed(o, prop))
		}
		calls = append(calls, w.dropped...)
		if err := r.writeTaskRows(ctx, tx, o, w, calls); err != nil {
			return nil, err
		}
		if err := send(tx, k.Channel, k.Conversation, o); err != nil {
			return nil, err
		}
		applied, final = true, o
		return o.audit, nil
	})
	if err != nil || !applied {
		return false, err
	}
	if prop.Approval != "" {
		r.actions.Proposed(prop)
	}
	r.actions.StopRuns(*w.cancel)
	if n := len(final.replies) + len(final.cards) + len(final.updates) + prop.Messages; n > 0 {
		r.out.Kick(k.Conversation, n)
	}
	return true, nil
}

// send queues what o shows to the task's conversation inside tx, as a
// turn's are: replies, new cards, then edits of cards sent earlier.
func send(tx *store.Tx, ch core.ChannelName, conv core.ConversationID, o *shown) error {
	for _, t := range o.replies {
		if err := tx.QueueMessage(ch, core.OpSend, "r-"+core.NewID(), core.OutMessage{Conversation: conv, Text: t}); err != nil {
			return err
		}
	}
	for _, c := range o.cards {
		if err := tx.QueueMessage(ch, core.OpSend, string(c.ID), core.OutMessage{Conversation: conv, Card: c}); err != nil {
			return err
		}
	}
	for _, c := range o.updates {
		if err := tx.QueueMessage(ch, core.OpUpdate, string(c.ID), core.OutMessage{Conversation: conv, Card: c}); err != nil {
			return err
		}
	}
	return nil
}

// advanceTask does the next thing for a task. more: call again at once.
func (r *Runtime) advanceTask(ctx context.Context, id string) (more bool, err error) {
	k, err := r.st.GetTask(ctx, id)
	if errors.Is(err, core.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if k.Final() {
		return false, nil
	}
	s, err := r.decodeTask(k)
	if err != nil {
		return false, err
	}
	// Before anything else (a model call, the checks): every limit but the
	// tool calls, which are counted when a call is proposed — so the last
	// call the budget allows still runs and is reported.
	lim := s.lim
	lim.ToolCalls = 0
	if reason := s.spent().Exhausted(lim, r.cfg.Now()); reason != "" {
		return r.taskEvent(ctx, r.newTaskWrite(s), task.Event{Kind: task.BudgetExhausted, Detail: reason})
	}
	switch s.m.State {
	case task.Planning, task.Replanning:
		return r.taskPlan(ctx, s)
	case task.Running:
		return r.taskStep(ctx, s)
	case task.Verifying:
		return r.taskVerify(ctx, s)
	case task.Consulting:
		return r.taskConsult(ctx, s)
	}
	return false, nil // escalated: waiting for the user
}

// taskEvent applies ev with w's other changes and commits. A stale write
// (the task changed meanwhile) is dropped and the caller reads again.
func (r *Runtime) taskEvent(ctx context.Context, w *taskWrite, ev task.Event) (bool, error) {
	if err := r.applyEvent(w, ev); err != nil {
		return false, err
	}
	if w.s.m.State == task.Done {
		if err := r.finishSummary(ctx, w); err != nil {
			return false, err
		}
	}
	applied, err := r.commitTask(ctx, w)
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
func (r *Runtime) applyEvent(w *taskWrite, ev task.Event) error {
	s := w.s
	before := s.m
	m, d, err := task.Next(s.m, ev, s.recovery(r.cfg))
	if err != nil {
		return fmt.Errorf("tasks: task %s: %w", s.k.ID, err)
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
		w.fx.Card(render.EscalationCard(render.TaskEscalation{Card: cards.ID(s.k.EscalationCard), Title: s.title(),
			Step: d.Step + 1, Reason: clipText(strings.TrimPrefix(d.Reason, fmt.Sprintf("stuck on step %d: ", d.Step+1)), 150)}))
		w.note(audit.KindTaskEscalated, map[string]any{"step": d.Step + 1, "reason": clipText(d.Reason, 300), "card": s.k.EscalationCard})
	case task.DoStop:
		w.stop = true
		r.closeEscalation(w, "stop", "silas")
		w.closeQuestion, s.k.QuestionCard = s.k.QuestionCard, ""
		s.k.Summary = "Stopped: " + d.Reason
		w.fx.Reply("%s", fmt.Sprintf("Stopped the task %q: %s. Nothing further will run for it.", s.title(), d.Reason))
		if s.pl != nil {
			w.fx.Update(r.planCard(s, "Stopped: "+d.Reason, false))
		}
		w.note(audit.KindTaskStopped, map[string]any{"reason": d.Reason})
	}
	return nil
}

// closeEscalation edits an open escalation card to show the choice.
func (r *Runtime) closeEscalation(w *taskWrite, choice, by string) {
	s := w.s
	if s.k.EscalationCard == "" {
		return
	}
	w.fx.Update(render.EscalationCard(render.TaskEscalation{Card: cards.ID(s.k.EscalationCard), Title: s.title(),
		Step: s.m.Step + 1, Reason: "", Chosen: choice, By: by}))
	s.k.EscalationCard = ""
}

func (r *Runtime) planCard(s *taskState, outcome string, done bool) *cards.Card {
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
func (r *Runtime) taskPlan(ctx context.Context, s *taskState) (bool, error) {
	known := ""
	if s.m.State == task.Replanning && s.pl != nil {
		known = "The previous plan did not work: " + s.m.Failure + "\n\nPrevious plan:\n" + s.pl.Markdown()
	}
	pl, u, err := r.cfg.Planner.Plan(ctx, s.k.Goal, known)
	if ctx.Err() != nil {
		return false, ctx.Err() // a restart: the call is made again
	}
	w := r.newTaskWrite(s)
	w.modelCall("planner", u)
	if err != nil {
		return r.taskEvent(ctx, w, task.Event{Kind: task.PlanFailed, Detail: clipText(err.Error(), 300)})
	}
	s.pl = pl
	s.k.Plan = pl.Markdown()
	s.k.PlanNo++
	s.lim = s.lim.Apply(pl.Budget)
	w.fx.Card(r.planCard(s, "", false))
	w.note(audit.KindTaskPlanned, map[string]any{"plan": s.k.PlanNo, "title": pl.Title, "steps": len(pl.Steps), "checks": len(pl.Verify)})
	return r.taskEvent(ctx, w, task.Event{Kind: task.PlanReady, Steps: len(pl.Steps), HasChecks: len(pl.Verify) > 0})
}

// taskConsult asks the planner for guidance on the stuck step.
func (r *Runtime) taskConsult(ctx context.Context, s *taskState) (bool, error) {
	g, u, err := r.cfg.Planner.Consult(ctx, s.pl, s.m.Step, s.m.Failure)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	w := r.newTaskWrite(s)
	w.modelCall("planner", u)
	w.note(audit.KindTaskConsulted, map[string]any{"step": s.m.Step + 1, "ok": err == nil})
	if err != nil {
		return r.taskEvent(ctx, w, task.Event{Kind: task.GuidanceFailed, Detail: clipText(err.Error(), 300)})
	}
	return r.taskEvent(ctx, w, task.Event{Kind: task.GuidanceReady, Detail: clipText(g, 2000)})
}

// attemptCalls are the calls of the current attempt at the current step.
func attemptCalls(all []core.TaskCall, s *taskState) []core.TaskCall {
	var out []core.TaskCall
	for _, c := range all {
		if c.PlanNo == s.k.PlanNo && c.Step == s.m.Step && c.Attempt == s.m.Attempt {
			out = append(out, c)
		}
	}
	return out
}

// taskStep moves the current step on: record a settled call's result, or
// wait for it, or ask the executor for the next move.
func (r *Runtime) taskStep(ctx context.Context, s *taskState) (bool, error) {
	all, err := r.st.TaskCalls(ctx, s.k.ID)
	if err != nil {
		return false, err
	}
	// The task row and its calls are two reads. Calls change only with a
	// bump of the row's Rev (an answer commits both), so an unchanged Rev
	// means the calls match the row; otherwise read again rather than ask
	// the model from a mix of two states, whose reply the stale commit
	// would then drop (a lost tool call, a wasted model call).
	if cur, err := r.st.GetTask(ctx, s.k.ID); err != nil {
		return false, err
	} else if cur.Rev != s.k.Rev {
		return true, nil
	}
	calls := attemptCalls(all, s)
	for _, c := range calls {
		if c.Status != "waiting" {
			continue
		}
		if c.Approval == "" {
			// A question (ask_user): its answer finishes the call, inside
			// the answering turn's transaction, with the task's step job.
			return false, nil
		}
		status, text, settled, err := r.callOutcome(ctx, c)
		if err != nil || !settled {
			return false, err
		}
		w := r.newTaskWrite(s)
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
		applied, err := r.commitTask(ctx, w)
		return applied || err == nil, err
	}
	b := llm.Briefing{Plan: s.pl, Step: s.m.Step, Attempt: s.m.Attempt, Failure: s.m.Failure, Guidance: s.m.Guidance}
	for _, c := range calls {
		// A person's answer is data too, labelled as what it is.
		source := "tool result"
		if c.Tool == llm.ToolAskUser {
			source = "user answer"
		}
		b.History = append(b.History,
			llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: c.CallID, Name: c.Tool, Arguments: c.Arguments}}},
			llm.Message{Role: llm.RoleTool, ToolCallID: c.CallID, Content: llm.Fence(source, string(c.Result))})
	}
	// The model may name stored secrets, never see them.
	names, err := r.secretNames(ctx)
	if err != nil {
		return false, err
	}
	b.Secrets = names
	out, err := r.executor(ctx).Next(ctx, b)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	w := r.newTaskWrite(s)
	w.modelCall("executor", out.Usage)
	if err != nil {
		return r.taskEvent(ctx, w, task.Event{Kind: task.StepFailed, Detail: "the model could not be asked: " + clipText(err.Error(), 300)})
	}
	switch {
	case out.Done:
		// The model's claim is not enough: the step's last action must
		// have run and passed its checks (a question's answer or an output
		// read back is not an action).
		if c, ok := lastAction(calls); ok && resultStatus(c.Result) == "ok" {
			return r.taskEvent(ctx, w, task.Event{Kind: task.StepSucceeded, Detail: clipText(out.Text, 300)})
		}
		return r.taskEvent(ctx, w, task.Event{Kind: task.StepFailed,
			Detail: "the executor said the step was done, but no action of this attempt ran and passed its checks"})
	case out.Stuck:
		return r.taskEvent(ctx, w, task.Event{Kind: task.StepFailed, Detail: clipText(strings.TrimPrefix(out.Text, "STUCK:"), 500)})
	}
	if out.Invalid {
		// Invalid again after its repair round-trip: the attempt failed
		// (retry, consult, re-plan, escalate).
		return r.taskEvent(ctx, w, task.Event{Kind: task.StepFailed, Detail: "the executor's tool call stayed invalid after one repair: " + clipText(out.Text, 300)})
	}
	if reason := s.spent().Exhausted(s.lim, r.cfg.Now()); reason != "" {
		return r.taskEvent(ctx, w, task.Event{Kind: task.BudgetExhausted, Detail: reason})
	}
	s.setSpent(s.spent().ToolCall())
	tc := out.ToolCall
	if tc.ID == "" {
		tc.ID = "call_" + core.NewID()[:12]
	}
	call := core.TaskCall{TaskID: s.k.ID, PlanNo: s.k.PlanNo, Step: s.m.Step, Attempt: s.m.Attempt, CallID: tc.ID, Tool: tc.Name, Arguments: tc.Arguments, Status: "done"}
	label := fmt.Sprintf("Step %d of %d — %s", s.m.Step+1, len(s.pl.Steps), s.pl.Title)
	notRun(w, call, out.Dropped, label)
	done := func(status, text string) (bool, error) {
		raw, _ := json.Marshal(task.Result{Status: status, Output: text, SizeChars: len([]rune(text)), RehydrationAllowed: true})
		call.Result = raw
		w.calls = append(w.calls, call)
		w.note(audit.KindTaskCallProposed, map[string]any{"tool": tc.Name, "step": s.m.Step + 1, "outcome": status})
		applied, err := r.commitTask(ctx, w)
		return applied || err == nil, err
	}
	c := *out.Call
	switch c.Name {
	case llm.ToolAskUser:
		return r.ask(ctx, w, call, c)
	case llm.ToolReadOutput:
		text, ok, err := r.rehydrate(ctx, s.k.ID, c.Pointer)
		if err != nil {
			return false, err
		}
		status := "ok"
		if !ok {
			status = "failed"
		}
		w.note(audit.KindTaskRehydrated, map[string]any{"pointer": c.Pointer, "ok": ok, "chars": len([]rune(text))})
		return done(status, text)
	}
	if !flowToolAllowed(s.k, c.Name) {
		// An agent.run node's tools list: the model is told, nothing is proposed.
		return done("blocked", c.Name+" is not allowed in this flow step (allowed: "+strings.Join(s.k.FlowTools, ", ")+").")
	}
	pa, ok := c.Action()
	if !ok {
		// plan_task is not offered here; nothing else gets this far.
		return done("failed", c.Name+" is not available while a task runs.")
	}
	pa.Intent = label + ": " + pa.Intent
	w.action = &pa
	w.proposed = func(o *shown, p Proposal) core.TaskCall {
		call := call
		if p.Approval == "" {
			// Not proposed: refused (trust), blocked by policy or malformed.
			// The user is told what was not run; the model is told why, as
			// data.
			why := p.Refused
			o.Reply("%s — `%s` was not run: %s The assistant was told.", label, pa.Action.CommandLine(), strings.TrimSuffix(why, ".")+".")
			raw, _ := json.Marshal(task.Result{Status: "blocked", Output: why, SizeChars: len([]rune(why)), RehydrationAllowed: true})
			call.Result = raw
			o.Audit(w.entry(audit.KindTaskCallProposed, map[string]any{"tool": tc.Name, "step": s.m.Step + 1, "outcome": "blocked"}))
			return call
		}
		call.Approval, call.Status = p.Approval, "waiting"
		o.Audit(w.entry(audit.KindTaskCallProposed, map[string]any{"tool": tc.Name, "step": s.m.Step + 1, "approval": string(call.Approval), "outcome": "proposed"}))
		return call
	}
	applied, err := r.commitTask(ctx, w)
	return applied || err == nil, err
}

// executor is the configured executor offered the MCP tools pinned now
// (none when they cannot be listed: the step goes on with Silas's own).
func (r *Runtime) executor(ctx context.Context) llm.Executor {
	ex := r.cfg.Executor
	if r.cfg.MCPTools == nil {
		return ex
	}
	list, err := r.cfg.MCPTools(ctx)
	if err != nil {
		r.log.Warn("could not list the pinned MCP tools; the executor goes on without them", slog.Any("err", err))
	}
	ex.Tools.MCP = list
	return ex
}

// statusNotRun is the result of a tool call the executor made beside the
// one taken from its reply: answered, never run.
const statusNotRun = "not_run"

// notRun answers the executor's further calls of one reply (dropped; taken
// is the first, the one the step goes on with): each is stored after the
// taken call, done, with a result that says it was not run — which the
// model reads in the history of its next request, call by call — and the
// person is told how many were not run. One call per move keeps each
// action one proposal, one card, one decision.
func notRun(w *taskWrite, taken core.TaskCall, dropped []llm.ToolCall, label string) {
	if len(dropped) == 0 {
		return
	}
	for i, d := range dropped {
		c := taken
		c.CallID, c.Tool, c.Arguments = d.ID, d.Name, d.Arguments
		if c.CallID == "" || c.CallID == taken.CallID {
			c.CallID = fmt.Sprintf("%s_notrun%d", taken.CallID, i+1)
		}
		why := fmt.Sprintf("Not run: one tool call per step. Your reply had %d tool calls; only the first (%s) was taken, and this call (%s) was not run. Call it again, on its own, if it is still needed.",
			len(dropped)+1, oneLineName(taken.Tool), oneLineName(d.Name))
		raw, _ := json.Marshal(task.Result{Status: statusNotRun, Output: why, SizeChars: len([]rune(why)), RehydrationAllowed: true})
		c.Result = raw
		w.dropped = append(w.dropped, c)
		w.note(audit.KindTaskCallProposed, map[string]any{"tool": oneLineName(d.Name), "step": w.s.m.Step + 1, "outcome": statusNotRun})
	}
	w.fx.Reply("%s — the assistant asked for %d tool calls at once; only the first was taken. The other %d were not run, and the assistant was told.",
		label, len(dropped)+1, len(dropped))
}

// oneLineName is a tool name the model wrote, bounded for a message or an
// audit entry.
func oneLineName(name string) string { return clipText(strings.Join(strings.Fields(name), " "), 40) }

// lastAction is the attempt's last call that was to act (not ask_user or
// read_output, nor a call answered as not run).
func lastAction(calls []core.TaskCall) (core.TaskCall, bool) {
	for i := len(calls) - 1; i >= 0; i-- {
		if resultStatus(calls[i].Result) == statusNotRun {
			continue
		}
		if t := calls[i].Tool; t != llm.ToolAskUser && t != llm.ToolReadOutput {
			return calls[i], true
		}
	}
	return core.TaskCall{}, false
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
func (r *Runtime) callOutcome(ctx context.Context, c core.TaskCall) (status, text string, settled bool, err error) {
	a, err := r.st.GetApproval(ctx, c.Approval)
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
	ex, err := r.st.GetExecution(ctx, a.ID)
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
			if full, err := r.st.GetOutput(ctx, ex.Result.OutputRef); err == nil {
				out = full
			}
		}
		var act core.Action
		if json.Unmarshal(a.ActionCanonical, &act) == nil && len(act.Secrets) > 0 {
			// Not one byte of it: it may hold the secret in a form no
			// redaction finds. The exit code and the verdict still go.
			out = core.SecretOutputWithheld
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
// — "allow" runs it in the verification sandbox, "auth_required" proposes
// it as an action (card, tap, sandbox; the plan's check judges the run),
// "blocked" fails the check — and judges them when none waits for a tap.
func (r *Runtime) taskVerify(ctx context.Context, s *taskState) (bool, error) {
	checks := s.pl.Verify
	report := verifyReport{results: make([]verifyLine, len(checks))}
	var run []int
	var runnable = checks[:0:0]
	asked, err := r.checkCalls(ctx, s)
	if err != nil {
		return false, err
	}
	waiting := false
	for i, c := range checks {
		name := c.Name
		if name == "" {
			name = fmt.Sprintf("check %d", i+1)
		}
		report.results[i].name = name
		if len(c.Run) > 0 {
			res := r.cfg.Policy.Evaluate(core.Action{Tool: "shell", Argv: c.Run})
			if res.Decision == "auth_required" {
				// Like any other action: a card, a tap, the sandbox; the
				// execution's own check is the plan's check.
				call, ok := asked[i]
				if !ok {
					return r.proposeCheck(ctx, s, i, name, c)
				}
				status, text, settled, err := r.callOutcome(ctx, call)
				if err != nil {
					return false, err
				}
				if !settled {
					waiting = true
					continue
				}
				report.results[i].passed = status == "ok"
				report.results[i].reason = "approved and run: " + firstLine(text)
				if status != "ok" {
					report.results[i].reason = status + ": " + firstLine(text)
				}
				continue
			}
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
	if waiting {
		return false, nil // a check's card waits for its tap (its decision or its execution queues the task's step)
	}
	if len(runnable) > 0 {
		// No execution evidence: a check judging the (absent) execution's
		// own exit code fails rather than passes by default.
		rep := r.cfg.Verifier.Run(ctx, runnable, verifyEvidence())
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		for j, r := range rep.Results {
			i := run[j]
			report.results[i].passed, report.results[i].reason = r.Passed, r.Reason
		}
	}
	w := r.newTaskWrite(s)
	summary, passed := report.summary()
	w.note(audit.KindTaskVerified, map[string]any{"plan": s.k.PlanNo, "passed": passed, "summary": clipText(summary, 500)})
	if !passed {
		return r.taskEvent(ctx, w, task.Event{Kind: task.VerifyFailed, Detail: summary})
	}
	w.checks = summary
	return r.taskEvent(ctx, w, task.Event{Kind: task.VerifyPassed})
}

// checkTool names the calls that ran a plan check a person approved; they
// are recorded at step -1 of the attempt that reached verification, apart
// from the executor's calls.
const checkTool = "plan_check"

// checkCalls maps a plan check's index to its approval call for this
// verification (plan and attempt).
func (r *Runtime) checkCalls(ctx context.Context, s *taskState) (map[int]core.TaskCall, error) {
	all, err := r.st.TaskCalls(ctx, s.k.ID)
	if err != nil {
		return nil, err
	}
	out := map[int]core.TaskCall{}
	for _, c := range all {
		if c.Tool != checkTool || c.PlanNo != s.k.PlanNo || c.Step != -1 || c.Attempt != s.m.Attempt {
			continue
		}
		var a struct {
			Check int `json:"check"`
		}
		if json.Unmarshal([]byte(c.Arguments), &a) == nil {
			out[a.Check] = c
		}
	}
	return out, nil
}

// proposeCheck proposes plan check i's command as an action (one per
// advance: a write carries one proposal); the next advance proposes the
// next or waits.
func (r *Runtime) proposeCheck(ctx context.Context, s *taskState, i int, name string, c verify.Check) (bool, error) {
	w := r.newTaskWrite(s)
	judge := c
	judge.Run, judge.Name = nil, name
	pa := core.ProposedAction{
		Action: core.Action{Tool: "shell", Argv: slices.Clone(c.Run), Verify: []verify.Check{judge}},
		Intent: fmt.Sprintf("Check %d of %d — %s: run %s", i+1, len(s.pl.Verify), s.pl.Title, (core.Action{Argv: c.Run}).CommandLine()),
		Rationale: "The plan's check \"" + name + "\" decides whether the task is done. The risk policy wants a person to approve " +
			"its command; it runs in the sandbox, and the check judges its result.",
	}
	args, _ := json.Marshal(map[string]int{"check": i})
	call := core.TaskCall{TaskID: s.k.ID, PlanNo: s.k.PlanNo, Step: -1, Attempt: s.m.Attempt, CallID: "check_" + core.NewID()[:12],
		Tool: checkTool, Arguments: string(args), Status: "done"}
	w.action = &pa
	w.proposed = func(o *shown, p Proposal) core.TaskCall {
		call := call
		if p.Approval == "" {
			// Not proposed (refused or malformed): the check fails as not
			// run, and the person is told why.
			o.Reply("%s", p.Refused)
			raw, _ := json.Marshal(task.Result{Status: "blocked", Output: "not run: the check's command could not be proposed"})
			call.Result = raw
			return call
		}
		call.Approval, call.Status = p.Approval, "waiting"
		o.Audit(w.entry(audit.KindTaskCallProposed, map[string]any{"tool": checkTool, "check": name, "approval": string(p.Approval), "outcome": "proposed"}))
		return call
	}
	applied, err := r.commitTask(ctx, w)
	return applied || err == nil, err
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return clipText(line, 200)
}

// finishSummary prepares the report of a verified task, in plain words
// with what was run.
func (r *Runtime) finishSummary(ctx context.Context, w *taskWrite) error {
	s := w.s
	all, err := r.st.TaskCalls(ctx, s.k.ID)
	if err != nil {
		return err
	}
	var ran []string
	for _, c := range all {
		if c.Tool == checkTool {
			continue // a plan check: reported with the checks
		}
		if st := resultStatus(c.Result); c.Approval == "" || (st != "ok" && st != "failed") {
			continue
		}
		a, err := r.st.GetApproval(ctx, c.Approval)
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
	w.fx.Reply("%s", s.k.Summary)
	w.fx.Update(r.planCard(s, "Done: verified by the gateway.", true))
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

// fullOutput is an execution's output as the engine stores it.
func fullOutput(r *core.ExecRecord) string {
	if r.Stderr == "" {
		return r.Stdout
	}
	return r.Stdout + "\n--- stderr ---\n" + r.Stderr
}
