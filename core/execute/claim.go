package execute

import (
	"bytes"
	"log/slog"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// A claim with the decision (issue 26). When the process whose tap
// approved a request will run it at once (its executor is here, open and
// not held), the execution is claimed in the decision's own transaction
// instead of one of its own: one durable commit fewer from the tap to the
// start. The gate is the same gate, run in that transaction on the values
// it writes:
//
//   - the request and token: checkApproval, as the claim runs it — the
//     token's Ed25519 signature with the gateway's public key, its expiry,
//     its binding to the hash of the stored canonical action, its
//     conversation and decider, the request's own signature;
//   - the recorded decision: the nonce this transaction consumed for this
//     approval (store.Tx.Decided, written by the same statement that
//     approved it) is the token's, under its token id; the decision's
//     "token.consumed" entry for this approval and token, in the request's
//     conversation, is among the entries this transaction appends — the
//     writer appends them in order, chained, or nothing commits, which is
//     what the claim's check that the entry is linked into the chain reads
//     back; and neither the log (read by that same statement) nor this
//     transaction records a start of the execution.
//
// It then writes the row as the claim writes it (running, started, this
// instance) and the claim's "execution.started" entry, after the
// decision's. Anything else — a gate refusal, an executor held or closed,
// a transaction that did not approve through store.Tx.Approve — leaves the
// execution queued for the ordinary claim (Start), which checks everything
// again in its own transaction. After the commit the run starts with the
// request carried as the gate checked it (StartClaimed).
//
// A process that dies between that commit and the run leaves a running
// execution that never started, exactly as one that dies between a claim's
// commit and its run: the next start (Resume), or another instance taking
// over a dead one's executions, marks it interrupted — never run again —
// and its card says so.

// ClaimTx is the part of the deciding transaction a claim with the
// decision uses (store.Tx).
type ClaimTx interface {
	// Decided is what this transaction recorded of its approval of id:
	// the nonce consumed and its token id, and whether the audit log
	// recorded a start of id's execution; ok false: it approved no id.
	Decided(id core.ApprovalID) (nonce []byte, tokenID string, startedBefore, ok bool)
	// ClaimQueuedExecution makes id's execution, queued in this
	// transaction, a claimed one; false: none is waiting to be written.
	ClaimQueuedExecution(id core.ApprovalID) bool
}

// Claimed is an execution claimed in the transaction of the decision that
// approved it: StartClaimed runs it once that transaction committed.
type Claimed struct{ r *execution }

// ClaimWithDecision claims, in tx, the execution of a — the request as
// the decision in tx approved it (its token as minted) — when this
// executor runs it at once, after the gate passed (see above). entries are
// the audit entries tx appends so far. It returns the claim and its
// "execution.started" entry, to append after entries; nil when the
// execution stays queued for Start's claim, with the gate's reason when it
// refused (Start's claim then refuses it in its own transaction).
func (x *Executor) ClaimWithDecision(tx ClaimTx, a core.ApprovalRequest, entries []audit.Entry) (c *Claimed, started audit.Entry, refused string) {
	id := a.ID
	switch {
	case x.cfg.Failpoint == "after-approve", // its window is before a claim of its own
		x.cfg.Hold != nil && x.cfg.Hold(id),
		x.cfg.Apart != nil && x.cfg.Apart(id),
		x.bg.ctx.Err() != nil: // closed: the next start runs it
		return nil, started, ""
	}
	nonce, tokenID, startedBefore, ok := tx.Decided(id)
	if !ok {
		return nil, started, ""
	}
	tok, act, reason := x.checkApproval(a)
	if reason == "" {
		reason = decidedHere(a, tok.Token.Nonce, tok.Token.TokenID, nonce, tokenID, startedBefore, entries)
	}
	if reason != "" {
		x.logFor(id).Warn("the execution gate refused to claim an execution with its decision; it stays queued for its claim", slog.String("reason", reason))
		return nil, started, reason
	}
	if !tx.ClaimQueuedExecution(id) {
		return nil, started, ""
	}
	u := core.ExecUpdate{Started: true}
	r := &execution{a: a, ex: core.Execution{ApprovalID: id, Status: core.ExecRunning}, act: act, decoded: true,
		approver: core.IdentityID(tok.Token.Approver)}
	return &Claimed{r: r}, x.entries(r, u, note{kind: audit.KindExecutionStarted, data: map[string]any{}})[0], ""
}

// decidedHere is the recorded-decision part of the gate (admit) for a
// decision made in the claiming transaction: "" when the nonce consumed
// there is the token's (nonce, tokenID), the decision's "token.consumed"
// entry is among entries, in a's conversation, and no start of a's
// execution is recorded (startedBefore: in the log) or among entries.
func decidedHere(a core.ApprovalRequest, tokNonce []byte, tokID string, nonce []byte, tokenID string, startedBefore bool, entries []audit.Entry) string {
	if len(nonce) == 0 || !bytes.Equal(nonce, tokNonce) || tokenID != tokID {
		return reasonNoDecision + " (its nonce was not consumed for this approval)"
	}
	consumed := false
	for _, e := range entries {
		if e.Data["approval"] != string(a.ID) {
			continue
		}
		switch e.Kind {
		case audit.KindTokenConsumed:
			consumed = consumed || e.Data["token_id"] == tokID && e.Conversation == string(a.Conversation)
		case audit.KindExecutionStarted:
			startedBefore = true
		}
	}
	switch {
	case !consumed:
		return reasonNoDecision + " (the audit log has no such decision)"
	case startedBefore:
		return "this approval's execution was started before; an approval runs once"
	}
	return ""
}

// StartClaimed runs an execution claimed with its decision, once that
// transaction committed, in the background (Close waits for it).
func (x *Executor) StartClaimed(c *Claimed) {
	x.bg.wg.Add(1)
	go func() {
		defer x.bg.wg.Done()
		x.runClaimed(x.bg.ctx, c.r)
	}()
}
