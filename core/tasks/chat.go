package tasks

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
// /stop and the escalation card's taps. Each runs inside the engine's
// transaction for the turn and writes what the turn shows to its Out.

// turnEntry is an audit entry in the name of the turn's sender, as for
// any turn.
func turnEntry(st core.StoredTurn, kind audit.Kind, data map[string]any) audit.Entry {
	return audit.Entry{Kind: kind, Actor: string(st.Turn.Sender), Conversation: string(st.Turn.Conversation), Data: data}
}

// Start starts a task for the turn (the agent's core.Proposal.Task), inside
// the turn's transaction.
func (r *Runtime) Start(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, req core.TaskRequest, o Out) error {
	t := st.Turn
	if trust == core.TrustExternal {
		o.Audit(turnEntry(st, audit.KindPolicyRefused, map[string]any{"seq": st.Seq, "reason": "external trust", "tool": "task"}))
		o.Reply("I can't run tasks for you: your identity (%s) is not trusted here. The owner can pair it with `silas pair`.", t.Sender)
		return nil
	}
	goal := clipText(req.Goal, 1000)
	if goal == "" {
		o.Reply("I could not tell what the task is; please say what outcome you want.")
		return nil
	}
	m, _ := task.Start()
	origin := core.Turn{Channel: t.Channel, Conversation: t.Conversation, Sender: t.Sender, SenderName: t.SenderName, ChatKind: t.ChatKind,
		Evidence: t.Evidence, EventID: t.EventID, At: t.At}
	om, err1 := json.Marshal(origin)
	mm, err2 := json.Marshal(m)
	lm, err3 := json.Marshal(r.cfg.Limits)
	if err := errors.Join(err1, err2, err3); err != nil {
		o.Reply("I could not start that task: %v.", err)
		return nil
	}
	k := core.Task{ID: core.NewID(), Channel: t.Channel, Conversation: t.Conversation, Requester: t.Sender, Origin: om, Goal: goal,
		State: string(m.State), Machine: mm, Limits: lm}
	// One task at a time per conversation: /stop is unambiguous.
	cur, err := tx.LockActiveTask(ctx, t.Conversation)
	if err == nil {
		o.Reply("A task is already running here (%s). Wait for it, or /stop it first.", taskTitle(cur))
		return nil
	}
	if !errors.Is(err, core.ErrNotFound) {
		return err
	}
	tx.QueueInsertTask(k)
	o.Reply("On it: I'll make a plan for %q and show it to you. Each action will ask for your approval unless the risk policy allows it; /stop cancels.", goal)
	o.Audit(turnEntry(st, audit.KindTaskCreated, map[string]any{"task": k.ID, "goal": clipText(goal, 300), "seq": st.Seq}))
	tx.QueueTaskStep(k.ID)
	return nil
}

func taskTitle(k core.Task) string {
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

// List answers /tasks: the conversation's running and recent tasks.
func (r *Runtime) List(ctx context.Context, conv core.ConversationID) (string, error) {
	list, err := r.st.ConversationTasks(ctx, conv, 10)
	if err != nil {
		return "", err
	}
	if len(list) == 0 {
		return "No tasks here yet.", nil
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
		end := r.cfg.Now()
		if !k.FinishedAt.IsZero() {
			end = k.FinishedAt
		}
		fmt.Fprintf(&b, "\n• %s — %s; spent %d model call(s), %d tokens, %d tool call(s), %s (task %s)", taskTitle(k), state,
			k.ModelCalls, k.Tokens, k.ToolCalls, end.Sub(k.CreatedAt).Round(time.Second), k.ID)
	}
	return b.String(), nil
}

// mayCommandTask: the task's requester or an owner may stop or steer it.
func mayCommandTask(k core.Task, who core.IdentityID, trust core.Trust) bool {
	return trust != core.TrustExternal && (who == k.Requester || trust == core.TrustOwner)
}

// Stop answers /stop [task], inside the turn's transaction: it stops the
// conversation's running task (or the one named).
func (r *Runtime) Stop(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, o Out) error {
	conv := st.Turn.Conversation
	var k core.Task
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
		o.Reply("No running task here to stop.")
		return nil
	}
	if err != nil {
		return err
	}
	if k.Final() {
		o.Reply("That task already ended (%s).", k.State)
		return nil
	}
	if !mayCommandTask(k, st.Turn.Sender, trust) {
		o.Reply("Only the person who asked for this task or an owner can stop it; nothing was changed.")
		return nil
	}
	return r.taskUserEvent(ctx, tx, o, k, task.Event{Kind: task.UserStop}, string(st.Turn.Sender))
}

