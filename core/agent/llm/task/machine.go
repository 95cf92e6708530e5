package task

import (
	"fmt"

	"github.com/silas-gateway/silas/core/agent/llm/plan"
)

// State is where a task is.
type State string

// Task states. Done and Stopped are final.
const (
	Planning   State = "planning"
	Running    State = "running"    // the executor works on Machine.Step
	Verifying  State = "verifying"  // the runtime runs the plan's checks
	Consulting State = "consulting" // waiting for the planner's guidance
	Replanning State = "replanning" // waiting for a revised plan
	Escalated  State = "escalated"  // waiting for the user: retry, re-plan or stop
	Done       State = "done"
	Stopped    State = "stopped"
)

// EventKind is what happened. Only the runtime reports events; a model's
// own claim that a step worked is never one of them.
type EventKind string

// Events.
const (
	PlanReady       EventKind = "plan_ready"       // a valid plan (Event.Steps set)
	PlanFailed      EventKind = "plan_failed"      // no valid plan after the repair round-trip
	StepSucceeded   EventKind = "step_succeeded"   // the step's actions ran and passed their checks
	StepFailed      EventKind = "step_failed"      // an action failed, was blocked or declined, or the executor gave up
	VerifyPassed    EventKind = "verify_passed"    // all plan checks passed (runtime's verification)
	VerifyFailed    EventKind = "verify_failed"    // a plan check failed
	GuidanceReady   EventKind = "guidance_ready"   // the planner answered a consultation
	GuidanceFailed  EventKind = "guidance_failed"  // it did not (invalid, timed out)
	BudgetExhausted EventKind = "budget_exhausted" // Spent.Exhausted said so
	UserRetry       EventKind = "user_retry"       // escalation card: Retry
	UserReplan      EventKind = "user_replan"      // escalation card: Re-plan
	UserStop        EventKind = "user_stop"        // /stop or the card's Stop
)

// Event is one input to Next.
type Event struct {
	Kind EventKind
	// Steps is the number of steps of a new plan (PlanReady).
	Steps int
	// HasChecks tells whether the plan has verify checks (PlanReady).
	HasChecks bool
	// Detail is the failure, the guidance or the budget reason.
	Detail string
}

// Policy is how hard the runtime tries before it asks the user.
type Policy struct {
	// MaxAttempts per step before the next recovery level (default 3).
	MaxAttempts int
	// MaxReplans per task (default 2, seed 003 §19.4.2).
	MaxReplans int
	// OnStuck is the plan's choice of first recovery after the attempts.
	OnStuck plan.OnStuck
}

func (p Policy) withDefaults() Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 3
	}
	if p.MaxReplans < 0 {
		p.MaxReplans = 0
	} else if p.MaxReplans == 0 {
		p.MaxReplans = 2
	}
	if p.OnStuck == "" {
		p.OnStuck = plan.ConsultPlanner
	}
	return p
}

// Machine is a task's recovery state; the runtime stores it with the task.
type Machine struct {
	State     State
	Steps     int
	HasChecks bool
	// Step is the current step, 0-based; Attempt counts from 1.
	Step    int
	Attempt int
	// Consulted is set once the planner was consulted for this plan.
	Consulted bool
	Replans   int
	// Failure is the last failure, given to the next attempt as context;
	// Guidance is the planner's answer to a consultation.
	Failure  string
	Guidance string
	// Reason says why the task stopped or was escalated.
	Reason string
}

// DirectiveKind is what the runtime must do next.
type DirectiveKind string

// Directives.
const (
	DoPlan     DirectiveKind = "plan"     // ask the planner for a plan
	DoRunStep  DirectiveKind = "run_step" // ask the executor for Step's next tool call
	DoVerify   DirectiveKind = "verify"   // run the plan's checks
	DoConsult  DirectiveKind = "consult"  // ask the planner for guidance on Step
	DoReplan   DirectiveKind = "replan"   // ask the planner for a different plan
	DoEscalate DirectiveKind = "escalate" // send the escalation card
	DoFinish   DirectiveKind = "finish"   // report success
	DoStop     DirectiveKind = "stop"     // report the stop; close pending cards
)

// Directive is Next's instruction to the runtime.
type Directive struct {
	Kind DirectiveKind
	// Step and Attempt of a DoRunStep/DoConsult.
	Step, Attempt int
	// Failure and Guidance are context for the executor or planner.
	Failure, Guidance string
	// Reason of a DoEscalate or DoStop, in plain words for the user.
	Reason string
}

// Start is a new task's machine and its first directive.
func Start() (Machine, Directive) {
	return Machine{State: Planning}, Directive{Kind: DoPlan}
}

