package flowrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowjob"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/store"
)

// maxEvents bounds the events one transaction applies (inline work feeds
// events back; a flow cannot loop forever without a job in between, but a
// bound keeps a transaction small whatever the flow).
const maxEvents = 500

// sink is where a transition's messages, audit entries and after-commit
// work go: a step job's own transaction, or a person's turn (core.TaskOut).
type sink interface {
	Card(c *cards.Card)
	Update(c *cards.Card)
	Reply(format string, a ...any)
	Audit(entries ...audit.Entry)
	After(f func())
}

// jobSink collects for a step job's transaction, queued at its end.
type jobSink struct {
	cards, updates []*cards.Card
	replies        []string
	audit          []audit.Entry
	after          []func()
}

func (s *jobSink) Card(c *cards.Card)   { s.cards = append(s.cards, c) }
func (s *jobSink) Update(c *cards.Card) { s.updates = append(s.updates, c) }
func (s *jobSink) Reply(format string, a ...any) {
	s.replies = append(s.replies, fmt.Sprintf(format, a...))
}
func (s *jobSink) Audit(entries ...audit.Entry) { s.audit = append(s.audit, entries...) }
func (s *jobSink) After(f func())               { s.after = append(s.after, f) }
func (s *jobSink) messages() int                { return len(s.cards) + len(s.updates) + len(s.replies) }

// queue queues what s shows to the run's conversation inside tx: replies,
// new cards, then edits (the progress card last, so it shows the end
// state of the transaction).
func (s *jobSink) queue(tx *store.Tx, run core.FlowRun) error {
	for _, t := range s.replies {
		if err := tx.QueueMessage(run.Channel, core.OpSend, "r-"+core.NewID(), core.OutMessage{Conversation: run.Conversation, Text: t}); err != nil {
			return err
		}
	}
	for _, c := range s.cards {
		if err := tx.QueueMessage(run.Channel, core.OpSend, string(c.ID), core.OutMessage{Conversation: run.Conversation, Card: c}); err != nil {
			return err
		}
	}
	for _, c := range s.updates {
		if err := tx.QueueMessage(run.Channel, core.OpUpdate, string(c.ID), core.OutMessage{Conversation: run.Conversation, Card: c}); err != nil {
			return err
		}
	}
	return nil
}

// write is one transaction's work on a run: events in, transitions stored,
// commands carried out.
type write struct {
	row    core.FlowRun // as read: row.Seq is what the update compares
	p      *pinned
	fr     *flow.Run
	origin core.Turn
	queue  []flow.Event
	out    sink
	// proposed are proposals policy approved (started after commit).
	proposed []propose.Step
	// messages counts what the proposals queued (for the outbox kick).
	messages int
	stop     []core.ApprovalID
	started  bool // the run's first transition (the progress card is new)
	// more: a foreach may start more children (the step must run even
	// without an event).
	more bool
	// endedChildren are subflow and foreach attempts that failed in this
	// write: their children still running are cancelled.
	endedChildren []core.FlowAttempt
	// open are the run's running attempts as read with the row (commitJob
	// reads both in one round trip), when openRead; else outcomes reads them.
	open     []core.FlowAttempt
	openRead bool
}

func (r *Runtime) decode(row core.FlowRun) (*write, error) {
	p, err := r.machine(row)
	if err != nil {
		return nil, err
	}
	fr, err := flow.DecodeRun(row.State)
	if err != nil {
		return nil, fmt.Errorf("flowrun: run %s: %w", row.ID, err)
	}
	w := &write{row: row, p: p, fr: fr}
	if err := json.Unmarshal(row.Origin, &w.origin); err != nil {
		return nil, fmt.Errorf("flowrun: run %s: origin: %w", row.ID, err)
	}
	return w, nil
}

// entry is an audit entry of the run, in the gateway's name.
func (w *write) entry(kind audit.Kind, data map[string]any) audit.Entry {
	if data == nil {
		data = map[string]any{}
	}
	data["run"] = w.row.ID
	data["flow"] = w.row.Flow
	return audit.Entry{Kind: kind, Actor: "silas", Conversation: string(w.row.Conversation), Data: data}
}

