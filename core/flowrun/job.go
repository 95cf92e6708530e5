package flowrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowjob"
	"github.com/silas-gateway/silas/core/redact"
)

// A flow step as a River job (core/background): a wake-up (read what
// became of the run's open actions, start a run not started yet) or a
// timer (an attempt's timeout, a retry's backoff, a wait's duration),
// scheduled with ScheduledAt so it survives restarts. Either is safe twice
// or late: the compare-and-swap on the run's seq drops a lost race, and
// the state machine ignores an event about an attempt that is no longer
// current.

// Jobs registers the flow step worker on workers and returns its queue,
// for the background room (background.Config.Workers and Queues).
func (r *Runtime) Jobs(workers *river.Workers) map[string]river.QueueConfig {
	river.AddWorker(workers, &stepWorker{r: r})
	// A person waits on a step woken by a tap: fetch soon after River's
	// insert NOTIFY (as the task steps do).
	return map[string]river.QueueConfig{flowjob.Queue: {MaxWorkers: 10, FetchCooldown: 10 * time.Millisecond}}
}

type stepWorker struct {
	river.WorkerDefaults[flowjob.Args]
	r *Runtime
}

// Work advances the run. A database error is returned (River retries the
// job; the sweep covers the rest).
func (w *stepWorker) Work(ctx context.Context, j *river.Job[flowjob.Args]) error {
	if j.Args.Cancel != "" {
		return w.r.commitJob(ctx, j.Args.Run, func(*write) ([]flow.Event, error) {
			return []flow.Event{{Kind: flow.EvCancel, Reason: j.Args.Cancel}}, nil
		})
	}
	if j.Args.Signal != nil {
		return w.r.DeliverSignal(ctx, j.Args.Run, *j.Args.Signal)
	}
	return w.r.Advance(ctx, j.Args.Run, j.Args.Timer)
}

// DeliverSignal delivers sig to run id's waits for it (a job queued by
// `silas flow signal`); a run not waiting for it is left as it is.
func (r *Runtime) DeliverSignal(ctx context.Context, id string, sig flowjob.Signal) error {
	err := r.commitJob(ctx, id, func(w *write) ([]flow.Event, error) {
		evs := signalEvents(w, sig, r.cfg.Now())
		if len(evs) == 0 {
			r.log.Info("flowrun: a signal nobody waits for", slog.String("run", id), slog.String("event", sig.Event))
		}
		return evs, nil
	})
	if err != nil {
		r.log.Error("flowrun: signal failed", slog.String("run", id), slog.Any("err", err))
	}
	return err
}

// signalEvents are the successes of w's running waits until sig's event.
func signalEvents(w *write, sig flowjob.Signal, now time.Time) []flow.Event {
	var evs []flow.Event
	for _, n := range w.p.f.Nodes {
		ns := w.fr.Nodes[n.ID]
		until, _ := n.Config["until"].(string)
		if n.Type != "control.wait" || until == "" || until != sig.Event || ns == nil || ns.Status != flow.NodeRunning {
			continue
		}
		out, _ := json.Marshal(map[string]any{"waited": "event", "event": sig.Event, "data": sig.Data, "by": sig.By})
		evs = append(evs, flow.Event{Kind: flow.EvSucceeded, Node: n.ID, Iteration: ns.Iteration, Attempt: ns.Attempt, Output: out, At: now})
	}
	return evs
}

// waitingFor lists the events w's running waits wait for.
func waitingFor(w *write) []string {
	var out []string
	for _, n := range w.p.f.Nodes {
		ns := w.fr.Nodes[n.ID]
		if until, _ := n.Config["until"].(string); n.Type == "control.wait" && until != "" && ns != nil && ns.Status == flow.NodeRunning {
			out = append(out, until)
		}
	}
	return out
}

// Advance advances run id: the timer given (if any), then the outcomes of
// its open actions.
func (r *Runtime) Advance(ctx context.Context, id string, timer *flowjob.Timer) error {
	err := r.commitJob(ctx, id, func(w *write) ([]flow.Event, error) {
		var evs []flow.Event
		if timer != nil {
			if ev, ok := timerEvent(w, *timer, r.cfg.Now()); ok {
				evs = append(evs, ev)
			}
		}
		more, err := r.outcomes(ctx, w)
		return append(evs, more...), err
	})
	if err != nil {
		r.log.Error("flowrun: advance failed", slog.String("run", id), slog.Any("err", err))
	}
	return err
}

// timerEvent turns a due timer into the machine's event; a wait's timer
// is its node's success.
func timerEvent(w *write, t flowjob.Timer, now time.Time) (flow.Event, bool) {
	switch t.Kind {
	case string(flow.TimerTimeout), string(flow.TimerBackoff):
		return flow.Event{Kind: flow.EvTimer, Timer: flow.TimerKind(t.Kind), Node: t.Node, Iteration: t.Iteration, Attempt: t.Attempt, At: now}, true
	case "wait":
		n := w.p.f.Node(t.Node)
		if n == nil {
			return flow.Event{}, false
		}
		out, _ := json.Marshal(map[string]any{"waited": fmt.Sprint(n.Config["duration"])})
		return flow.Event{Kind: flow.EvSucceeded, Node: t.Node, Iteration: t.Iteration, Attempt: t.Attempt, Output: out, At: now}, true
	}
	return flow.Event{}, false
}

