package flow

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"
)

// StateVersion is the version of Run's JSON form. The runtime stores it
// with every transition; a change of meaning bumps it, and a stored run of
// another version is refused rather than misread.
const StateVersion = 1

// RunStatus is where a run is.
type RunStatus string

// Run statuses.
const (
	RunRunning   RunStatus = "running"
	RunSucceeded RunStatus = "succeeded"
	RunFailed    RunStatus = "failed"
	RunCancelled RunStatus = "cancelled"
)

// NodeStatus is where a node is; the last four are final.
type NodeStatus string

// Node statuses.
const (
	// NodePending waits for its incoming edges to be decided.
	NodePending NodeStatus = "pending"
	// NodeReady may run and waits for a parallel slot.
	NodeReady NodeStatus = "ready"
	// NodeRunning has an attempt ordered (a start command).
	NodeRunning NodeStatus = "running"
	// NodeBackoff failed an attempt and waits for its retry timer.
	NodeBackoff NodeStatus = "backoff"
	// NodeLooping is a control.loop whose body is running.
	NodeLooping   NodeStatus = "looping"
	NodeSucceeded NodeStatus = "succeeded"
	NodeFailed    NodeStatus = "failed"
	NodeSkipped   NodeStatus = "skipped"
	NodeCancelled NodeStatus = "cancelled"
)

// Final says the node will not change again (in this loop iteration).
func (s NodeStatus) Final() bool {
	switch s {
	case NodeSucceeded, NodeFailed, NodeSkipped, NodeCancelled:
		return true
	}
	return false
}

// EdgeStatus is an edge's decision.
type EdgeStatus string

// Edge statuses.
const (
	EdgePending EdgeStatus = "pending"
	EdgeFired   EdgeStatus = "fired"
	EdgeSkipped EdgeStatus = "skipped"
)

// Error codes the machine itself gives; the runtime adds its own (for
// example "declined", "verification").
const (
	CodeTimeout    = "timeout"    // an attempt outlived policy.timeout
	CodeExpression = "expression" // a when or a control expression failed
	CodeFail       = "fail"       // a control.fail node
	CodeBound      = "bound"      // foreach over more than max_items
	CodeBodyFailed = "body_failed"
	CodeCancelled  = "cancelled"
)

// NodeError is why a node failed.
type NodeError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Permanent says retrying cannot help (an approval was declined, an
	// expression is wrong): the machine does not retry it.
	Permanent bool `json:"permanent,omitempty"`
}

func (e *NodeError) Error() string { return e.Code + ": " + e.Message }

// NodeState is one node's part of a run.
type NodeState struct {
	Status NodeStatus `json:"status"`
	// Attempt is the current or last attempt, from 1.
	Attempt int `json:"attempt,omitempty"`
	// Iteration is, for a control.loop, the iterations begun; for a node
	// in a loop's body, the iteration it belongs to; else 0.
	Iteration int `json:"iteration,omitempty"`
	// Output is the node's output (JSON); for a failure continued on
	// error, the marker {failed: true, error: {code, message}, output?}.
	Output json.RawMessage `json:"output,omitempty"`
	Error  *NodeError      `json:"error,omitempty"`
	// Handled marks a failure continued on error.
	Handled bool `json:"handled,omitempty"`
	// Input is what a start command carries (a foreach's items).
	Input json.RawMessage `json:"input,omitempty"`
}

// Run is the whole state of one run: JSON-serialisable and all the
// machine needs, so the runtime can store it with each transition and
// resume from the last stored one.
type Run struct {
	V        int            `json:"v"`
	Flow     string         `json:"flow"`
	FlowHash string         `json:"flow_hash"`
	Inputs   map[string]any `json:"inputs"`
	Status   RunStatus      `json:"status"`
	// Failed records that an unhandled failure happened (the run ends
	// failed even when fail_fast is off and other branches go on).
	Failed bool `json:"failed,omitempty"`
	// Reason says why a run stopped early (cancel, fail_fast).
	Reason string `json:"reason,omitempty"`
	// MaxParallel bounds running attempts (0: no bound); pinned at start
	// from flows.max_parallel.
	MaxParallel int `json:"max_parallel"`
	// Seq counts transitions; the runtime's unique (run, seq) makes a
	// replayed transition a no-op.
	Seq   int64                 `json:"seq"`
	Nodes map[string]*NodeState `json:"nodes"`
	Edges []EdgeStatus          `json:"edges"`
}

// DecodeRun reads a stored run.
func DecodeRun(b []byte) (*Run, error) {
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("flow: stored run: %w", err)
	}
	if r.V != StateVersion {
		return nil, fmt.Errorf("flow: stored run has state version %d, this build reads %d", r.V, StateVersion)
	}
	for k, v := range r.Inputs {
		r.Inputs[k] = normalize(v)
	}
	return &r, nil
}

