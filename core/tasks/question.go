package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
)

// Questions (ask_user) and the executor's other calls that are not actions
// (read_output). A question is a task call without an approval, "waiting"
// until its answer: a tap on one of the card's choices (the requester or an
// owner), or the requester's next plain message in the conversation. The
// task waits durably — the call row and tasks.question_card are all there
// is — and the answer becomes the call's result, which the executor is
// shown fenced as data, like any tool result.

// maxAnswer bounds an answer as the model is shown it.
const maxAnswer = 2000

// ask posts the executor's question and records its call as waiting.
func (r *Runtime) ask(ctx context.Context, w *taskWrite, call core.TaskCall, c llm.Call) (bool, error) {
	s := w.s
	card := "ask-" + core.NewID()
	call.Status = "waiting"
	s.k.QuestionCard = card
	w.calls = append(w.calls, call)
	w.fx.Card(r.questionCard(s, card, call, render.TaskQuestion{}))
	w.note(audit.KindTaskAsked, map[string]any{"step": s.m.Step + 1, "question": clipText(c.Question, 200), "choices": len(c.Choices), "card": card})
	applied, err := r.commitTask(ctx, w)
	return applied || err == nil, err
}

// questionCard renders the question of call (an ask_user call, whose
// arguments hold it) on card, in the state q gives (open, answered or
// cancelled).
func (r *Runtime) questionCard(s *taskState, card string, call core.TaskCall, q render.TaskQuestion) *cards.Card {
	c, err := llm.DecodeArgs(llm.ToolCall{Name: llm.ToolAskUser, Arguments: call.Arguments}, llm.ToolOptions{})
	if err != nil {
		// Stored only after it decoded; a row that no longer does shows
		// as what it is.
		c.Question = "(the question could not be read back)"
	}
	q.Card, q.Question, q.Choices, q.Requester = cards.ID(card), c.Question, c.Choices, string(s.k.Requester)
	q.Label = s.title()
	if s.pl != nil {
		q.Label = fmt.Sprintf("Step %d of %d — %s", call.Step+1, len(s.pl.Steps), s.pl.Title)
	}
	return render.QuestionCard(q)
}

// errNoQuestion: the task no longer waits for an answer (answered, or it
// ended) — a stale card or a late message.
var errNoQuestion = errors.New("tasks: no open question")

// answer records a person's answer to the task's open question inside the
// turn's transaction (k is locked), adding what it shows to o.
func (r *Runtime) answer(ctx context.Context, tx *store.Tx, o Out, k core.Task, text, by, how string) error {
	if k.Final() || k.QuestionCard == "" {
		return errNoQuestion
	}
	s, err := r.decodeTask(k)
	if err != nil {
		return err
	}
	all, err := r.st.TaskCalls(ctx, k.ID)
	if err != nil {
		return err
	}
	var call *core.TaskCall
	for _, c := range attemptCalls(all, s) {
		if c.Status == "waiting" && c.Tool == llm.ToolAskUser {
			call = &c
		}
	}
	if call == nil {
		return errNoQuestion
	}
	text = clipText(text, maxAnswer)
	w := r.newTaskWrite(s)
	card := s.k.QuestionCard
	s.k.QuestionCard = ""
	raw, err := json.Marshal(task.Result{Status: "ok", Output: "The user answered: " + text, SizeChars: len([]rune(text)), RehydrationAllowed: true})
	if err != nil {
		return err
	}
	w.finished = append(w.finished, finishedCall{id: call.ID, result: raw})
	w.fx.Update(r.questionCard(s, card, *call, render.TaskQuestion{Answer: text, By: by}))
	// The answer's words stay in the conversation; the audit says who
	// answered, how, and how much.
	w.note(audit.KindTaskAnswered, map[string]any{"call": call.ID, "card": card, "by": by, "how": how, "chars": len([]rune(text))})
	if err := r.commitInTurn(ctx, tx, o, k, w); err != nil {
		return err
	}
	tx.QueueTaskStep(k.ID)
	return nil
}