// apply runs w's queued events through the machine inside tx (starting the
// run first when it has not started), stores each transition and carries
// out its commands, then compare-and-swaps the run row. ok=false: another
// writer stored a transition first; the caller's transaction must not
// commit what was done (the error errLost rolls it back).
func (r *Runtime) apply(ctx context.Context, tx *store.Tx, w *write) error {
	if w.fr.Seq == 0 {
		fr, tr, err := w.p.m.Start(w.fr.Inputs, w.fr.MaxParallel)
		if err != nil {
			return fmt.Errorf("flowrun: run %s: start: %w", w.row.ID, err)
		}
		w.fr, w.started = fr, true
		if w.row.Parent == "" {
			w.out.Card(r.progressCard(w))
		}
		w.out.Audit(w.entry(audit.KindFlowRunStarted, map[string]any{"version": w.row.Version, "hash": w.row.FlowHash}))
		if err := r.transition(ctx, tx, w, tr); err != nil {
			return err
		}
	}
	for n := 0; len(w.queue) > 0; n++ {
		if n == maxEvents {
			// The rest waits for the next step job, queued with this commit.
			tx.QueueFlowStep(w.row.ID)
			break
		}
		ev := w.queue[0]
		w.queue = w.queue[1:]
		if ev.At.IsZero() {
			ev.At = tx.Now()
		}
		fr, tr, err := w.p.m.Step(w.fr, ev)
		if err != nil {
			// Cannot belong to this run: nothing is stored for it.
			r.log.Warn("flowrun: event refused", slog.String("run", w.row.ID), slog.Any("err", err))
			continue
		}
		w.fr = fr
		if tr.Ignored == "" {
			r.ended(tx, w, ev)
		}
		if err := r.transition(ctx, tx, w, tr); err != nil {
			return err
		}
	}
	state, err := json.Marshal(w.fr)
	if err != nil {
		return err
	}
	row := w.row
	row.State, row.Seq, row.Status, row.Reason = state, w.fr.Seq, string(w.fr.Status), w.fr.Reason
	// Queued with the transition rows, not a round trip of its own: a lost
	// race fails the transaction's next send with errLost, before COMMIT.
	tx.QueueUpdateFlowRun(row, w.row.Seq)
	for _, a := range w.endedChildren {
		if err := cancelChildren(ctx, tx, w.row.ID, a, "its parent's step ended"); err != nil {
			return err
		}
	}
	if w.row.Parent != "" {
		// A child run: its parent's card shows it; its end wakes the parent.
		if row.Final() {
			tx.QueueFlowStep(w.row.Parent)
		}
		return nil
	}
	if !w.started {
		w.out.Update(r.progressCard(w))
	}
	return nil
}

// errLost: another writer advanced the run first; the transaction is
// rolled back and the run read again.
var errLost = store.ErrFlowRunChanged

// transition stores tr and carries out its commands.
func (r *Runtime) transition(ctx context.Context, tx *store.Tx, w *write, tr flow.Transition) error {
	ev, err := json.Marshal(tr.Event)
	if err != nil {
		return err
	}
	cmds, err := json.Marshal(tr.Commands)
	if err != nil {
		return err
	}
	tx.QueueFlowTransition(w.row.ID, tr.Seq, ev, cmds, tr.Ignored)
	for _, c := range tr.Commands {
		if err := r.command(ctx, tx, w, c); err != nil {
			return err
		}
	}
	return nil
}

