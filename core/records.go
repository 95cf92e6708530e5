package core

import (
	"encoding/json"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/audit"
)

// StoredTurn is a turn as the inbox stored it.
type StoredTurn struct {
	Seq  int64
	Turn Turn
}

// ApprovalStatus is where an approval request stands.
type ApprovalStatus string

const (
	ApprovalPending    ApprovalStatus = "pending"
	ApprovalConfirming ApprovalStatus = "confirming"
	ApprovalApproved   ApprovalStatus = "approved"
	ApprovalDeclined   ApprovalStatus = "declined"
	ApprovalExpired    ApprovalStatus = "expired"
)

// Open reports whether the request still takes taps.
func (s ApprovalStatus) Open() bool { return s == ApprovalPending || s == ApprovalConfirming }

// ApprovalRequest is one pending (or decided) approval.
type ApprovalRequest struct {
	ID           ApprovalID
	Channel      ChannelName
	Conversation ConversationID
	Requester    IdentityID
	TurnSeq      int64
	// ActionCanonical is the RFC 8785 JSON of the Action; ActionHash its
	// sha256. The executor re-hashes ActionCanonical before running.
	ActionCanonical []byte
	ActionHash      []byte
	Intent          string
	Rationale       string
	Risk            cards.Risk
	// Approvers lists identities ("telegram:1") and roles ("role:owner")
	// allowed to decide.
	Approvers []string
	Status    ApprovalStatus
	CreatedAt time.Time
	ExpiresAt time.Time
	DecidedBy IdentityID
	DecidedAt time.Time
	// Token is the signed approval token once approved (JSON).
	Token []byte
	// Signature is the gateway's signature over the request as proposed
	// (approval.Request); nil for requests stored before requests were
	// signed. A request edited in storage no longer verifies.
	Signature []byte
	// Task is the task the request was proposed for ("" for none). Not
	// signed: it only says whose step a decline or a settled execution
	// wakes (the step reads what became of its call itself).
	Task string
	// Preview is what will change, as the card shows it (core/render's
	// Preview); covered by Signature.
	Preview string
	// Traceparent is the W3C traceparent of the span that proposed it
	// ("" when tracing was off): the tap, the execution and its card
	// updates join that trace (core/tracing). Not signed, not hashed.
	Traceparent string
	// TapTraceparent is the W3C traceparent of the tap's decision that
	// approved it ("" when tracing was off): its execution links to it,
	// whichever instance runs it. Not signed, not hashed.
	TapTraceparent string
}

// ExecStatus is where an execution stands. Transitions are compare-and-swap:
// queued → running → executed → verified|failed; running at start-up →
// interrupted (it may or may not have run, so it is never re-run); a token or
// integrity check failure → refused.
type ExecStatus string

const (
	ExecQueued      ExecStatus = "queued"
	ExecRunning     ExecStatus = "running"
	ExecExecuted    ExecStatus = "executed"
	ExecInterrupted ExecStatus = "interrupted"
	ExecRefused     ExecStatus = "refused"
	ExecVerified    ExecStatus = "verified"
	ExecFailed      ExecStatus = "failed"
)

