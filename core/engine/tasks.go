package engine

import (
	"context"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/effects"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
)

// The engine's side of the LLM agent's durable task runtime (core/tasks,
// docs/agent.md). The engine calls the runtime through TaskRuntime, which
// it owns; the runtime calls back through TaskHost (the interface the
// runtime owns, tasks.Host), so every tool call of a task passes the same
// propose → policy → card → token → sandbox → verify path as /run.

// TaskRuntime is what the engine calls on the task runtime.
type TaskRuntime interface {
	// Resume advances every unfinished task (at start, and as the
	// background room's task sweep every SweepEvery).
	Resume(ctx context.Context) error
	SweepEvery() time.Duration
	// Notice: an approval's decision or execution changed.
	Notice(ctx context.Context, id core.ApprovalID)
	// Start, Stop and Tap run inside the turn's transaction and return
	// what the turn shows. Tap's handled=false: not a task's card.
	Start(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, req core.TaskRequest) (effects.Effects, error)
	Stop(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string) (effects.Effects, error)
	Tap(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, tap core.Tap) (handled bool, fx effects.Effects, err error)
	// List answers /tasks.
	List(ctx context.Context, conv core.ConversationID) (string, error)
	// Awaiting reports whether a task of the turn's conversation waits for
	// its sender's answer to a question (ask_user); Answer then takes the
	// turn's text as that answer, inside the turn's transaction.
	Awaiting(ctx context.Context, st core.StoredTurn) (bool, error)
	Answer(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust) (effects.Effects, error)
}

// SetTasks enables the task runtime (built on TaskHost, so second). Call
// it before Run. Without it a task request is answered "not enabled".
func (e *Engine) SetTasks(t TaskRuntime) { e.tasks = t }

// TaskHost is the engine as the task runtime uses it (tasks.Host).
func (e *Engine) TaskHost() TaskHost { return TaskHost{e: e} }

// TaskHost gives the task runtime the engine's work group, trust, policy,
// verifier, cards, proposal path and outbox.
type TaskHost struct{ e *Engine }

// Go runs f as the engine's work; false once shutdown began (Run is
// waiting for its work, and a task resumes from its row at next start).
func (h TaskHost) Go(f func(ctx context.Context)) bool {
	e := h.e
	if e.workCtx.Err() != nil {
		return false
	}
	e.mu.Lock()
	closing := e.closing
	if !closing {
		e.work.Add(1)
	}
	e.mu.Unlock()
	if closing {
		return false
	}
	go func() {
		defer e.work.Done()
		f(e.workCtx)
	}()
	return true
}

func (h TaskHost) Now() time.Time { return h.e.now() }

func (h TaskHost) Trust(ctx context.Context, t core.Turn) core.Trust {
	trust, _ := h.e.trust.Of(ctx, t)
	return trust
}

func (h TaskHost) Evaluate(a core.Action) policy.Result { return h.e.cfg.Policy.Evaluate(a) }

func (h TaskHost) Verify(ctx context.Context, checks []verify.Check, ev verify.Evidence) verify.Report {
	return h.e.cfg.Verifier.Run(ctx, checks, ev)
}

func (h TaskHost) ApprovalCard(a core.ApprovalRequest) *cards.Card { return h.e.card(a, nil) }

func (h TaskHost) CancelRuns(ids []core.ApprovalID) { h.e.cancelRuns(ids) }

// Propose is propose for a task's origin turn: the request is prepared now
// and stored (and, when policy allows, approved) by write inside the
// task's transaction.
func (h TaskHost) Propose(origin core.Turn, trust core.Trust, pa core.ProposedAction) (core.ApprovalID, effects.Effects,
	func(ctx context.Context, tx *store.Tx, fx *effects.Effects) error) {
	e := h.e
	st := core.StoredTurn{Turn: origin}
	o := outcome{st: st, trust: trust}
	e.propose(&o, pa)
	if len(o.appr) == 0 {
		return "", o.effects(), nil
	}
	appr, inTx := o.appr, o.inTx
	write := func(ctx context.Context, tx *store.Tx, fx *effects.Effects) error {
		for _, a := range appr {
			tx.QueueApproval(a)
		}
		if inTx == nil {
			return nil
		}
		o := outcome{st: st, trust: trust}
		if err := inTx(ctx, tx, &o); err != nil {
			return err
		}
		fx.Add(o.effects())
		return nil
	}
	return appr[0].ID, o.effects(), write
}

// Send queues fx's messages to the conversation in tx, as a turn's are.
func (h TaskHost) Send(tx *store.Tx, ch core.ChannelName, conv core.ConversationID, fx effects.Effects) (func(), error) {
	o := outcome{st: core.StoredTurn{Turn: core.Turn{Channel: ch, Conversation: conv}}}
	for _, r := range fx.Replies {
		if err := o.send(tx, "r-"+core.NewID(), core.OutMessage{Conversation: conv, Text: r}); err != nil {
			return nil, err
		}
	}
	for _, c := range fx.Cards {
		if err := o.send(tx, string(c.ID), core.OutMessage{Conversation: conv, Card: c}); err != nil {
			return nil, err
		}
	}
	for _, c := range fx.Updates {
		if err := tx.QueueMessage(ch, core.OpUpdate, string(c.ID), core.OutMessage{Conversation: conv, Card: c}); err != nil {
			return nil, err
		}
	}
	n := len(fx.Updates)
	return func() { h.e.out.HandOff(conv, o.jobs, n) }, nil
}

