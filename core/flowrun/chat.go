package flowrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowjob"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
)

// The chat side: /flows, /flow run|status|stop and a tap on a gate's card,
// each written inside the person's turn transaction (core.TaskOut), so
// what it changes commits with the turn.

// NewRun is the row of a run of f (document its pinned bytes) not started
// yet: inputs bound (and checked), seq 0. The first advance — in the same
// transaction for /flow run, a step job for `silas flow run` — starts it.
func NewRun(f *flow.Flow, doc []byte, origin core.Turn, inputs map[string]any, maxParallel int) (core.FlowRun, error) {
	bound, err := f.BindInputs(inputs)
	if err != nil {
		return core.FlowRun{}, err
	}
	state, err := json.Marshal(flow.Run{V: flow.StateVersion, Flow: f.Name, FlowHash: f.Hash, Inputs: bound, Status: flow.RunRunning,
		MaxParallel: maxParallel, Nodes: map[string]*flow.NodeState{}})
	if err != nil {
		return core.FlowRun{}, err
	}
	origin.Text = ""
	om, err := json.Marshal(origin)
	if err != nil {
		return core.FlowRun{}, err
	}
	id := core.NewID()
	return core.FlowRun{ID: id, Flow: f.Name, Version: f.Version, FlowHash: f.Hash, Document: doc, File: f.File, Channel: origin.Channel,
		Conversation: origin.Conversation, Requester: origin.Sender, Origin: om, Status: string(flow.RunRunning), State: state,
		ProgressCard: "flow-" + id}, nil
}

// mayCommand: the run's requester or an owner may answer, stop or steer it.
func mayCommand(run core.FlowRun, who core.IdentityID, trust core.Trust) bool {
	return trust != core.TrustExternal && (who == run.Requester || trust == core.TrustOwner)
}

// Run answers /flow run NAME k=v…, inside the turn's transaction: the run
// is stored and started (its first nodes proposed, its progress card sent).
func (r *Runtime) Run(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, out core.TaskOut) error {
	t := st.Turn
	if trust == core.TrustExternal {
		out.Audit(audit.Entry{Kind: audit.KindPolicyRefused, Actor: string(t.Sender), Conversation: string(t.Conversation),
			Data: map[string]any{"seq": st.Seq, "reason": "external trust", "tool": "flow"}})
		out.Reply("I can't run flows for you: your identity (%s) is not trusted here. The owner can pair it with `silas pair`.", t.Sender)
		return nil
	}
	words, err := agent.Split(arg)
	if err != nil || len(words) == 0 {
		out.Reply("Usage: /flow run NAME key=value… (/flows lists the flows).")
		return nil
	}
	f, doc, err := r.cfg.Catalog.Lookup(words[0])
	if err != nil {
		out.Reply("I can't run that: %v.", err)
		return nil
	}
	inputs, err := f.ParseArgs(words[1:])
	if err != nil {
		out.Reply("I can't run that: %v.", err)
		return nil
	}
	row, err := NewRun(f, doc, t, inputs, r.cfg.MaxParallel)
	if err != nil {
		out.Reply("I can't run that: %v.", err)
		return nil
	}
	tx.QueueInsertFlowRun(row)
	out.Reply("Started flow %s v%s (run %s). Its progress card follows; each action asks for your approval unless the risk policy allows it. /flow stop %s stops it.",
		f.Name, f.Version, ShortID(row.ID), ShortID(row.ID))
	w, err := r.decode(row)
	if err != nil {
		return err
	}
	w.out = out
	return r.commitTurn(ctx, tx, w, out)
}

// commitTurn applies w inside a turn's transaction and arranges what runs
// after its commit.
func (r *Runtime) commitTurn(ctx context.Context, tx *store.Tx, w *write, out core.TaskOut) error {
	if err := r.apply(ctx, tx, w); err != nil {
		return err
	}
	conv, n := w.row.Conversation, w.messages
	out.After(func() {
		r.failpoint("flow-after-turn")
		r.committed(w, nil)
		if n > 0 {
			r.out.Kick(conv, n)
		}
	})
	return nil
}

