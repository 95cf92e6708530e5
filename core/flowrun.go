package core

import (
	"encoding/json"
	"strings"
	"time"
)

// FlowRun is one stored run of a flow (migration 00050). State is the pure
// state machine's JSON (core/flow.Run) and Document the flow file's bytes
// at start (the run is pinned to them); the store reads neither.
type FlowRun struct {
	ID           string
	Flow         string
	Version      string
	FlowHash     string
	Document     []byte
	File         string
	Channel      ChannelName
	Conversation ConversationID
	Requester    IdentityID
	// Origin is the starting turn without its text.
	Origin json.RawMessage
	Status string
	State  json.RawMessage
	// Seq is the number of the last transition stored; every update
	// compares and bumps it.
	Seq          int64
	ProgressCard string
	Reason       string
	// Parent, for a child run (a control.subflow's, or a control.foreach's
	// per item), is the parent run, ParentStep its step
	// ("node/iteration/attempt") and ParentIndex the item's index.
	Parent      string
	ParentStep  string
	ParentIndex int
	CreatedAt   time.Time
	UpdatedAt   time.Time
	FinishedAt  time.Time
}

// Final reports whether the run can no longer change.
func (r FlowRun) Final() bool { return r.Status != "running" }

// FlowAttempt is one attempt of a work node of a run.
type FlowAttempt struct {
	Run       string
	Node      string
	Iteration int
	Attempt   int
	Type      string
	// Status: running, succeeded, failed, stopped.
	Status string
	// Approval is an action node's approval request; Card a gate's card.
	Approval   ApprovalID
	Card       string
	Output     json.RawMessage
	Error      json.RawMessage
	StartedAt  time.Time
	FinishedAt time.Time
}

// FlowOwner is what an approval request proposed for a flow run carries in
// its Task field: the decider and the executor queue the owner's step job
// with the transaction that settles the request (store.Tx.QueueTaskStep
// routes it to the flow step job by this prefix).
const FlowOwner = "flow:"

// FlowRunOf returns the run an approval's Task field names, if any.
func FlowRunOf(task string) (string, bool) {
	return strings.CutPrefix(task, FlowOwner)
}

// FlowTask is what a flow's agent.run attempt asks of the task runtime
// (core/flowrun calls it, core/tasks serves it; declared here so neither
// imports the other).
type FlowTask struct {
	// Run and Step name the flow run and its step (node/iteration/attempt);
	// a second start for the same pair starts nothing.
	Run, Step string
	// Origin is the run's starting turn (without its text): trust is
	// decided from its evidence again before every proposal.
	Origin Turn
	Goal   string
	// Tools, when not empty, are the only tools the executor may call
	// (anything else is answered "not allowed" and never proposed);
	// MaxSteps, when positive, lowers the tool-call budget.
	Tools    []string
	MaxSteps int
}
