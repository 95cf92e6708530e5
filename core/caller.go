package core

import "time"

// Records of the callers gate (core/callgate): outside agents — Claude
// Code, Codex, a script — that reach Silas as an MCP server (docs/mcp.md)
// and whose calls become ordinary proposals from the identity
// "mcp:<token name>".

// CallerPlatform is the platform part of a caller's identity
// ("mcp:<token name>").
const CallerPlatform = "mcp"

// MCPToken is one bearer token as listed: its name and times, never the
// token (only its sha256 is stored).
type MCPToken struct {
	Name       string
	CreatedAt  time.Time
	RevokedAt  time.Time // zero: not revoked
	LastUsedAt time.Time // zero: never used
}

// QuestionKind says what a caller's question asks for.
type QuestionKind string

const (
	// QuestionAsk: a question with choices; the answer is the choice.
	QuestionAsk QuestionKind = "ask"
	// QuestionApproval: approve or decline an action the caller performs
	// itself; the answer is a signed decision.
	QuestionApproval QuestionKind = "approval"
)

// QuestionStatus is where a caller's question stands.
type QuestionStatus string

const (
	QuestionPending  QuestionStatus = "pending"
	QuestionAnswered QuestionStatus = "answered"
	QuestionExpired  QuestionStatus = "expired"
)

// QuestionChoice is one answer a question offers: ID travels back in the
// tap, Label is what the owner reads.
type QuestionChoice struct {
	ID    string `json:"id"`
	Label string `json:"label"`
}

// Question is a question a caller put to the owner: its card (card id =
// ID) went to the owner's conversation, one tap there answers it.
type Question struct {
	ID           string
	Kind         QuestionKind
	Caller       IdentityID
	Channel      ChannelName
	Conversation ConversationID
	// Text is the question, or the action to approve.
	Text string `json:"text"`
	// Details is the caller's longer explanation (optional).
	Details string           `json:"details,omitempty"`
	Choices []QuestionChoice `json:"choices"`
	Status  QuestionStatus
	// Choice is the answer (a Choices id) once answered.
	Choice    string
	DecidedBy IdentityID
	CreatedAt time.Time
	ExpiresAt time.Time
	DecidedAt time.Time
}