// AsStored returns r as DecodeRun reads it back once stored, without the
// round trip through JSON: the same run (shared, not copied: a Run is
// never mutated once a step returned it), its inputs as decoding gives
// them (a whole number bound as a float comes back an int64). The
// runtime steps a run it just stored from this instead of decoding it
// again; the other fields read back as they are (node outputs differ at
// most in the JSON's spacing, and are only ever decoded).
func AsStored(r *Run) (*Run, error) {
	c := *r
	if len(r.Inputs) > 0 {
		b, err := json.Marshal(r.Inputs)
		if err != nil {
			return nil, fmt.Errorf("flow: run inputs: %w", err)
		}
		c.Inputs = nil
		if err := json.Unmarshal(b, &c.Inputs); err != nil {
			return nil, fmt.Errorf("flow: run inputs: %w", err)
		}
		for k, v := range c.Inputs {
			c.Inputs[k] = normalize(v)
		}
	}
	return &c, nil
}

// clone copies r for a step: the node states are shared until the step
// changes one (step.ns copies it then).
func (r *Run) clone() *Run {
	c := *r
	c.Inputs = r.Inputs // never mutated after Start
	c.Nodes = maps.Clone(r.Nodes)
	c.Edges = append([]EdgeStatus(nil), r.Edges...)
	return &c
}

// EventKind names what happened.
type EventKind string

// Event kinds.
const (
	// EvStarted: the runtime began an attempt (arms its timeout).
	EvStarted EventKind = "attempt_started"
	// EvSucceeded: an attempt finished with Output.
	EvSucceeded EventKind = "succeeded"
	// EvFailed: an attempt failed with Error (and maybe Output).
	EvFailed EventKind = "failed"
	// EvTimer: a timer the machine asked for fired.
	EvTimer EventKind = "timer"
	// EvCancel: someone stopped the run (/flow stop).
	EvCancel EventKind = "cancel"
	// EvSkip: a person skipped a node that was ready, running (waiting on
	// its card, its gate or its wait) or waiting to retry, for Reason
	// (/flow skip, decided first by the flow execution gate, core/consent).
	// Its running attempt is stopped; the node ends skipped with Output
	// (default {skipped: true, reason}) and, unlike a branch not taken,
	// its edges are decided as for a success — the run goes on past it
	// (a when that cannot read the skipped node's output skips its edge).
	EvSkip EventKind = "skip"
)

// TimerKind says what a timer is for.
type TimerKind string

// Timer kinds.
const (
	TimerTimeout TimerKind = "timeout"
	TimerBackoff TimerKind = "backoff"
)

// Event is one input to the machine. Node, Iteration and Attempt name the
// attempt it is about; an event about any other attempt than the node's
// current one is stale and ignored (recorded, not an error).
type Event struct {
	Kind      EventKind       `json:"kind"`
	Node      string          `json:"node,omitempty"`
	Iteration int             `json:"iteration,omitempty"`
	Attempt   int             `json:"attempt,omitempty"`
	At        time.Time       `json:"at"`
	Output    json.RawMessage `json:"output,omitempty"`
	Error     *NodeError      `json:"error,omitempty"`
	Timer     TimerKind       `json:"timer,omitempty"`
	Reason    string          `json:"reason,omitempty"`
}

// CommandKind names what the runtime must do.
type CommandKind string

// Command kinds.
const (
	// CmdStart: run an attempt of a work node (a River job).
	CmdStart CommandKind = "start"
	// CmdStop: stop a running attempt (fail_fast, cancel, timeout) and
	// report what it had done.
	CmdStop CommandKind = "stop"
	// CmdTimer: deliver an EvTimer at At (a scheduled River job).
	CmdTimer CommandKind = "timer"
	// CmdFinish: the run ended with Status.
	CmdFinish CommandKind = "finish"
)

// Command is one output of the machine.
type Command struct {
	Kind      CommandKind     `json:"kind"`
	Node      string          `json:"node,omitempty"`
	Iteration int             `json:"iteration,omitempty"`
	Attempt   int             `json:"attempt,omitempty"`
	At        time.Time       `json:"at,omitzero"`
	Timer     TimerKind       `json:"timer,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Status    RunStatus       `json:"status,omitempty"`
}

// Transition is what one event did: the runtime stores it (with the new
// Run) before executing its commands.
type Transition struct {
	Seq      int64     `json:"seq"`
	Event    Event     `json:"event"`
	Commands []Command `json:"commands"`
	// Ignored says why the event changed nothing (stale attempt, run over).
	Ignored string `json:"ignored,omitempty"`
}
