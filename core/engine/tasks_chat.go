package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
)

// The chat side of tasks: starting one from the agent's hand-off, /tasks,
// /stop and the escalation card's taps.

// startTask prepares a new task for the turn's transaction.
func (e *Engine) startTask(o *outcome, req core.TaskRequest) {
	t := o.st.Turn
	if e.tasks == nil {
		o.reply("That needs several steps, and multi-step tasks are not enabled on this gateway: ask me for one step at a time.")
		return
	}
	if o.trust == core.TrustExternal {
		o.note(audit.KindPolicyRefused, map[string]any{"seq": o.st.Seq, "reason": "external trust", "tool": "task"})
		o.reply("I can't run tasks for you: your identity (%s) is not trusted here. The owner can pair it with `silas pair`.", t.Sender)
		return
	}
	goal := clipText(req.Goal, 1000)
	if goal == "" {
		o.reply("I could not tell what the task is; please say what outcome you want.")
		return
	}
	m, _ := task.Start()
	origin := core.Turn{Channel: t.Channel, Conversation: t.Conversation, Sender: t.Sender, SenderName: t.SenderName, ChatKind: t.ChatKind,
		Evidence: t.Evidence, EventID: t.EventID, At: t.At}
	om, err1 := json.Marshal(origin)
	mm, err2 := json.Marshal(m)
	lm, err3 := json.Marshal(e.tasks.cfg.Limits)
	if err := errors.Join(err1, err2, err3); err != nil {
		o.reply("I could not start that task: %v.", err)
		return
	}
	k := store.Task{ID: core.NewID(), Channel: t.Channel, Conversation: t.Conversation, Requester: t.Sender, Origin: om, Goal: goal,
		State: string(m.State), Machine: mm, Limits: lm}
	prev := o.inTx
	o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
		if prev != nil {
			if err := prev(ctx, tx, o); err != nil {
				return err
			}
		}
		// One task at a time per conversation: /stop is unambiguous.
		cur, err := tx.LockActiveTask(ctx, t.Conversation)
		if err == nil {
			o.reply("A task is already running here (%s). Wait for it, or /stop it first.", taskTitle(cur))
			return nil
		}
		if !errors.Is(err, core.ErrNotFound) {
			return err
		}
		tx.QueueInsertTask(k)
		o.reply("On it: I'll make a plan for %q and show it to you. Each action will ask for your approval unless the risk policy allows it; /stop cancels.", goal)
		o.note(audit.KindTaskCreated, map[string]any{"task": k.ID, "goal": clipText(goal, 300), "seq": o.st.Seq})
		id := k.ID
		o.after = append(o.after, func() { e.kickTask(id) })
		return nil
	}
}

func taskTitle(k store.Task) string {
	if k.Plan != "" {
		if i := strings.Index(k.Plan, "title: "); i >= 0 {
			line, _, _ := strings.Cut(k.Plan[i+len("title: "):], "\n")
			if t := strings.Trim(strings.TrimSpace(line), `"'`); t != "" {
				return t
			}
		}
	}
	return clipText(k.Goal, 80)
}

// cmdTasks lists the conversation's running and recent tasks.
func (e *Engine) cmdTasks(ctx context.Context, o *outcome) error {
	list, err := e.st.ConversationTasks(ctx, o.st.Turn.Conversation, 10)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		o.reply("No tasks here yet.")
		return nil
	}
	var b strings.Builder
	b.WriteString("Tasks (newest first):")
	for _, k := range list {
		var m task.Machine
		_ = json.Unmarshal(k.Machine, &m)
		state := k.State
		if k.State == string(task.Running) {
			state = fmt.Sprintf("running step %d, attempt %d", m.Step+1, m.Attempt)
		}
		if k.Reason != "" && (k.State == string(task.Stopped) || k.State == string(task.Escalated)) {
			state += ": " + clipText(k.Reason, 120)
		}
		end := e.now()
		if !k.FinishedAt.IsZero() {
			end = k.FinishedAt
		}
		fmt.Fprintf(&b, "\n• %s — %s; spent %d model call(s), %d tokens, %d tool call(s), %s (task %s)", taskTitle(k), state,
			k.ModelCalls, k.Tokens, k.ToolCalls, end.Sub(k.CreatedAt).Round(time.Second), k.ID)
	}
	o.reply("%s", b.String())
	return nil
}

// mayCommandTask: the task's requester or an owner may stop or steer it.
func mayCommandTask(k store.Task, who core.IdentityID, trust core.Trust) bool {
	return trust != core.TrustExternal && (who == k.Requester || trust == core.TrustOwner)
}