// ended records how an attempt ended, for the events that end one.
func (r *Runtime) ended(tx *store.Tx, w *write, ev flow.Event) {
	a := core.FlowAttempt{Run: w.row.ID, Node: ev.Node, Iteration: ev.Iteration, Attempt: ev.Attempt}
	switch {
	case ev.Kind == flow.EvSucceeded:
		a.Status, a.Output = "succeeded", ev.Output
	case ev.Kind == flow.EvFailed:
		a.Status, a.Output = "failed", ev.Output
		a.Error, _ = json.Marshal(ev.Error)
		if n := w.p.f.Node(ev.Node); n != nil && (n.Type == "control.subflow" || n.Type == "control.foreach") {
			w.endedChildren = append(w.endedChildren, a)
		}
	default:
		// A timeout ends its attempt through the stop command the machine
		// orders with it (its open card declined, its run killed).
		return
	}
	tx.QueueFlowAttemptEnd(a)
	data := map[string]any{"node": ev.Node, "iteration": ev.Iteration, "attempt": ev.Attempt, "status": a.Status}
	if ev.Error != nil {
		data["code"] = ev.Error.Code
	}
	w.out.Audit(w.entry(audit.KindFlowNodeFinished, data))
}

// command carries out one command of a transition inside tx.
func (r *Runtime) command(ctx context.Context, tx *store.Tx, w *write, c flow.Command) error {
	switch c.Kind {
	case flow.CmdStart:
		return r.start(ctx, tx, w, c)
	case flow.CmdStop:
		return r.stop(ctx, tx, w, c)
	case flow.CmdTimer:
		tx.QueueFlowTimer(w.row.ID, flowjob.Timer{Node: c.Node, Iteration: c.Iteration, Attempt: c.Attempt, Kind: string(c.Timer)}, c.At)
	case flow.CmdFinish:
		if w.row.Parent == "" {
			w.out.Reply("%s", summary(w))
		}
		w.out.Audit(w.entry(audit.KindFlowRunFinished, map[string]any{"status": string(c.Status), "reason": c.Reason}))
	}
	return nil
}

// commitJob advances a run in a transaction of its own (a step job, the
// sweep): the events, then the compare-and-swap; on a lost race it reads
// the run again and recomputes.
func (r *Runtime) commitJob(ctx context.Context, id string, events func(w *write) ([]flow.Event, error)) error {
	for range 5 {
		h, holding := r.holding(id)
		have := int64(-1)
		if holding {
			have = h.seq
		}
		row, open, err := r.st.FlowRunOpenAt(ctx, id, have)
		if errors.Is(err, core.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if row.Final() {
			return nil
		}
		var probe *write
		if holding && row.Seq == h.seq {
			// Read without state, origin and document: as held.
			probe = &write{row: row, p: h.p, fr: h.fr, origin: h.origin}
		} else if probe, err = r.decode(row); err != nil {
			return err
		}
		probe.open, probe.openRead = open, true
		evs, err := events(probe)
		if err != nil {
			return err
		}
		if len(evs) == 0 && probe.fr.Seq > 0 && !probe.more {
			return nil
		}
		var s *jobSink
		var w *write
		err = r.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			s = &jobSink{}
			// The probe's decoding, not a second one: the machine never
			// mutates a run it is given, so probe.fr is still the row's
			// state when this op runs again (a batch retried op by op).
			w = &write{row: row, p: probe.p, fr: probe.fr, origin: probe.origin}
			w.queue, w.out, w.more = evs, s, probe.more
			if err := r.spawnAll(ctx, tx, w); err != nil {
				return nil, err
			}
			if err := r.apply(ctx, tx, w); err != nil {
				return nil, err
			}
			if err := s.queue(tx, w.row); err != nil {
				return nil, err
			}
			return s.audit, nil
		})
		if errors.Is(err, errLost) {
			continue
		}
		if err != nil {
			return err
		}
		r.failpoint("flow-after-step")
		r.hold(w)
		r.committed(w, s.after)
		if n := s.messages() + w.messages; n > 0 {
			r.out.Kick(row.Conversation, n)
		}
		return nil
	}
	return fmt.Errorf("flowrun: run %s: lost the race five times", id)
}

// committed does what w's commit calls for in this process: approved
// proposals start, stopped executions are killed.
func (r *Runtime) committed(w *write, after []func()) {
	for _, p := range w.proposed {
		r.actions.Proposed(p)
	}
	r.actions.StopRuns(w.stop)
	for _, f := range after {
		f()
	}
}