// effects is what o shows, for the task runtime.
func (o *outcome) effects() effects.Effects {
	return effects.Effects{Replies: o.replies, Cards: o.cards, Updates: o.updates, Audit: o.audit, After: o.after, Toast: o.toast}
}

// add takes in what the task runtime shows for this turn.
func (o *outcome) add(fx effects.Effects) {
	o.replies = append(o.replies, fx.Replies...)
	o.cards = append(o.cards, fx.Cards...)
	o.updates = append(o.updates, fx.Updates...)
	o.audit = append(o.audit, fx.Audit...)
	o.after = append(o.after, fx.After...)
	if fx.Toast != "" {
		o.toast = fx.Toast
	}
}

// startTask hands the agent's task request to the runtime, inside the
// turn's transaction.
func (e *Engine) startTask(o *outcome, req core.TaskRequest) {
	if e.tasks == nil {
		o.reply("That needs several steps, and multi-step tasks are not enabled on this gateway: ask me for one step at a time.")
		return
	}
	prev := o.inTx
	o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
		if prev != nil {
			if err := prev(ctx, tx, o); err != nil {
				return err
			}
		}
		fx, err := e.tasks.Start(ctx, tx, o.st, o.trust, req)
		if err != nil {
			return err
		}
		o.add(fx)
		return nil
	}
}

// taskAnswer hands a plain message to the conversation's task when the
// task waits for this sender's answer (ask_user); handled: the agent is
// not asked.
func (e *Engine) taskAnswer(ctx context.Context, o *outcome) (bool, error) {
	if e.tasks == nil {
		return false, nil
	}
	waiting, err := e.tasks.Awaiting(ctx, o.st)
	if err != nil || !waiting {
		return false, err
	}
	prev := o.inTx
	o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
		if prev != nil {
			if err := prev(ctx, tx, o); err != nil {
				return err
			}
		}
		fx, err := e.tasks.Answer(ctx, tx, o.st, o.trust)
		if err != nil {
			return err
		}
		o.add(fx)
		return nil
	}
	return true, nil
}

// cmdTasks answers /tasks.
func (e *Engine) cmdTasks(ctx context.Context, o *outcome) error {
	if e.tasks == nil {
		// Without the runtime no task can have started.
		o.reply("No tasks here yet.")
		return nil
	}
	text, err := e.tasks.List(ctx, o.st.Turn.Conversation)
	if err != nil {
		return err
	}
	o.reply("%s", text)
	return nil
}

// cmdStop answers /stop [task].
func (e *Engine) cmdStop(o *outcome, arg string) {
	if e.tasks == nil {
		o.reply("No running task here to stop.")
		return
	}
	o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
		fx, err := e.tasks.Stop(ctx, tx, o.st, o.trust, arg)
		if err != nil {
			return err
		}
		o.add(fx)
		return nil
	}
}

// taskNotice tells the runtime an approval's decision or execution changed.
func (e *Engine) taskNotice(id core.ApprovalID) {
	if e.tasks != nil {
		e.tasks.Notice(e.workCtx, id)
	}
}

// cancelRuns kills the running executions of a stopped task: each is
// recorded interrupted ("stopped with its task"), never re-run.
func (e *Engine) cancelRuns(ids []core.ApprovalID) {
	if len(ids) == 0 {
		return
	}
	e.runsMu.Lock()
	defer e.runsMu.Unlock()
	for _, id := range ids {
		if r, ok := e.runs[id]; ok {
			r.stopped = true
			r.cancel()
		}
	}
}

// runHandle is an execution in the sandbox that a stop may kill.
type runHandle struct {
	cancel  context.CancelFunc
	stopped bool
}

// runContext registers an execution so a task stop can kill it; stopped
// reports (after the run) whether it was killed that way.
func (e *Engine) runContext(ctx context.Context, id core.ApprovalID) (context.Context, func() bool, func()) {
	ctx, cancel := context.WithCancel(ctx)
	h := &runHandle{cancel: cancel}
	e.runsMu.Lock()
	if e.runs == nil {
		e.runs = map[core.ApprovalID]*runHandle{}
	}
	e.runs[id] = h
	e.runsMu.Unlock()
	stopped := func() bool {
		e.runsMu.Lock()
		defer e.runsMu.Unlock()
		return h.stopped
	}
	done := func() {
		e.runsMu.Lock()
		delete(e.runs, id)
		e.runsMu.Unlock()
		cancel()
	}
	return ctx, stopped, done
}