// Start stores a run of flow name started outside chat (`silas flow run`)
// in its own transaction, with the step job that starts it: the serving
// process picks the job up.
func Start(ctx context.Context, st *store.Store, cat Catalog, name string, args []string, origin core.Turn, maxParallel int) (core.FlowRun, error) {
	f, doc, err := cat.Lookup(name)
	if err != nil {
		return core.FlowRun{}, err
	}
	inputs, err := f.ParseArgs(args)
	if err != nil {
		return core.FlowRun{}, err
	}
	row, err := NewRun(f, doc, origin, inputs, maxParallel)
	if err != nil {
		return core.FlowRun{}, err
	}
	err = st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		tx.QueueInsertFlowRun(row)
		tx.QueueFlowStep(row.ID)
		return []audit.Entry{{Kind: audit.KindFlowRunStarted, Actor: string(origin.Sender), Conversation: string(origin.Conversation),
			Data: map[string]any{"run": row.ID, "flow": f.Name, "version": f.Version, "hash": f.Hash, "from": "cli"}}}, nil
	})
	return row, err
}

// QueueSignal stores sig for run id (`silas flow signal`) as a step job the
// serving process delivers: an unknown or ended run is an error.
func QueueSignal(ctx context.Context, st *store.Store, id string, sig flowjob.Signal) error {
	if strings.TrimSpace(sig.Event) == "" {
		return errors.New("the event is empty")
	}
	sig.Data = render.Clip(sig.Data, maxSay)
	return st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		run, err := tx.LockFlowRun(ctx, id)
		if errors.Is(err, core.ErrNotFound) {
			return nil, fmt.Errorf("no run %q (give its full id)", id)
		}
		if err != nil {
			return nil, err
		}
		if run.Final() {
			return nil, fmt.Errorf("run %s already ended (%s)", id, run.Status)
		}
		tx.QueueFlowSignal(run.ID, sig)
		return []audit.Entry{{Kind: audit.KindFlowSignalled, Actor: sig.By, Conversation: string(run.Conversation),
			Data: map[string]any{"run": run.ID, "flow": run.Flow, "event": sig.Event, "from": "cli"}}}, nil
	})
}

// List answers /flows: the flows that can be run and this chat's recent
// runs.
func (r *Runtime) List(ctx context.Context, conv core.ConversationID) (string, error) {
	lib, loadErr := r.cfg.Catalog.List()
	var b strings.Builder
	b.WriteString("Flows:")
	for _, name := range lib.Names() {
		f := lib.Flows[name]
		var in []string
		for _, i := range f.Inputs {
			s := i.Name + ":" + string(i.Type)
			if i.HasDefault {
				s += fmt.Sprintf("=%v", i.Default)
			}
			in = append(in, s)
		}
		fmt.Fprintf(&b, "\n• %s v%s — %s", f.Name, f.Version, f.Description)
		if len(in) > 0 {
			fmt.Fprintf(&b, " (inputs: %s)", strings.Join(in, ", "))
		}
	}
	if len(lib.Flows) == 0 {
		b.WriteString(" none yet.")
	}
	if loadErr != nil {
		b.WriteString("\nSome flow files have problems (`silas flow list` shows them).")
	}
	runs, err := r.st.ConversationFlowRuns(ctx, conv, 5)
	if err != nil {
		return "", err
	}
	if len(runs) > 0 {
		b.WriteString("\nRecent runs here:")
		for _, run := range runs {
			fmt.Fprintf(&b, "\n• %s %s — %s, started %s", ShortID(run.ID), run.Flow, run.Status, run.CreatedAt.Format(time.DateTime))
		}
	}
	b.WriteString("\nStart one with /flow run NAME key=value….")
	return b.String(), nil
}

// Status answers /flow status [run]: the run's nodes and their states.
func (r *Runtime) Status(ctx context.Context, conv core.ConversationID, arg string) (string, error) {
	run, err := r.st.FindFlowRun(ctx, conv, strings.TrimSpace(arg))
	if errors.Is(err, core.ErrNotFound) {
		return "No flow run here with that id (/flows lists recent runs).", nil
	}
	if err != nil {
		return "", err
	}
	w, err := r.decode(run)
	if err != nil {
		return "", err
	}
	if w.fr.Seq == 0 {
		return fmt.Sprintf("Flow %s (run %s) is about to start.", run.Flow, ShortID(run.ID)), nil
	}
	c := r.progressCard(w)
	return c.Intent + "\n" + c.Details + "\n" + c.Outcome, nil
}