// ExecRecord is the stored result of one execution (output is capped by
// the sandbox; the full text may also be stored as an output ref).
type ExecRecord struct {
	ExitCode   int    `json:"exit_code"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	Truncated  bool   `json:"truncated"`
	TimedOut   bool   `json:"timed_out"`
	DurationMS int64  `json:"duration_ms"`
	Dir        string `json:"dir"`
	Isolation  string `json:"isolation"`
	OutputRef  string `json:"output_ref,omitempty"`
}

// Execution is one approved action's run.
type Execution struct {
	ApprovalID ApprovalID
	Status     ExecStatus
	Result     *ExecRecord
	Report     json.RawMessage
	Reason     string
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
}

// ExecUpdate carries the fields an execution's transition sets (nil or
// zero = unchanged).
type ExecUpdate struct {
	Result  *ExecRecord
	Report  json.RawMessage
	Reason  string
	Started bool
	Done    bool
}

// Decision is what storage holds of the decision that consumed a token:
// the token_nonces row of its nonce and the first "token.consumed" audit
// entry naming the approval and the token id, with the hashes of the
// entries either side of it (to check that it is linked into the chain).
// Nil fields: not found.
type Decision struct {
	// NonceApproval and NonceTokenID are the token_nonces row for the nonce.
	NonceApproval *ApprovalID
	NonceTokenID  *string
	// Entry is the audit entry; PrevHash is the hash of the entry before it
	// (nil for seq 1) and NextPrevHash the prev_hash of the entry after it
	// (nil when it is the newest).
	Entry        *audit.Row
	PrevHash     []byte
	NextPrevHash []byte
	// Started: the audit log has an "execution.started" entry for the
	// approval — its execution began before, whatever its row says now.
	Started bool
}

// OutboxOp is what an outbox job does.
type OutboxOp string

const (
	OpSend   OutboxOp = "send"
	OpUpdate OutboxOp = "update"
	// OpAnswer answers a tap (OutboxJob.Answer) with the tapped card's new
	// state; its message key is the card's when it carries one.
	OpAnswer OutboxOp = "answer"
)

// OutboxJob is one durable outbound delivery.
type OutboxJob struct {
	ID           int64
	Channel      ChannelName
	Conversation ConversationID
	Op           OutboxOp
	// MessageKey is Silas's own name for the message (a card id, or a
	// generated id for plain replies); updates find the platform's
	// MessageRef through it.
	MessageKey string
	Message    OutMessage
	// Answer is the tap's answer of an OpAnswer job (its card is also
	// Message.Card, so the transcript reads it as the card's edit).
	Answer    *TapAnswer
	Attempts  int
	NextAt    time.Time
	CreatedAt time.Time
}

// TurnStatus is where a stored turn stands: pending until a worker
// answered it (or it failed for good); an inline turn is stored done.
type TurnStatus string

const (
	TurnPending TurnStatus = "pending"
	TurnDone    TurnStatus = "done"
	TurnFailed  TurnStatus = "failed"
)

// OutboxStatus is where an outbox job stands. Only pending jobs are
// delivered; superseded means a newer edit of the same card replaced it.
type OutboxStatus string

const (
	OutboxPending    OutboxStatus = "pending"
	OutboxDelivered  OutboxStatus = "delivered"
	OutboxSuperseded OutboxStatus = "superseded"
	OutboxFailed     OutboxStatus = "failed"
)

// AccessStatus is where a stranger's request to talk to Silas stands.
type AccessStatus string

const (
	AccessPending AccessStatus = "pending"
	AccessAllowed AccessStatus = "allowed"
	AccessDenied  AccessStatus = "denied"
)

// AccessRequest asks an owner whether an unknown sender may talk to Silas.
type AccessRequest struct {
	ID                string
	Channel           ChannelName
	Identity          IdentityID
	Name              string
	Conversation      ConversationID
	Code              string
	OwnerConversation ConversationID
	Status            AccessStatus
	CreatedAt         time.Time
	DecidedBy         IdentityID
}

// Binding is a stored identity binding: the role an identity was paired
// with, as a signed record (core/trust checks the signature).
type Binding struct {
	Identity  IdentityID
	Role      string
	Record    []byte
	Signature []byte
}

// DirectConversation is the newest direct (not group) conversation an
// identity had with Silas on a channel.
type DirectConversation struct {
	Channel      ChannelName
	Identity     IdentityID
	Conversation ConversationID
}

// Route kinds (ApprovalRoute.Kind).
const (
	// RouteStatus is the requesting conversation's status card: the
	// request without buttons, saying where it was sent.
	RouteStatus = "status"
	// RouteCopy is a copy of the approval card in an approver's own
	// direct conversation.
	RouteCopy = "copy"
)

// ApprovalRoute is one conversation an approval request's card was routed
// to (core/route): the requesting conversation's status card, or a copy
// in an approver's direct conversation. Every edit of one is shown on the
// others; a tap on a copy decides the one request.
type ApprovalRoute struct {
	Approval     ApprovalID
	Channel      ChannelName
	Conversation ConversationID
	// MessageKey names the card's message there (the outbox's message
	// key): the approval's id for the status card, a key of its own for a
	// copy.
	MessageKey string
	Kind       string
	// Identity is the approver a copy was sent to ("" for the status).
	Identity IdentityID
}
