package core

import (
	"encoding/json"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/audit"
)

// Task is one stored LLM task (migration 00012): the runtime's state
// machine, its plan and what it has spent. Machine and Limits are the
// runtime's own JSON (core/agent/llm/task); the store does not read them.
type Task struct {
	ID           string
	Channel      ChannelName
	Conversation ConversationID
	Requester    IdentityID
	// Origin is the starting turn without its text (see the migration).
	Origin  json.RawMessage
	Goal    string
	State   string
	Machine json.RawMessage
	Plan    string
	PlanNo  int
	Limits  json.RawMessage
	// Spend so far.
	Tokens     int64
	ModelCalls int64
	ToolCalls  int64
	CostUSD    float64
	CostKnown  bool
	// Rev is the version every update compares and bumps.
	Rev            int64
	Reason         string
	Summary        string
	EscalationCard string
	// QuestionCard is the open card of a question the executor asked
	// (ask_user, migration 00014); "" when none is waiting.
	QuestionCard string
	// FlowRun and FlowStep, for a task an agent.run node of a flow started
	// (migration 00053), name the run and its step (node/iteration/attempt):
	// the task's end wakes the run. FlowTools, when not empty, are the only
	// tools its executor may call.
	FlowRun    string
	FlowStep   string
	FlowTools  []string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time
}

// Final reports whether the task can no longer change.
func (t Task) Final() bool { return t.State == "done" || t.State == "stopped" }

// TaskCall is one tool call of the executor.
type TaskCall struct {
	ID        int64
	TaskID    string
	PlanNo    int
	Step      int
	Attempt   int
	CallID    string
	Tool      string
	Arguments string
	// Approval is the request the runtime made of the call ("" when the
	// call was not an action, or was refused before it became one).
	Approval ApprovalID
	// Status is "waiting" (for its approval and execution) or "done".
	Status string
	// Result is what the model was shown (JSON), once done.
	Result     json.RawMessage
	CreatedAt  time.Time
	FinishedAt time.Time
}

// TaskAttempt is one stored attempt at a step.
type TaskAttempt struct {
	PlanNo, Step, Attempt int
	State, Failure        string
}

// TaskOut is where a person's turn that reaches a task (the agent's
// hand-off, /stop, an answer, a tap on a task's card) writes what the task
// shows in its conversation: the turn's outcome, committed with it. The
// turn's own replies come first, then these, in the order written. Declared
// here so the turn pipeline, the command table and the task runtime share
// it without importing one another.
type TaskOut interface {
	Reply(format string, a ...any)
	Card(c *cards.Card)
	// Update edits a card sent earlier (sent after the turn's new messages).
	Update(c *cards.Card)
	Audit(entries ...audit.Entry)
	// After runs f once the turn's transaction committed (killing a
	// stopped task's running programs in this process).
	After(f func())
}

// TaskTap is what became of a tap on a task's card.
type TaskTap struct {
	// Handled: the card is a task's (an escalation or a question).
	Handled bool
	// Refused, when set, is why the tap changed nothing; Toast is what to
	// tell the tapper either way.
	Refused, Toast string
}