// outcomes reads what became of the run's running action attempts: a
// settled approval or execution is the attempt's event.
func (r *Runtime) outcomes(ctx context.Context, w *write) ([]flow.Event, error) {
	atts := w.open
	if !w.openRead {
		var err error
		if atts, err = r.st.FlowAttempts(ctx, w.row.ID); err != nil {
			return nil, err
		}
	}
	var evs []flow.Event
	for _, a := range atts {
		st := w.fr.Nodes[a.Node]
		if a.Status != "running" || st == nil || st.Status != flow.NodeRunning || st.Iteration != a.Iteration || st.Attempt != a.Attempt {
			continue
		}
		if a.Type == "control.subflow" || a.Type == "control.foreach" {
			children, err := r.st.ChildFlowRuns(ctx, w.row.ID, stepKey(a.Node, a.Iteration, a.Attempt))
			if err != nil {
				return nil, err
			}
			ev, ok, more := r.childOutcome(w, a, children)
			if ok {
				evs = append(evs, ev)
			}
			w.more = w.more || more
			continue
		}
		if a.Type == "agent.run" {
			ev, ok, err := r.agentOutcome(ctx, a)
			if err != nil {
				return nil, err
			}
			if ok {
				evs = append(evs, ev)
			}
			continue
		}
		if a.Approval == "" {
			continue
		}
		ev, ok, err := r.actionOutcome(ctx, a, r.kinds[a.Type].Output)
		if err != nil {
			return nil, err
		}
		if ok {
			evs = append(evs, ev)
		}
	}
	return evs, nil
}

// actionOutcome is an action attempt's event once its approval or
// execution settled. Only the executor's recorded, verified outcome makes
// it a success.
func (r *Runtime) actionOutcome(ctx context.Context, a core.FlowAttempt, shape func(map[string]any) map[string]any) (flow.Event, bool, error) {
	c := flow.Command{Node: a.Node, Iteration: a.Iteration, Attempt: a.Attempt}
	ap, err := r.st.GetApproval(ctx, a.Approval)
	if err != nil {
		return flow.Event{}, false, err
	}
	switch ap.Status {
	case core.ApprovalDeclined:
		return failEv(c, CodeDeclined, fmt.Sprintf("declined by %s; nothing was run", ap.DecidedBy), true, nil), true, nil
	case core.ApprovalExpired:
		return failEv(c, CodeDeclined, "the approval card expired without a decision; nothing was run", true, nil), true, nil
	case core.ApprovalApproved:
	default:
		return flow.Event{}, false, nil
	}
	ex, err := r.st.GetExecution(ctx, a.Approval)
	if errors.Is(err, core.ErrNotFound) {
		return flow.Event{}, false, nil
	}
	if err != nil {
		return flow.Event{}, false, err
	}
	switch ex.Status {
	case core.ExecRefused:
		return failEv(c, CodeRefused, "refused before it ran: "+ex.Reason, true, nil), true, nil
	case core.ExecInterrupted:
		return failEv(c, CodeInterrupted, "interrupted ("+ex.Reason+"): it may or may not have completed, and it was not run again", true, nil), true, nil
	case core.ExecVerified, core.ExecFailed:
	default:
		return flow.Event{}, false, nil
	}
	out := map[string]any{"verified": ex.Status == core.ExecVerified, "approval": string(a.Approval)}
	if ex.Result != nil {
		stdout, stderr := ex.Result.Stdout, ex.Result.Stderr
		var act core.Action
		if json.Unmarshal(ap.ActionCanonical, &act) == nil && len(act.Secrets) > 0 {
			// Not one byte of a secret run's output reaches the run's
			// expressions (and through them a card or a later command).
			stdout, stderr = core.SecretOutputWithheld, ""
		}
		out["exit_code"], out["stdout"], out["stderr"] = ex.Result.ExitCode, redactText(stdout), redactText(stderr)
	}
	if shape != nil {
		out = shape(out)
	}
	b, _ := json.Marshal(out)
	if ex.Status == core.ExecFailed {
		// A failed verification may be retried (policy.retry): another
		// attempt is another proposal, with its own card and token.
		return failEv(c, CodeVerify, "it ran and its verification failed: "+ex.Reason, false, b), true, nil
	}
	return flow.Event{Kind: flow.EvSucceeded, Node: a.Node, Iteration: a.Iteration, Attempt: a.Attempt, Output: b}, true, nil
}

// Resume advances the running runs that may have news nobody woke them
// for (at start and as the sweep): an action whose card expired, a step
// job that gave up. Runs waiting on a tap, a gate or a timer are left
// alone: they cost nothing while they wait.
func (r *Runtime) Resume(ctx context.Context) error {
	list, err := r.st.FlowRunsToSweep(ctx)
	if err != nil {
		return fmt.Errorf("flowrun: resume: %w", err)
	}
	for _, run := range list {
		if err := r.Advance(ctx, run.ID, nil); err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// SweepEvery is how often Resume should run (Config.Sweep).
func (r *Runtime) SweepEvery() time.Duration { return r.cfg.Sweep }

func redactText(s string) string {
	out, _ := redact.Redact(s)
	return out
}