// taskUserEvent applies a person's event (stop, retry, re-plan) to a
// locked task inside the turn's transaction, adding what it shows to o.
func (r *Runtime) taskUserEvent(ctx context.Context, tx *store.Tx, o Out, k core.Task, ev task.Event, by string) error {
	s, err := r.decodeTask(k)
	if err != nil {
		return err
	}
	w := r.newTaskWrite(s)
	if ev.Kind != task.UserStop {
		r.closeEscalation(w, map[task.EventKind]string{task.UserRetry: render.ChoiceRetry, task.UserReplan: render.ChoiceReplan}[ev.Kind], by)
	}
	if err := r.applyEvent(w, ev); err != nil {
		return err
	}
	if ev.Kind == task.UserStop && len(w.fx.updates) > 0 {
		// applyEvent closed the escalation card as stopped by "silas":
		// name the person instead.
		for i, c := range w.fx.updates {
			if c.ID == cards.ID(k.EscalationCard) {
				w.fx.updates[i] = render.EscalationCard(render.TaskEscalation{Card: c.ID, Title: s.title(), Chosen: render.ChoiceStop, By: by})
			}
		}
	}
	w.note(audit.KindTaskDecided, map[string]any{"event": string(ev.Kind), "by": by})
	// The stopped task's approval cards close first, then what the event
	// shows.
	if err := r.commitInTurn(ctx, tx, o, k, w); err != nil {
		return err
	}
	tx.QueueTaskStep(k.ID)
	if cancel := *w.cancel; len(cancel) > 0 {
		// Killing a run is this process's, once the stop committed (the
		// executions were claimed here); the step job only reads.
		o.After(func() { r.actions.StopRuns(cancel) })
	}
	return nil
}

// commitInTurn writes w for task k, locked in the turn's transaction
// (a stale write is an error: nobody else can have changed it), and adds
// what it shows to o: the rows' card updates first, then w's own.
func (r *Runtime) commitInTurn(ctx context.Context, tx *store.Tx, o Out, k core.Task, w *taskWrite) error {
	ok, err := r.casTask(ctx, tx, w)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("tasks: task %s changed while locked", k.ID)
	}
	if err := r.writeTaskRows(ctx, tx, o, w, w.calls); err != nil {
		return err
	}
	w.fx.writeTo(o)
	return nil
}

// Tapped is what became of a tap on a task's card (core.TaskTap).
type Tapped = core.TaskTap

// Tap answers a tap on an escalation or question card inside the turn's
// transaction, writing what it shows to o; Handled=false when the card is
// not one.
func (r *Runtime) Tap(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, tap core.Tap, o Out) (Tapped, error) {
	if strings.HasPrefix(string(tap.Card), "ask-") {
		return r.tapQuestion(ctx, tx, st, trust, tap, o)
	}
	if !strings.HasPrefix(string(tap.Card), "esc-") {
		return Tapped{}, nil
	}
	refuse := func(reason, msg string) (Tapped, error) {
		return Tapped{Handled: true, Refused: reason, Toast: msg}, nil
	}
	k, err := tx.LockTaskByCard(ctx, string(tap.Card))
	if errors.Is(err, core.ErrNotFound) {
		return Tapped{}, nil
	}
	if err != nil {
		return Tapped{Handled: true}, err
	}
	if k.Conversation != st.Turn.Conversation {
		return Tapped{}, nil
	}
	if !mayCommandTask(k, st.Turn.Sender, trust) {
		return refuse("not_approver", fmt.Sprintf("You (%s) may not decide this card; nothing was changed.", st.Turn.Sender))
	}
	ev := map[string]task.EventKind{render.ChoiceRetry: task.UserRetry, render.ChoiceReplan: task.UserReplan, render.ChoiceStop: task.UserStop}[tap.Choice]
	if ev == "" {
		return refuse("bad_choice", "Unknown choice: nothing was changed.")
	}
	var m task.Machine
	if err := json.Unmarshal(k.Machine, &m); err != nil {
		return Tapped{Handled: true}, err
	}
	if m.State != task.Escalated {
		return refuse("already_decided", "This task is no longer waiting for you: nothing was changed.")
	}
	if err := r.taskUserEvent(ctx, tx, o, k, task.Event{Kind: ev}, string(st.Turn.Sender)); err != nil {
		return Tapped{Handled: true}, err
	}
	toast := map[task.EventKind]string{task.UserRetry: "Retrying the step.", task.UserReplan: "Asking for a new plan.", task.UserStop: "Stopping the task."}[ev]
	return Tapped{Handled: true, Toast: toast}, nil
}
