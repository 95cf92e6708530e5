package core

import "context"

// AgentInput is what an agent may see: the turn's text and who sent it with
// what trust. Never secrets, keys, tokens or approval state.
type AgentInput struct {
	Conversation ConversationID
	Sender       IdentityID
	Trust        Trust
	Text         string
	// Channel and Seq place the message in storage: the channel it came
	// in on and its turn's sequence number (0 when it was never stored).
	// An agent reading the conversation's history uses them to leave out
	// this turn and any stored after it.
	Channel ChannelName
	Seq     int64
}

// ProposedAction is an action plus the words the approval card shows.
type ProposedAction struct {
	Action Action
	// Intent is one line: what the action is for.
	Intent string
	// Rationale is one or two sentences: why.
	Rationale string
	// Step names the flow step the action belongs to (its node and
	// attempt), for the card's preview; "" outside flows.
	Step string
}

// Proposal is an agent's answer: a reply, proposed actions, or both. The
// agent cannot approve, execute or verify anything; the core does.
type Proposal struct {
	Reply   string
	Actions []ProposedAction
	// Task hands a goal that needs several steps to the engine's task
	// runtime (the LLM agent's planner → executor loop). The runtime, not
	// the agent, then plans, proposes each action through the same policy
	// and approval path, and verifies the outcome.
	Task *TaskRequest
	// ModelTokens are the tokens the model spent deciding this proposal
	// (0 without a model): an action that runs under a standing consent
	// is charged them in units (consents.tokens_per_unit).
	ModelTokens int64
}

// TaskRequest is a goal for the task runtime, in the user's words as the
// agent understood them.
type TaskRequest struct {
	Goal string
}

// Agent turns a message into a Proposal. The deterministic command agent is
// the default; an LLM agent implements the same interface.
type Agent interface {
	Respond(ctx context.Context, in AgentInput) (Proposal, error)
}

// InlineAgent is an Agent whose Respond is fast, deterministic and free of
// I/O and side effects (the command agent). The engine may then answer a
// turn in the same transaction that stores it: one commit instead of two,
// and an answer computed for a turn that is not stored after all (a
// redelivery) is simply dropped. An agent that calls a model or any
// service must not claim this: its turns are stored first and answered by
// a worker.
type InlineAgent interface {
	Agent
	Inline() bool
}