// Next applies one event. An event the state does not expect is an error
// and changes nothing: a stale or duplicated event (a tap on an old card, a
// re-delivered job) must not move a task.
func Next(m Machine, ev Event, pol Policy) (Machine, Directive, error) {
	pol = pol.withDefaults()
	if m.State == Done || m.State == Stopped {
		return m, Directive{}, fmt.Errorf("task: %s event on a %s task", ev.Kind, m.State)
	}
	switch ev.Kind {
	case UserStop:
		m.State, m.Reason = Stopped, "stopped by the user"
		return m, Directive{Kind: DoStop, Reason: m.Reason}, nil
	case BudgetExhausted:
		m.State, m.Reason = Stopped, ev.Detail
		return m, Directive{Kind: DoStop, Reason: ev.Detail}, nil
	}
	bad := func() (Machine, Directive, error) {
		return m, Directive{}, fmt.Errorf("task: %s event while %s", ev.Kind, m.State)
	}
	switch m.State {
	case Planning, Replanning:
		switch ev.Kind {
		case PlanReady:
			if ev.Steps < 1 {
				return m, Directive{}, fmt.Errorf("task: a plan without steps")
			}
			if m.State == Replanning {
				m.Replans++
			}
			m = Machine{State: Running, Steps: ev.Steps, HasChecks: ev.HasChecks, Attempt: 1, Replans: m.Replans}
			return m, m.run(), nil
		case PlanFailed:
			return m.escalate("the planner could not produce a valid plan: " + ev.Detail)
		}
	case Running:
		switch ev.Kind {
		case StepSucceeded:
			m.Failure, m.Guidance = "", ""
			if m.Step+1 < m.Steps {
				m.Step++
				m.Attempt = 1
				return m, m.run(), nil
			}
			if m.HasChecks {
				m.State = Verifying
				return m, Directive{Kind: DoVerify}, nil
			}
			// Every step's actions passed their own checks and the plan
			// asks for nothing more.
			m.State = Done
			return m, Directive{Kind: DoFinish}, nil
		case StepFailed:
			return m.recover(ev.Detail, pol)
		}
	case Verifying:
		switch ev.Kind {
		case VerifyPassed:
			m.State = Done
			return m, Directive{Kind: DoFinish}, nil
		case VerifyFailed:
			m.State = Running // the last step is retried with the failure
			return m.recover("verification failed: "+ev.Detail, pol)
		}
	case Consulting:
		switch ev.Kind {
		case GuidanceReady:
			m.State, m.Attempt, m.Guidance = Running, 1, ev.Detail
			return m, m.run(), nil
		case GuidanceFailed:
			m.State = Running
			return m.afterConsult(pol)
		}
	case Escalated:
		switch ev.Kind {
		case UserRetry:
			m.State, m.Attempt, m.Consulted, m.Reason = Running, 1, false, ""
			return m, m.run(), nil
		case UserReplan:
			// The user's choice is not limited by MaxReplans.
			m.State, m.Reason = Replanning, ""
			return m, Directive{Kind: DoReplan, Failure: m.Failure}, nil
		}
	}
	return bad()
}

func (m Machine) run() Directive {
	return Directive{Kind: DoRunStep, Step: m.Step, Attempt: m.Attempt, Failure: m.Failure, Guidance: m.Guidance}
}

// recover is the cascade after a failure of the current step: retry within
// the attempts, then the plan's on_stuck (consult the planner once, then
// re-plan within MaxReplans), then escalate.
func (m Machine) recover(failure string, pol Policy) (Machine, Directive, error) {
	m.Failure = failure
	if m.Attempt < pol.MaxAttempts {
		m.Attempt++
		return m, m.run(), nil
	}
	if pol.OnStuck == plan.ConsultPlanner && !m.Consulted {
		m.State, m.Consulted = Consulting, true
		return m, Directive{Kind: DoConsult, Step: m.Step, Attempt: m.Attempt, Failure: failure}, nil
	}
	return m.afterConsult(pol)
}

func (m Machine) afterConsult(pol Policy) (Machine, Directive, error) {
	if pol.OnStuck != plan.Escalate && m.Replans < pol.MaxReplans {
		m.State = Replanning
		return m, Directive{Kind: DoReplan, Failure: m.Failure}, nil
	}
	return m.escalate(fmt.Sprintf("stuck on step %d: %s", m.Step+1, m.Failure))
}

func (m Machine) escalate(reason string) (Machine, Directive, error) {
	m.State, m.Reason = Escalated, reason
	return m, Directive{Kind: DoEscalate, Step: m.Step, Reason: reason}, nil
}