// Stop answers /flow stop <run>, inside the turn's transaction: the run is
// cancelled, its open cards closed and its running actions killed (each
// recorded interrupted, never run again).
func (r *Runtime) Stop(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, out core.TaskOut) error {
	arg = strings.TrimSpace(arg)
	if arg == "" {
		out.Reply("Usage: /flow stop <run> (/flows lists recent runs).")
		return nil
	}
	run, ok, err := r.commandedRun(ctx, tx, st, trust, arg, "stop", out)
	if !ok || err != nil {
		return err
	}
	if run.Final() {
		out.Reply("That run already ended (%s).", run.Status)
		return nil
	}
	w, err := r.decode(run)
	if err != nil {
		return err
	}
	w.out = out
	w.queue = []flow.Event{{Kind: flow.EvCancel, Reason: "stopped by " + string(st.Turn.Sender)}}
	out.Audit(audit.Entry{Kind: audit.KindFlowStopRequested, Actor: string(st.Turn.Sender), Conversation: string(st.Turn.Conversation),
		Data: map[string]any{"run": run.ID, "flow": run.Flow}})
	return r.commitTurn(ctx, tx, w, out)
}

// Tap answers a tap on a gate's card, inside the turn's transaction: the
// choice becomes the gate node's output. Handled=false: not a gate's card.
func (r *Runtime) Tap(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, tap core.Tap, out core.TaskOut) (core.TaskTap, error) {
	if !strings.HasPrefix(string(tap.Card), "fgate-") {
		return core.TaskTap{}, nil
	}
	refuse := func(reason, msg string) (core.TaskTap, error) {
		return core.TaskTap{Handled: true, Refused: reason, Toast: msg}, nil
	}
	a, err := tx.FlowAttemptByCard(ctx, string(tap.Card))
	if errors.Is(err, core.ErrNotFound) {
		return core.TaskTap{}, nil
	}
	if err != nil {
		return core.TaskTap{Handled: true}, err
	}
	run, err := tx.LockFlowRun(ctx, a.Run)
	if err != nil {
		return core.TaskTap{Handled: true}, err
	}
	if run.Conversation != st.Turn.Conversation {
		return core.TaskTap{}, nil // another conversation's card is unknown here
	}
	if !mayCommand(run, st.Turn.Sender, trust) {
		return refuse("not_approver", fmt.Sprintf("You (%s) may not answer this card; nothing was changed.", st.Turn.Sender))
	}
	w, err := r.decode(run)
	if err != nil {
		return core.TaskTap{Handled: true}, err
	}
	ns := w.fr.Nodes[a.Node]
	if a.Status != "running" || run.Final() || ns == nil || ns.Status != flow.NodeRunning || ns.Iteration != a.Iteration || ns.Attempt != a.Attempt {
		return refuse("already_decided", "This question is no longer waiting for an answer: nothing was changed.")
	}
	n := w.p.f.Node(a.Node)
	choices := gateChoices(n)
	idx := -1
	for i := range choices {
		if render.QuestionChoice(i) == tap.Choice {
			idx = i
		}
	}
	if idx < 0 {
		return refuse("bad_choice", "Unknown choice: nothing was changed.")
	}
	choice := choices[idx]
	if err := r.answer(ctx, tx, w, a, n, choice, choice, st.Turn.Sender, out); err != nil {
		return core.TaskTap{Handled: true}, err
	}
	return core.TaskTap{Handled: true, Toast: "Answered: " + render.Clip(choice, 64)}, nil
}

// answer makes a gate's answer its node's output, inside the turn's
// transaction: the card shows who answered, the run moves on.
func (r *Runtime) answer(ctx context.Context, tx *store.Tx, w *write, a core.FlowAttempt, n *flow.Node, choice, content string, by core.IdentityID, out core.TaskOut) error {
	outp, err := json.Marshal(map[string]any{"response": map[string]any{"choice": choice, "content": content, "by": string(by)}})
	if err != nil {
		return err
	}
	w.out = out
	prompt, _ := n.Templates["prompt"].Render(w.p.m.Scope(w.fr))
	out.Update(gateCard(w, n, a.Card, prompt, gateShown{by: string(by), answer: content}))
	out.Audit(audit.Entry{Kind: audit.KindFlowGateAnswered, Actor: string(by), Conversation: string(w.row.Conversation),
		Data: map[string]any{"run": w.row.ID, "flow": w.row.Flow, "node": a.Node, "choice": render.Clip(choice, 64), "text": choice == ""}})
	w.queue = []flow.Event{{Kind: flow.EvSucceeded, Node: a.Node, Iteration: a.Iteration, Attempt: a.Attempt, Output: outp}}
	return r.commitTurn(ctx, tx, w, out)
}