// cmdStop stops the conversation's running task (or the one named).
func (e *Engine) cmdStop(o *outcome, arg string) {
	o.inTx = func(ctx context.Context, tx *store.Tx, o *outcome) error {
		conv := o.st.Turn.Conversation
		var k store.Task
		var err error
		if arg != "" {
			k, err = tx.LockTask(ctx, arg)
			if err == nil && k.Conversation != conv {
				err = core.ErrNotFound
			}
		} else {
			k, err = tx.LockActiveTask(ctx, conv)
		}
		if errors.Is(err, core.ErrNotFound) {
			o.reply("No running task here to stop.")
			return nil
		}
		if err != nil {
			return err
		}
		if k.Final() {
			o.reply("That task already ended (%s).", k.State)
			return nil
		}
		if !mayCommandTask(k, o.st.Turn.Sender, o.trust) {
			o.reply("Only the person who asked for this task or an owner can stop it; nothing was changed.")
			return nil
		}
		return e.taskUserEvent(ctx, tx, o, k, task.Event{Kind: task.UserStop}, string(o.st.Turn.Sender))
	}
}

// taskUserEvent applies a person's event (stop, retry, re-plan) to a
// locked task inside the turn's transaction.
func (e *Engine) taskUserEvent(ctx context.Context, tx *store.Tx, o *outcome, k store.Task, ev task.Event, by string) error {
	s, err := e.decodeTask(k)
	if err != nil {
		return err
	}
	w := e.newTaskWrite(s)
	w.o = outcome{st: o.st, trust: o.trust}
	if ev.Kind != task.UserStop {
		e.closeEscalation(w, map[task.EventKind]string{task.UserRetry: render.ChoiceRetry, task.UserReplan: render.ChoiceReplan}[ev.Kind], by)
	}
	if err := e.applyEvent(w, ev); err != nil {
		return err
	}
	if ev.Kind == task.UserStop && len(w.o.updates) > 0 {
		// applyEvent closed the escalation card as stopped by "silas":
		// name the person instead.
		for i, c := range w.o.updates {
			if c.ID == cards.ID(k.EscalationCard) {
				w.o.updates[i] = render.EscalationCard(render.TaskEscalation{Card: c.ID, Title: s.title(), Chosen: render.ChoiceStop, By: by})
			}
		}
	}
	w.note(audit.KindTaskDecided, map[string]any{"event": string(ev.Kind), "by": by})
	ok, err := e.casTask(ctx, tx, w)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("engine: task %s changed while locked", k.ID)
	}
	if err := e.writeTaskRows(ctx, tx, o, w); err != nil {
		return err
	}
	o.replies = append(o.replies, w.o.replies...)
	o.cards = append(o.cards, w.o.cards...)
	o.updates = append(o.updates, w.o.updates...)
	o.audit = append(o.audit, w.o.audit...)
	cancel := *w.cancel
	id := k.ID
	o.after = append(o.after, func() {
		e.cancelRuns(cancel)
		e.kickTask(id)
	})
	return nil
}

// decideTaskCard answers a tap on an escalation card; handled=false when
// the card is not one.
func (e *Engine) decideTaskCard(ctx context.Context, tx *store.Tx, o *outcome, tap core.Tap, refuse func(reason, msg string) error) (bool, error) {
	if e.tasks == nil || !strings.HasPrefix(string(tap.Card), "esc-") {
		return false, nil
	}
	k, err := tx.LockTaskByCard(ctx, string(tap.Card))
	if errors.Is(err, core.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	if k.Conversation != o.st.Turn.Conversation {
		return false, nil
	}
	if !mayCommandTask(k, o.st.Turn.Sender, o.trust) {
		return true, refuse("not_approver", fmt.Sprintf("You (%s) may not decide this card; nothing was changed.", o.st.Turn.Sender))
	}
	ev := map[string]task.EventKind{render.ChoiceRetry: task.UserRetry, render.ChoiceReplan: task.UserReplan, render.ChoiceStop: task.UserStop}[tap.Choice]
	if ev == "" {
		return true, refuse("bad_choice", "Unknown choice: nothing was changed.")
	}
	var m task.Machine
	if err := json.Unmarshal(k.Machine, &m); err != nil {
		return true, err
	}
	if m.State != task.Escalated {
		return true, refuse("already_decided", "This task is no longer waiting for you: nothing was changed.")
	}
	o.toast = map[task.EventKind]string{task.UserRetry: "Retrying the step.", task.UserReplan: "Asking for a new plan.", task.UserStop: "Stopping the task."}[ev]
	return true, e.taskUserEvent(ctx, tx, o, k, task.Event{Kind: ev}, string(o.st.Turn.Sender))
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
