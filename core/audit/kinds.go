package audit

// Kind names what an audit entry records ("approval.approved"). Every kind
// written anywhere is one of the constants below, so emitters, the gate
// that reads the log back (token.consumed, execution.started) and /audit's
// plain-language descriptions agree on the spelling.
type Kind string

// Turns and intake.
const (
	KindTurnReceived      Kind = "turn.received"
	KindTurnFailed        Kind = "turn.failed"
	KindIntakeQuarantined Kind = "intake.quarantined"
	KindTrustDecided      Kind = "trust.decided"
)

// Direct-message access and pairing.
const (
	KindAccessIgnored          Kind = "access.ignored"
	KindAccessRequested        Kind = "access.requested"
	KindAccessUnreachableOwner Kind = "access.unreachable_owner"
	KindAccessAllowed          Kind = "access.allowed"
	KindAccessDenied           Kind = "access.denied"
	KindPairingBound           Kind = "pairing.bound"
	KindPairingRefused         Kind = "pairing.refused"
	KindPairingCodeCreated     Kind = "pairing.code_created"
	KindWebchatSessionsRevoked Kind = "webchat.sessions_revoked"
)

// Policy, approvals and tokens.
const (
	KindPolicyDecided            Kind = "policy.decided"
	KindPolicyRefused            Kind = "policy.refused"
	KindApprovalRequested        Kind = "approval.requested"
	KindApprovalConfirmRequested Kind = "approval.confirm_requested"
	KindApprovalApproved         Kind = "approval.approved"
	KindApprovalDeclined         Kind = "approval.declined"
	KindApprovalExpired          Kind = "approval.expired"
	KindApprovalRefused          Kind = "approval.refused"
	KindTokenMinted              Kind = "token.minted"
	KindTokenConsumed            Kind = "token.consumed"
	// KindApprovalRouted: the request's card went to approvers elsewhere
	// (core/route), a status card stayed in the requesting conversation.
	KindApprovalRouted Kind = "approval.routed"
	// KindApprovalUnroutable: no approver could receive the card; the
	// request was refused at once, nothing waits.
	KindApprovalUnroutable Kind = "approval.unroutable"
)

// Channel health (core/health).
const (
	KindChannelDeaf      Kind = "channel.deaf"
	KindChannelRecovered Kind = "channel.recovered"
	KindGatewayDown      Kind = "gateway.down"
	// KindGatewayCaughtUp follows a KindGatewayDown: how many messages
	// arrived while the gateway was down and how many were answered.
	KindGatewayCaughtUp Kind = "gateway.caught_up"
)

// Executions and their verification.
const (
	KindExecutionStarted     Kind = "execution.started"
	KindExecutionFinished    Kind = "execution.finished"
	KindExecutionRefused     Kind = "execution.refused"
	KindExecutionInterrupted Kind = "execution.interrupted"
	KindVerificationPassed   Kind = "verification.passed"
	KindVerificationFailed   Kind = "verification.failed"
	KindOutputShown          Kind = "output.shown"
	KindOutputRefused        Kind = "output.refused"
)

// Outbound messages.
const (
	KindMessageSend   Kind = "message.send"
	KindMessageUpdate Kind = "message.update"
	KindMessageFailed Kind = "message.failed"
)

// Secrets (names only, never values).
const (
	KindSecretRequested Kind = "secret.requested"
	KindSecretStored    Kind = "secret.stored"
	KindSecretExpired   Kind = "secret.expired"
	KindSecretDeleted   Kind = "secret.deleted"
)

// LLM tasks (the durable task runtime, docs/agent.md). Every transition of
// a task is one of these; data carries the task id and what changed.
const (
	KindTaskCreated      Kind = "task.created"
	KindTaskPlanned      Kind = "task.planned"
	KindTaskStepStarted  Kind = "task.step_started"
	KindTaskStepFinished Kind = "task.step_finished"
	KindTaskCallProposed Kind = "task.call_proposed"
	KindTaskCallResult   Kind = "task.call_result"
	KindTaskVerified     Kind = "task.verified"
	KindTaskConsulted    Kind = "task.consulted"
	KindTaskEscalated    Kind = "task.escalated"
	KindTaskDecided      Kind = "task.decided"
	KindTaskDone         Kind = "task.done"
	KindTaskStopped      Kind = "task.stopped"
	// KindTaskAsked: the executor asked the user a question (ask_user) and
	// the task waits for the answer; KindTaskAnswered: the answer came (a
	// tap or the requester's next message; only its size is recorded).
	KindTaskAsked    Kind = "task.asked"
	KindTaskAnswered Kind = "task.answered"
	// KindTaskRehydrated: the executor had an evicted output of its own
	// task back (read_output).
	KindTaskRehydrated Kind = "task.rehydrated"
)