// maxSay bounds a text answer to a gate.
const maxSay = 2000

// Say answers /flow say <run> <text>, inside the turn's transaction: the
// text reaches the run's waiting gate when it takes text (allow_text) —
// its output is {response: {content: text, choice: ""}}.
func (r *Runtime) Say(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, out core.TaskOut) error {
	id, text, _ := strings.Cut(strings.TrimSpace(arg), " ")
	text = strings.TrimSpace(text)
	if id == "" || text == "" {
		out.Reply("Usage: /flow say <run> <text> — answers the run's waiting question in your own words.")
		return nil
	}
	run, ok, err := r.commandedRun(ctx, tx, st, trust, id, "answer", out)
	if !ok || err != nil {
		return err
	}
	w, err := r.decode(run)
	if err != nil {
		return err
	}
	if n := waitingGate(w); n != nil && !run.Final() {
		ns := w.fr.Nodes[n.ID]
		a, err := tx.FlowAttempt(ctx, run.ID, n.ID, ns.Iteration, ns.Attempt)
		if err != nil {
			return err
		}
		return r.sayTo(ctx, tx, w, a, n, text, st.Turn.Sender, out)
	}
	if !run.Final() {
		if ok, err := r.sayToAgent(ctx, tx, w, render.Clip(text, maxSay), st.Turn.Sender, out); ok || err != nil {
			return err
		}
	}
	out.Reply("Run %s is not waiting for an answer.", ShortID(run.ID))
	return nil
}

// waitingGate is w's first running gate, or nil.
func waitingGate(w *write) *flow.Node {
	for _, n := range w.p.f.Nodes {
		if ns := w.fr.Nodes[n.ID]; n.Type == "control.gate" && ns != nil && ns.Status == flow.NodeRunning {
			return n
		}
	}
	return nil
}

// sayTo answers gate n's attempt a with a person's words: the text itself
// when the gate takes text (allow_text), else the choice it names (its
// label, in any case); otherwise the sender is told the buttons.
func (r *Runtime) sayTo(ctx context.Context, tx *store.Tx, w *write, a core.FlowAttempt, n *flow.Node, text string, by core.IdentityID, out core.TaskOut) error {
	if ok, _ := n.Config["allow_text"].(bool); ok {
		return r.answer(ctx, tx, w, a, n, "", render.Clip(text, maxSay), by, out)
	}
	choices := gateChoices(n)
	for _, c := range choices {
		if strings.EqualFold(strings.TrimSpace(text), c) {
			return r.answer(ctx, tx, w, a, n, c, c, by, out)
		}
	}
	out.Reply("The question of %s (%s) takes only its buttons: %s.", n.ID, ShortID(w.row.ID), strings.Join(choices, ", "))
	return nil
}