// tapQuestion answers a tap on a question card. A card that is no longer
// open (answered, or its task ended) is refused and changes nothing.
func (r *Runtime) tapQuestion(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, tap core.Tap, o Out) (Tapped, error) {
	refuse := func(reason, msg string) (Tapped, error) {
		return Tapped{Handled: true, Refused: reason, Toast: msg}, nil
	}
	k, err := tx.LockTaskByQuestion(ctx, string(tap.Card))
	if errors.Is(err, core.ErrNotFound) {
		return refuse("already_decided", "This question is no longer open: nothing was changed.")
	}
	if err != nil {
		return Tapped{Handled: true}, err
	}
	if k.Conversation != st.Turn.Conversation {
		return Tapped{}, nil
	}
	if !mayCommandTask(k, st.Turn.Sender, trust) {
		return refuse("not_approver", fmt.Sprintf("You (%s) may not answer this question; nothing was changed.", st.Turn.Sender))
	}
	var choices []string
	all, err := r.st.TaskCalls(ctx, k.ID)
	if err != nil {
		return Tapped{Handled: true}, err
	}
	for _, c := range all {
		if c.Status == "waiting" && c.Tool == llm.ToolAskUser {
			if dc, err := llm.DecodeArgs(llm.ToolCall{Name: c.Tool, Arguments: c.Arguments}, llm.ToolOptions{}); err == nil {
				choices = dc.Choices
			}
		}
	}
	choice := ""
	for i, ch := range choices {
		if tap.Choice == render.QuestionChoice(i) {
			choice = ch
		}
	}
	if choice == "" {
		return refuse("bad_choice", "Unknown choice: nothing was changed.")
	}
	// answer writes to o only once it records the answer: when it refuses,
	// nothing was shown.
	err = r.answer(ctx, tx, o, k, choice, string(st.Turn.Sender), "tap")
	if errors.Is(err, errNoQuestion) {
		return refuse("already_decided", "This question is no longer open: nothing was changed.")
	}
	if err != nil {
		return Tapped{Handled: true}, err
	}
	return Tapped{Handled: true, Toast: "Answer sent to the task."}, nil
}

// Awaiting reports whether the conversation's task waits for an answer
// from this turn's sender (its requester). It reads outside the turn's
// transaction; Answer checks again under the task's lock.
func (r *Runtime) Awaiting(ctx context.Context, st core.StoredTurn) (bool, error) {
	list, err := r.st.ConversationTasks(ctx, st.Turn.Conversation, 1)
	if err != nil {
		return false, fmt.Errorf("tasks: awaiting: %w", err)
	}
	if len(list) == 0 {
		return false, nil
	}
	k := list[0]
	return !k.Final() && k.QuestionCard != "" && k.Requester == st.Turn.Sender, nil
}

// Answer takes the turn's text as the answer to the task's open question,
// inside the turn's transaction (after Awaiting said one waits).
func (r *Runtime) Answer(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, o Out) error {
	k, err := tx.LockActiveTask(ctx, st.Turn.Conversation)
	if errors.Is(err, core.ErrNotFound) {
		err = errNoQuestion
	}
	if err == nil && k.Requester != st.Turn.Sender {
		err = errNoQuestion
	}
	if err == nil && !mayCommandTask(k, st.Turn.Sender, trust) {
		// The requester's trust is decided again for every turn: one no
		// longer trusted does not steer the task.
		o.Reply("You (%s) may not answer this task's question now; nothing was passed on.", st.Turn.Sender)
		return nil
	}
	if err == nil {
		err = r.answer(ctx, tx, o, k, strings.TrimSpace(st.Turn.Text), string(st.Turn.Sender), "message")
	}
	if errors.Is(err, errNoQuestion) {
		// Answered meanwhile (a tap), or the task ended: the message is
		// not silently taken as something else.
		o.Reply("The task's question was already answered or closed, so this message was not passed on. Send it again if it was meant for me.")
		return nil
	}
	return err
}

// rehydrate gives the executor an evicted output of its own task back
// (read_output), capped at task.RehydrateMax characters. ok=false: no
// output of this task has that pointer (the text says so).
func (r *Runtime) rehydrate(ctx context.Context, taskID, pointer string) (text string, ok bool, err error) {
	content, err := r.st.GetTaskOutput(ctx, taskID, pointer)
	if errors.Is(err, core.ErrNotFound) {
		// Another task's pointer is as unknown as a made-up one.
		return "No output of this task has the pointer " + pointer + ". Use a pointer from an [EVICTED] result of this task.", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("tasks: rehydrate: %w", err)
	}
	text, _ = task.RehydrateCapped(content)
	return text, true, nil
}

// secretNames are the names of the stored secrets, for the executor.
func (r *Runtime) secretNames(ctx context.Context) ([]string, error) {
	list, err := r.st.ListSecrets(ctx)
	if err != nil {
		return nil, fmt.Errorf("tasks: secret names: %w", err)
	}
	names := make([]string, 0, len(list))
	for _, s := range list {
		names = append(names, s.Name)
	}
	return names, nil
}