// MCP callers (core/callgate, docs/mcp.md): outside agents whose calls
// become proposals from "mcp:<token name>". Token entries name the token,
// never its value.
const (
	KindMCPTokenAdded   Kind = "mcp.token_added"
	KindMCPTokenRevoked Kind = "mcp.token_revoked"
	// KindMCPCall: a caller's tool call reached the core (tool, and the
	// approval or question it became).
	KindMCPCall Kind = "mcp.call"
	// KindMCPAsked: a caller's question was put to the owner;
	// KindMCPAnswered: the owner answered it (the choice), or it expired.
	KindMCPAsked    Kind = "mcp.asked"
	KindMCPAnswered Kind = "mcp.answered"
)

// Silas as an MCP client (core/mcptools, docs/mcp.md): tools of the
// configured servers, pinned by the owner. Entries name the server, the
// tool and the definition's hash.
const (
	// KindMCPPinRequested: a card asks the owner to pin tools (new, or
	// changed since they were pinned).
	KindMCPPinRequested Kind = "mcp.pin_requested"
	// KindMCPPinned: the owner pinned a tool's definition from its card.
	KindMCPPinned Kind = "mcp.pinned"
	// KindMCPQuarantined: a server lists a definition other than the
	// pinned one; calls to the tool are refused until it is pinned again.
	KindMCPQuarantined Kind = "mcp.tool_quarantined"
	// KindMCPPinInvalid: a stored pin's signature does not verify under
	// the gateway's key (edited in the database, or never signed); it
	// counts as no pin and the owner is asked again.
	KindMCPPinInvalid Kind = "mcp.pin_invalid"
	// KindMCPPinCardExpired: a pin card's time ran out untapped; nothing
	// was pinned and the next look at the server asks again.
	KindMCPPinCardExpired Kind = "mcp.pin_card_expired"
)

// Standing consents (core/consent, docs/approvals.md): a person's decision
// to let one action (or argv prefix) run without a card for a while.
const (
	// KindConsentMinted: a consent was minted by a tap (or the CLI).
	KindConsentMinted Kind = "consent.minted"
	// KindConsentOffered: a flow run's consent card was sent (the grant it
	// states; the tap mints it).
	KindConsentOffered Kind = "consent.offered"
	// KindConsentDeclined: the owner declined a flow run's consent card.
	KindConsentDeclined Kind = "consent.declined"
	// KindConsentUsed: an action ran under a consent (its approval, the
	// use count and units after this use).
	KindConsentUsed Kind = "consent.used"
	// KindConsentRefused: a consent could have applied and did not (its
	// named refusal code); the action got a card instead.
	KindConsentRefused Kind = "consent.refused"
	// KindConsentRevoked: a consent was revoked.
	KindConsentRevoked Kind = "consent.revoked"
)

// Flow runs (core/flowrun, docs/flows.md): each run's and each node
// attempt's start and end; data carries the run, the flow and the node.
const (
	KindFlowRunStarted   Kind = "flow.run_started"
	KindFlowRunFinished  Kind = "flow.run_finished"
	KindFlowNodeStarted  Kind = "flow.node_started"
	KindFlowNodeFinished Kind = "flow.node_finished"
	// KindFlowGateAnswered: a gate's card was answered (the choice).
	KindFlowGateAnswered Kind = "flow.gate_answered"
	// KindFlowLog: a system.log node's line.
	KindFlowLog Kind = "flow.log"
	// KindFlowStopRequested: someone stopped a run (/flow stop).
	KindFlowStopRequested Kind = "flow.stop_requested"
	// KindFlowSignalled: someone signalled an event a run waits for
	// (/flow signal, silas flow signal).
	KindFlowSignalled Kind = "flow.signalled"
	// KindFlowStepSkipped: a person skipped a step (/flow skip), for one
	// of the bounded reasons; KindFlowStepDone: a person marked a step
	// done (/flow done) — a wait, or an action with verified evidence.
	// Refused requests are consent.refused with their code.
	KindFlowStepSkipped Kind = "flow.step_skipped"
	KindFlowStepDone    Kind = "flow.step_done"
)

// Passkeys and step-up (core/stepup, docs/passkeys.md): credential ids and
// sign counts, never a key, a link token or an assertion.
const (
	// KindPasskeyEnrollLink: `silas passkey add` made an enrollment link.
	KindPasskeyEnrollLink Kind = "passkey.enroll_link"
	// KindPasskeyRegistered: a passkey was registered through its link.
	KindPasskeyRegistered Kind = "passkey.registered"
	// KindPasskeyRemoved: `silas passkey remove` deleted one.
	KindPasskeyRemoved Kind = "passkey.removed"
	// KindStepUpOffered: an irreversible card's approve tap sent a
	// step-up link instead of approving.
	KindStepUpOffered Kind = "stepup.offered"
	// KindStepUpVerified: a passkey assertion confirmed the action; the
	// approval.approved entry that follows carries approval_strength.
	KindStepUpVerified Kind = "stepup.verified"
	// KindStepUpRefused: an assertion or a link was refused (the reason);
	// nothing was run.
	KindStepUpRefused Kind = "stepup.refused"
)