// Addressed says whether st's message replies to a flow's card — a gate's
// or a run's progress card — so that the run, not the agent, gets it.
func (r *Runtime) Addressed(ctx context.Context, st core.StoredTurn) (bool, error) {
	t := st.Turn
	if t.ReplyTo == "" || t.Text == "" || strings.HasPrefix(t.Text, "/") {
		return false, nil
	}
	key, err := r.st.CardAt(ctx, t.Channel, t.RepliedIn(), t.ReplyTo)
	if errors.Is(err, core.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return strings.HasPrefix(key, "fgate-") || strings.HasPrefix(key, "flow-"), nil
}

// AnswerReply hands a reply to a flow's card to its run, inside the turn's
// transaction (message injection, as /flow say): a reply to a gate's card
// answers that gate; a reply to a progress card answers the run's waiting
// gate. Only the run's requester or an owner may; anyone else, or a run
// that waits for nothing, is told so.
func (r *Runtime) AnswerReply(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, out core.TaskOut) error {
	t := st.Turn
	key, err := r.st.CardAt(ctx, t.Channel, t.RepliedIn(), t.ReplyTo)
	if err != nil {
		return err
	}
	var a core.FlowAttempt
	id, progress := strings.CutPrefix(key, "flow-")
	if !progress {
		if a, err = tx.FlowAttemptByCard(ctx, key); err != nil {
			return err
		}
		id = a.Run
	}
	run, err := tx.LockFlowRun(ctx, id)
	if err != nil {
		return err
	}
	if run.Conversation != t.RepliedIn() {
		return nil
	}
	if !mayCommand(run, t.Sender, trust) {
		out.Reply("Only %s or an owner can answer run %s; nothing was changed.", run.Requester, ShortID(run.ID))
		return nil
	}
	w, err := r.decode(run)
	if err != nil {
		return err
	}
	var n *flow.Node
	if progress {
		n = waitingGate(w)
		if n != nil {
			ns := w.fr.Nodes[n.ID]
			if a, err = tx.FlowAttempt(ctx, run.ID, n.ID, ns.Iteration, ns.Attempt); err != nil {
				return err
			}
		}
	} else if ns := w.fr.Nodes[a.Node]; a.Status == "running" && ns != nil && ns.Status == flow.NodeRunning && ns.Iteration == a.Iteration && ns.Attempt == a.Attempt {
		n = w.p.f.Node(a.Node)
	}
	if n == nil && progress && !run.Final() {
		if ok, err := r.sayToAgent(ctx, tx, w, render.Clip(t.Text, maxSay), t.Sender, out); ok || err != nil {
			return err
		}
	}
	if n == nil || run.Final() {
		out.Reply("Run %s is not waiting for an answer; nothing was changed.", ShortID(run.ID))
		return nil
	}
	return r.sayTo(ctx, tx, w, a, n, t.Text, t.Sender, out)
}

// Signal answers /flow signal <run> <event> [data], inside the turn's
// transaction: the run's control.wait nodes waiting until event end, with
// {waited: "event", event, data, by} as their output.
func (r *Runtime) Signal(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, out core.TaskOut) error {
	fields := strings.Fields(arg)
	if len(fields) < 2 {
		out.Reply("Usage: /flow signal <run> <event> [data] — ends the run's wait until that event.")
		return nil
	}
	id, event := fields[0], fields[1]
	data := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(arg), id)), event))
	run, ok, err := r.commandedRun(ctx, tx, st, trust, id, "signal", out)
	if !ok || err != nil {
		return err
	}
	w, err := r.decode(run)
	if err != nil {
		return err
	}
	evs := signalEvents(w, flowjob.Signal{Event: event, Data: render.Clip(data, maxSay), By: string(st.Turn.Sender)}, tx.Now())
	if run.Final() || len(evs) == 0 {
		if waits := waitingFor(w); len(waits) > 0 && !run.Final() {
			out.Reply("Run %s is not waiting for %q (it waits for: %s).", ShortID(run.ID), event, strings.Join(waits, ", "))
			return nil
		}
		out.Reply("Run %s is not waiting for an event.", ShortID(run.ID))
		return nil
	}
	w.out, w.queue = out, evs
	out.Audit(audit.Entry{Kind: audit.KindFlowSignalled, Actor: string(st.Turn.Sender), Conversation: string(st.Turn.Conversation),
		Data: map[string]any{"run": run.ID, "flow": run.Flow, "event": event}})
	return r.commitTurn(ctx, tx, w, out)
}

// commandedRun finds the run id names in the turn's conversation and locks
// it in tx when the sender may command it (its requester or an owner);
// otherwise it answers why (ok false, nothing to do). verb is what the
// sender asked to do, for that answer.
func (r *Runtime) commandedRun(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, id, verb string, out core.TaskOut) (run core.FlowRun, ok bool, err error) {
	found, err := r.st.FindFlowRun(ctx, st.Turn.Conversation, id)
	if errors.Is(err, core.ErrNotFound) {
		out.Reply("No flow run here with that id (/flows lists recent runs).")
		return run, false, nil
	}
	if err != nil {
		return run, false, err
	}
	if run, err = tx.LockFlowRun(ctx, found.ID); err != nil {
		return run, false, err
	}
	if !mayCommand(run, st.Turn.Sender, trust) {
		out.Reply("Only %s or an owner can %s that run.", run.Requester, verb)
		return run, false, nil
	}
	return run, true, nil
}
