package core

import (
	"encoding/json"
	"time"
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
	CreatedAt    time.Time
	UpdatedAt    time.Time
	FinishedAt   time.Time
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
