// Package execute is the executor: it claims a queued execution through
// the gate (the recorded decision behind it) — or, in the transaction of
// the decision that approved it, one this process runs at once (claim.go)
// — runs the approved action in
// the sandbox, has the result verified and records each transition once.
// The approval and the execution are read once, when the execution is
// claimed with the approval row locked, and carried as values from the
// claim to the verified card (as River's job executor carries its job row
// from fetch to its reported result); every transition is one
// compare-and-swap on that carried state, written with its card update and
// audit entries in one transaction.
//
// execute never decides (core/decide does), never runs an action whose gate
// failed or whose claim did not commit, never runs an execution twice (one
// claimed and not finished is marked interrupted at the next start, never
// re-run), never marks work done itself (only the verifier's report does),
// never puts a secret value anywhere but the sandbox's environment, and
// never talks to a platform (card updates go through the outbox).
package execute

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/redact"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/tracing"
	"github.com/silas-gateway/silas/core/verify"
)

// Tx is the part of a write transaction an execution uses.
type Tx interface {
	// GetApproval reads a request and locks its row for the claim.
	GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error)
	// RecordedDecision reads what storage holds of the decision that
	// consumed a token (the gate).
	RecordedDecision(ctx context.Context, id core.ApprovalID, nonce []byte, tokenID string) (core.Decision, error)
	// GetApprovalDecision is GetApproval, then RecordedDecision for the
	// token expected on the row, in one round trip.
	GetApprovalDecision(ctx context.Context, id core.ApprovalID, nonce []byte, tokenID string) (core.ApprovalRequest, core.Decision, error)
	// TransitionExecution is compare-and-swap on an execution's status.
	TransitionExecution(ctx context.Context, id core.ApprovalID, from, to core.ExecStatus, u core.ExecUpdate) (bool, error)
	// QueueTransitionExecution is TransitionExecution sent with the next
	// round trip: applied learns whether it applied before any Finally
	// function runs.
	QueueTransitionExecution(id core.ApprovalID, from, to core.ExecStatus, u core.ExecUpdate, applied func(bool)) error
	// Speculate reports whether the transaction may speculate: queue a
	// compare-and-swap guarded (QueueGuardedTransitionExecution) and what
	// depends on it at once. False when it runs again because a guard
	// failed (core/store speculate.go).
	Speculate() bool
	// QueueGuardedTransitionExecution is QueueTransitionExecution whose failure
	// to apply fails the whole transaction (which then runs again,
	// without speculation).
	QueueGuardedTransitionExecution(id core.ApprovalID, from, to core.ExecStatus, u core.ExecUpdate) error
	// Finally runs f once the statements queued so far were sent; the
	// entries it returns are appended with the transaction's.
	Finally(f func() ([]audit.Entry, error))
	// QueueOutput stores an execution's full output under ref; secret
	// marks the output of an action that received a secret, which is
	// shown only after the owner's tap and never given to a model.
	QueueOutput(ref string, id core.ApprovalID, content string, secret bool) error
	// QueueMessage enqueues a card update for the outbox.
	QueueMessage(ch core.ChannelName, op core.OutboxOp, key string, m core.OutMessage) error
	// QueueTaskStep queues a step of task id (a River job), committed
	// with the transition.
	QueueTaskStep(id string)
}

// Store is what the executor needs of storage: write transactions, and the
// reads of a restart.
type Store interface {
	// Do runs op in a write transaction (store.Store.Do).
	Do(ctx context.Context, op func(ctx context.Context, tx Tx) ([]audit.Entry, error)) error
	// UnfinishedExecutions lists queued, running and executed executions.
	UnfinishedExecutions(ctx context.Context) ([]core.Execution, error)
	// GetApproval reads a request without locking it (to settle an
	// execution a previous process left).
	GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error)
}

// Secrets opens the secrets an approved action declared, for its sandbox
// environment only.
type Secrets interface {
	// Reveal returns the environment to set and the values (to redact
	// output with); names not stored: a *MissingSecretsError.
	Reveal(ctx context.Context, names []string) (env map[string]string, values []string, err error)
	// AskFor sends a secure-input card for each missing name, on the
	// approver's behalf; false when it could not.
	AskFor(ctx context.Context, a core.ApprovalRequest, approver core.IdentityID, names []string) bool
}

// MissingSecretsError names declared secrets that are not stored.
type MissingSecretsError struct{ Names []string }

func (m *MissingSecretsError) Error() string {
	return fmt.Sprintf("secret %s is not stored (send /secret %s first)", strings.Join(m.Names, ", "), m.Names[0])
}

// OutputRefPrefix starts the ref under which an execution's full output is
// stored ("out-" + approval id).
const OutputRefPrefix = "out-"

// Config wires an Executor. Store, Key, Sandbox and Verifier are required.
type Config struct {
	Store Store
	// Key is the gateway's public key: tokens and request signatures
	// verify against it.
	Key      ed25519.PublicKey
	Sandbox  core.Sandbox
	Verifier *verify.Runner
	// Tools runs the actions of tools other than "shell", by tool name;
	// an action of a tool in neither is refused.
	Tools map[string]ToolRunner
	// Secrets opens declared secrets (nil: an action that declares one is
	// refused).
	Secrets Secrets
	// ExecTimeout is the default run time limit (default 60s).
	ExecTimeout time.Duration
	// OutputInlineMax is the longest output a card shows whole (default
	// 10,000 characters); longer output is stored under a ref and the card
	// shows its first OutputPreview characters (default 2,000).
	OutputInlineMax int
	OutputPreview   int
	Logger          *slog.Logger
	Now             func() time.Time
	// Claimed runs once a claim committed, before anything is prepared.
	Claimed func(id core.ApprovalID)
	// Recorded runs after a transition committed (its card update is in
	// the outbox, and handed to the conversation's lane by whoever ran
	// the transaction — core/gateway's execStore): count, observe.
	Recorded func(a core.ApprovalRequest, to core.ExecStatus)
	// Failpoint, for crash tests only: "after-approve" (before the claim)
	// or "after-execute" (once the run's result is recorded) makes the
	// process SIGKILL itself at that point.
	Failpoint string
	// Hold, for tests only: returning true keeps a freshly approved
	// execution queued instead of starting it (Start), as if the process
	// stopped right after the decision committed.
	Hold func(id core.ApprovalID) bool
	// BeforeRun, for tests only, runs after a decision committed and
	// before its execution is claimed (Start), where the gate checks the
	// row: after the claim the executor runs the row it checked, carried as
	// a value, so a later edit of the row changes nothing.
	BeforeRun func(id core.ApprovalID)
	// Apart, for tests only: returning true keeps a freshly approved
	// execution out of its decision's transaction (ClaimWithDecision
	// declines it), so Start claims it in a transaction of its own — the
	// window BeforeRun runs in, and the path of an execution this process
	// does not run at once.
	Apart func(id core.ApprovalID) bool
}

// ToolRunner runs the approved actions of one tool other than "shell"
// (core/mcptools runs "mcp"), through the same gate, claim, verification
// and records as a program: only the run itself differs. It is called
// once per execution, after the claim committed.
type ToolRunner interface {
	// Run performs act within timeout. A result is what happened (a
	// failed call is a non-zero exit code, its message on stderr); an error
	// means nothing was sent, and the execution is refused with its text.
	Run(ctx context.Context, act core.Action, timeout time.Duration) (core.ExecResult, error)
}

// Executor runs approved actions, one Run per execution.
type Executor struct {
	cfg  Config
	log  *slog.Logger
	runs runs
	bg   background // runs started by Start and ResumeAll
}

// New checks cfg, fills defaults and builds an Executor.
func New(cfg Config) (*Executor, error) {
	if cfg.Store == nil || cfg.Sandbox == nil || cfg.Verifier == nil || len(cfg.Key) != ed25519.PublicKeySize {
		return nil, errors.New("execute: Store, Key, Sandbox and Verifier are required")
	}
	if cfg.ExecTimeout <= 0 {
		cfg.ExecTimeout = 60 * time.Second
	}
	if cfg.OutputInlineMax <= 0 {
		cfg.OutputInlineMax = 10000
	}
	if cfg.OutputPreview <= 0 || cfg.OutputPreview > cfg.OutputInlineMax {
		cfg.OutputPreview = min(2000, cfg.OutputInlineMax)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	x := &Executor{cfg: cfg, log: cfg.Logger}
	x.bg.ctx, x.bg.cancel = context.WithCancel(context.Background())
	return x, nil
}

// execution is one execution from its claim to its last transition: the
// approval as claimed and the execution as last written, never read again.
type execution struct {
	a   core.ApprovalRequest
	ex  core.Execution
	act core.Action
	// decoded: act is a.ActionCanonical decoded (the gate's decode of a
	// claimed execution, or a resumed one's), so its cards render from it
	// instead of decoding the action again (render.ApprovalOf). False for
	// an execution refused at its claim or marked interrupted at a start,
	// whose act may be empty or partial.
	decoded bool
	// approver is the identity the token names (who asked for it to run).
	approver core.IdentityID
}

// logFor is the executor's logger for the execution of id: the approval
// on every line. Made where a line is logged, not per execution: most
// executions log nothing, and slog's With costs a logger and its
// attributes (formatted up front by the text and JSON handlers) each time.
func (x *Executor) logFor(id core.ApprovalID) *slog.Logger {
	return x.log.With(slog.String("approval", string(id)))
}

// note is an audit entry of a transition, before the approval id (and the
// transition's reason, when given) are added.
type note struct {
	kind audit.Kind
	data map[string]any
	// reason: add the transition's reason to this entry.
	reason bool
}

// Run runs one approved action exactly once. Its claim (queued → running)
// is a compare-and-swap in the transaction that also passes the gate
// (admit), so a second caller or a restart finds nothing to do, and an
// execution no recorded decision stands behind goes queued → refused
// without reaching the sandbox.
func (x *Executor) Run(ctx context.Context, id core.ApprovalID) {
	x.run1(ctx, id, expected{})
}

// run1 is Run with the token the claim expects on the row, when known.
func (x *Executor) run1(ctx context.Context, id core.ApprovalID, want expected) {
	x.failpoint("after-approve")
	r := x.claim(ctx, id, want)
	if r == nil {
		return
	}
	x.runClaimed(ctx, r)
}

// runClaimed runs an execution whose claim committed (in a transaction of
// its own, or with its decision).
func (x *Executor) runClaimed(ctx context.Context, r *execution) {
	id := r.a.ID
	if x.cfg.Claimed != nil {
		x.cfg.Claimed(id)
	}
	// The run continues the proposal's trace (its traceparent is on the
	// approval row), linked to the tap that queued it — remembered here,
	// or stored on the row by the decision when another instance or a
	// restart runs it — and its card updates are delivered in it.
	tap := tracing.TapOf(string(id))
	if !tap.IsValid() {
		tap = tracing.Parse(r.a.TapTraceparent)
	}
	ctx, span := tracing.StartFrom(ctx, tracing.SpanExecute, r.a.Traceparent, tap)
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrApprovalID.String(string(id)))
		tracing.Remember(ctx, string(id))
		defer func() { span.SetAttributes(tracing.AttrStatus.String(string(r.ex.Status))) }()
	}
	x.run(ctx, r)
}

// claim passes the gate and moves the execution queued → running (or →
// refused) in one transaction, the approval row locked. It returns the
// claimed execution, nil when there is nothing to run. want is the token
// the decision recorded, when this process made it: the gate's read of the
// recorded decision then travels with the approval's (the gate still
// checks the row's token, and reads again when the row's differs).
func (x *Executor) claim(ctx context.Context, id core.ApprovalID, want expected) *execution {
	// The op writes its own variables, read only once Do succeeded.
	var claimed *execution
	var refused string
	var a core.ApprovalRequest
	err := x.cfg.Store.Do(ctx, func(ctx context.Context, tx Tx) ([]audit.Entry, error) {
		claimed, refused = nil, ""
		var err error
		pre := want
		if pre.ok {
			if a, pre.d, err = tx.GetApprovalDecision(ctx, id, pre.nonce, pre.tokenID); err != nil {
				return nil, err
			}
		} else if a, err = tx.GetApproval(ctx, id); err != nil {
			return nil, err
		}
		tok, act, reason, err := x.admit(ctx, tx, a, pre)
		if err != nil {
			return nil, err
		}
		r := &execution{a: a, ex: core.Execution{ApprovalID: id, Status: core.ExecQueued}, act: act, decoded: reason == "",
			approver: core.IdentityID(tok.Token.Approver)}
		// Either way the compare-and-swap travels with the audit chain's
		// lock instead of a round trip of its own (queueTransition).
		if reason != "" {
			return x.queueTransition(tx, r, core.ExecRefused, core.ExecUpdate{Reason: reason, Done: true}, func() { refused = reason },
				note{kind: audit.KindExecutionRefused, data: map[string]any{}, reason: true})
		}
		return x.queueTransition(tx, r, core.ExecRunning, core.ExecUpdate{Started: true}, func() { claimed = r },
			note{kind: audit.KindExecutionStarted, data: map[string]any{}})
	})
	if err != nil {
		x.logFor(id).Error("could not start execution; it stays queued and resumes at next start", slog.Any("err", err))
		return nil
	}
	if refused != "" {
		x.logFor(id).Warn("execution refused before it started", slog.String("reason", refused))
		x.recorded(a, core.ExecRefused)
		return nil
	}
	if claimed != nil {
		claimed.ex.Status = core.ExecRunning
	}
	return claimed
}

// run runs a claimed execution and records its result; verification
// follows.
func (x *Executor) run(ctx context.Context, r *execution) {
	refuse := func(reason string) {
		x.logFor(r.a.ID).WarnContext(ctx, "execution refused", slog.String("reason", reason))
		x.record(ctx, r, core.ExecRefused, core.ExecUpdate{Reason: reason, Done: true},
			note{kind: audit.KindExecutionRefused, data: map[string]any{}, reason: true})
	}
	// The gate passed on this row in the claim's transaction, with the row
	// locked; what runs is its action, carried, not a later read of the
	// row — so nothing written to the database after the claim can change
	// what runs.
	act := r.act
	tool, byTool := x.cfg.Tools[act.Tool]
	if act.Tool != "shell" && !byTool {
		refuse(fmt.Sprintf("no executor for tool %q", act.Tool))
		return
	}
	timeout := x.cfg.ExecTimeout
	if act.TimeoutSeconds > 0 {
		timeout = time.Duration(act.TimeoutSeconds) * time.Second
	}
	env, values, err := x.reveal(ctx, act.Secrets)
	var missing *MissingSecretsError
	if errors.As(err, &missing) && x.cfg.Secrets.AskFor(ctx, r.a, r.approver, missing.Names) {
		refuse(fmt.Sprintf("secret %s is not stored; a secure-form link to store it was sent — approve the command again once it is stored",
			strings.Join(missing.Names, ", ")))
		return
	}
	if err != nil {
		refuse(err.Error())
		return
	}
	runCtx, stopped, runDone := x.runs.track(ctx, r.a.ID)
	runCtx, span := tracing.Start(runCtx, tracing.SpanSandbox)
	var res core.ExecResult
	if byTool {
		// Past the gate and the claim, like a program: the tool's call
		// leaves the gateway only now.
		res, err = tool.Run(runCtx, act, timeout)
	} else {
		res, err = x.cfg.Sandbox.Run(runCtx, core.ExecRequest{Argv: act.Argv, Env: env, Timeout: timeout, Network: act.Network})
	}
	if span.IsRecording() {
		// How it ended, never the argv or the output.
		span.SetAttributes(tracing.AttrApprovalID.String(string(r.a.ID)), tracing.AttrExitCode.Int(res.ExitCode),
			tracing.AttrTimedOut.Bool(res.TimedOut), tracing.AttrIsolation.String(res.Isolation))
		if err != nil {
			span.SetStatus(codes.Error, "sandbox run failed")
		}
	}
	span.End()
	runDone()
	if stopped() {
		// Killed because its task was stopped: whatever it did so far
		// stands, nothing of it is verified, and it is never run again.
		if x.record(ctx, r, core.ExecInterrupted, core.ExecUpdate{Reason: "stopped with its task; the program was killed", Done: true},
			note{kind: audit.KindExecutionInterrupted, data: map[string]any{}, reason: true}) {
			x.release(r, res.Dir)
		}
		return
	}
	if len(values) > 0 {
		// Before the output goes anywhere (storage, verification, chat,
		// audit), any secret value it contains is replaced.
		res.Stdout = []byte(redact.RedactValues(string(res.Stdout), values))
		res.Stderr = []byte(redact.RedactValues(string(res.Stderr), values))
	}
	if err != nil {
		if errors.Is(err, core.ErrIsolationUnavailable) {
			refuse(isolationRefusal(act, err))
			return
		}
		if ctx.Err() != nil {
			// Shutting down mid-run: leave it "running"; the next start marks
			// it interrupted rather than running it twice.
			return
		}
		if byTool {
			refuse(err.Error())
			return
		}
		refuse("could not start: " + err.Error())
		return
	}
	rec := &core.ExecRecord{
		ExitCode: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr), Truncated: res.Truncated,
		TimedOut: res.TimedOut, DurationMS: res.Duration.Milliseconds(), Dir: res.Dir, Isolation: res.Isolation,
	}
	// Output of an action that received a secret is always stored, never
	// pasted on the card: it is shown (redacted) only on request.
	if n := len([]rune(fullOutput(rec))); n > x.cfg.OutputInlineMax || len(act.Secrets) > 0 && n > 0 {
		rec.OutputRef = OutputRefPrefix + string(r.a.ID)
	}
	data := map[string]any{"exit_code": res.ExitCode, "duration_ms": rec.DurationMS, "timed_out": res.TimedOut, "isolation": res.Isolation}
	if len(act.Secrets) > 0 {
		data["secrets"] = act.Secrets // the use of a secret is audited by name
	}
	finished := note{kind: audit.KindExecutionFinished, data: data}
	if !runsChecks(act.Verify) {
		// Every check judges the recorded result itself (exit code,
		// output, files of the work directory): verifying takes no process
		// and no time worth a durable stop on the way, so the result and
		// its verdict are written together — one transaction instead of
		// two, and a crash before it leaves the run "running", marked
		// interrupted at the next start, as a crash before an "executed"
		// record would.
		to, u, verdict := x.verdict(ctx, r.a.ID, r.act, rec)
		u.Result, u.Done = rec, true
		if x.record(ctx, r, to, u, finished, verdict) {
			x.failpoint("after-execute")
			x.release(r, rec.Dir)
		}
		return
	}
	// A check runs a program of its own: the result is recorded first, so
	// a crash while the checks run still verifies it at the next start.
	if !x.record(ctx, r, core.ExecExecuted, core.ExecUpdate{Result: rec, Done: true}, finished) {
		return
	}
	x.failpoint("after-execute")
	x.verify(ctx, r)
}

// runsChecks reports whether a check runs a program of its own.
func runsChecks(checks []verify.Check) bool {
	return slices.ContainsFunc(checks, func(c verify.Check) bool { return len(c.Run) > 0 })
}

// verify runs the action's checks outside the executor and moves an
// executed execution to verified or failed. Only this marks work done.
func (x *Executor) verify(ctx context.Context, r *execution) {
	if r.ex.Result == nil {
		x.logFor(r.a.ID).Error("verification: the execution has no recorded result")
		return
	}
	to, u, verdict := x.verdict(ctx, r.a.ID, r.act, r.ex.Result)
	if x.record(ctx, r, to, u, verdict) {
		x.release(r, r.ex.Result.Dir)
	}
}

// verdict runs the checks on a recorded result: the status it leads to,
// the update that records it and its audit entry.
func (x *Executor) verdict(ctx context.Context, id core.ApprovalID, act core.Action, rec *core.ExecRecord) (core.ExecStatus, core.ExecUpdate, note) {
	ctx, span := tracing.Start(ctx, tracing.SpanVerify)
	report := x.cfg.Verifier.Run(ctx, act.Verify, verify.Evidence{
		ExitCode: rec.ExitCode, Stdout: []byte(rec.Stdout), TimedOut: rec.TimedOut, Dir: rec.Dir,
	})
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrApprovalID.String(string(id)), tracing.AttrVerified.Bool(report.AllPassed))
	}
	span.End()
	raw, _ := json.Marshal(report)
	to, kind := core.ExecVerified, audit.KindVerificationPassed
	summary := report.Summary()
	reason := fmt.Sprintf("ran %s; verified: %s", formatMS(rec.DurationMS), summary)
	if !report.AllPassed {
		to, kind = core.ExecFailed, audit.KindVerificationFailed
		reason = fmt.Sprintf("ran %s; not verified: %s", formatMS(rec.DurationMS), summary)
	}
	return to, core.ExecUpdate{Report: raw, Reason: reason},
		note{kind: kind, data: map[string]any{"summary": summary, "all_passed": report.AllPassed}, reason: true}
}

// record writes one transition of r in a transaction of its own and, once
// committed, carries the new state in r. It reports whether the transition
// was applied (false: the row had left r's status, or the write failed —
// logged; the execution resumes from its row at the next start).
func (x *Executor) record(ctx context.Context, r *execution, to core.ExecStatus, u core.ExecUpdate, notes ...note) bool {
	var applied bool
	err := x.cfg.Store.Do(ctx, func(ctx context.Context, tx Tx) ([]audit.Entry, error) {
		applied = false
		return x.queueTransition(tx, r, to, u, func() { applied = true }, notes...)
	})
	if err != nil {
		x.logFor(r.a.ID).Error("could not record the execution's transition", slog.String("to", string(to)), slog.Any("err", err))
		return false
	}
	if !applied {
		return false
	}
	r.ex = after(r.ex, to, u)
	x.recorded(r.a, to)
	return true
}

// queueTransition moves r's execution from its carried status to to in
// tx: a compare-and-swap sent with the transaction's next round trip (the
// audit chain's lock) instead of one of its own. What depends on it
// applying — the task's step, long output stored, the card update that
// shows the new state (but for the claim) and the audit entries (returned
// for the op to return, or by the Finally function) — is queued once it is
// known to apply; then applied runs. r itself is not changed (the
// transaction may be retried).
//
// Speculating (the usual case), the swap is guarded and what depends on
// it is queued at once, as if it applied: the swap, the card edit, the
// audit rows and COMMIT then go in one round trip instead of two. A swap
// that does not apply (the row left r's status: another instance settled
// it, a restart marked it interrupted) fails the transaction, which runs
// again without speculation: the swap is queued plainly and what depends
// on it waits for its result in a Finally function, as before — so such a
// transition records nothing, and applied does not run.
func (x *Executor) queueTransition(tx Tx, r *execution, to core.ExecStatus, u core.ExecUpdate, applied func(), notes ...note) ([]audit.Entry, error) {
	if tx.Speculate() {
		if err := tx.QueueGuardedTransitionExecution(r.a.ID, r.ex.Status, to, u); err != nil {
			return nil, err
		}
		entries, err := x.transitioned(tx, r, to, u, notes...)
		if err != nil {
			return nil, err
		}
		applied()
		return entries, nil
	}
	var ok bool
	if err := tx.QueueTransitionExecution(r.a.ID, r.ex.Status, to, u, func(b bool) { ok = b }); err != nil {
		return nil, err
	}
	tx.Finally(func() ([]audit.Entry, error) {
		if !ok {
			return nil, nil
		}
		entries, err := x.transitioned(tx, r, to, u, notes...)
		if err == nil {
			applied()
		}
		return entries, err
	})
	return nil, nil
}

// transitioned queues what follows a transition of r's execution to to
// that applied in tx, and returns its audit entries.
func (x *Executor) transitioned(tx Tx, r *execution, to core.ExecStatus, u core.ExecUpdate, notes ...note) ([]audit.Entry, error) {
	id := r.a.ID
	if r.a.Task != "" && settles(to) {
		// The task reads what became of its call: wake it with this
		// commit (the approval row carries its task; nothing is read).
		tx.QueueTaskStep(r.a.Task)
	}
	if u.Result != nil && u.Result.OutputRef != "" {
		// Marked at the source: this execution knows it received secrets.
		if err := tx.QueueOutput(u.Result.OutputRef, id, fullOutput(u.Result), len(r.act.Secrets) > 0); err != nil {
			return nil, err
		}
	}
	// The claim shows nothing new: the decision's card already says
	// "running…" (a queued and a running execution look the same).
	if to != core.ExecRunning {
		ex := after(r.ex, to, u)
		c := r.card(&ex, x.cfg.OutputPreview)
		if err := tx.QueueMessage(r.a.Channel, core.OpUpdate, string(id), core.OutMessage{Conversation: r.a.Conversation, Card: c}); err != nil {
			return nil, err
		}
	}
	return x.entries(r, u, notes...), nil
}

// card renders r's approval card showing ex, from the carried action when
// the gate decoded it (the same card render.Approval makes from the row).
func (r *execution) card(ex *core.Execution, preview int) *cards.Card {
	if r.decoded {
		return render.ApprovalOf(r.a, r.act, ex, preview)
	}
	return render.Approval(r.a, ex, preview)
}

// entries are the audit entries of a transition of r with u.
func (x *Executor) entries(r *execution, u core.ExecUpdate, notes ...note) []audit.Entry {
	entries := make([]audit.Entry, 0, len(notes))
	for _, n := range notes {
		data := make(map[string]any, len(n.data)+2)
		for k, v := range n.data {
			data[k] = v
		}
		data["approval"] = string(r.a.ID)
		if n.reason && u.Reason != "" {
			data["reason"] = u.Reason
		}
		entries = append(entries, audit.Entry{Kind: n.kind, Actor: "silas", Conversation: string(r.a.Conversation), Data: data})
	}
	return entries
}

// settles: to is an outcome a task's call can report (the call waits
// through queued, running and executed).
func settles(to core.ExecStatus) bool {
	switch to {
	case core.ExecVerified, core.ExecFailed, core.ExecRefused, core.ExecInterrupted:
		return true
	}
	return false
}

// after is ex once a transition to to with u is written: the store keeps
// what u leaves unset (COALESCE), so does this.
func after(ex core.Execution, to core.ExecStatus, u core.ExecUpdate) core.Execution {
	ex.Status = to
	if u.Result != nil {
		ex.Result = u.Result
	}
	if len(u.Report) > 0 {
		ex.Report = u.Report
	}
	if u.Reason != "" {
		ex.Reason = u.Reason
	}
	return ex
}

// Resume settles the executions a previous process left unfinished:
// running ones become interrupted — they may have had effects, so they are
// never run a second time. It returns the work to start: queued ones run
// (through the same gate), executed ones are verified and reported.
func (x *Executor) Resume(ctx context.Context) ([]func(context.Context), error) {
	list, err := x.cfg.Store.UnfinishedExecutions(ctx)
	if err != nil {
		return nil, fmt.Errorf("execute: resume executions: %w", err)
	}
	var work []func(context.Context)
	for _, ex := range list {
		id := ex.ApprovalID
		log := x.log.With(slog.String("approval", string(id)))
		switch ex.Status {
		case core.ExecQueued:
			log.Info("resuming queued execution")
			work = append(work, func(ctx context.Context) { x.Run(ctx, id) })
		case core.ExecExecuted:
			log.Info("resuming verification")
			work = append(work, func(ctx context.Context) {
				if r, err := x.resumed(ctx, ex); err != nil {
					log.Error("verification: load approval", slog.Any("err", err))
				} else {
					x.verify(ctx, r)
				}
			})
		case core.ExecRunning:
			log.Warn("execution was running when the gateway stopped; marking it interrupted")
			r, err := x.resumed(ctx, ex)
			if err != nil {
				return nil, fmt.Errorf("execute: resume %s: %w", id, err)
			}
			x.record(ctx, r, core.ExecInterrupted, core.ExecUpdate{Reason: "interrupted by restart", Done: true},
				note{kind: audit.KindExecutionInterrupted, data: map[string]any{}, reason: true})
		}
	}
	return work, nil
}

// resumed is an execution a previous process left, with its approval.
func (x *Executor) resumed(ctx context.Context, ex core.Execution) (*execution, error) {
	a, err := x.cfg.Store.GetApproval(ctx, ex.ApprovalID)
	if err != nil {
		return nil, err
	}
	r := &execution{a: a, ex: ex}
	if ex.Status == core.ExecExecuted {
		if err := json.Unmarshal(a.ActionCanonical, &r.act); err != nil {
			return nil, fmt.Errorf("decode action: %w", err)
		}
		r.decoded = true
	}
	return r, nil
}

// reveal opens the declared secrets.
func (x *Executor) reveal(ctx context.Context, names []string) (map[string]string, []string, error) {
	if len(names) == 0 {
		return nil, nil, nil
	}
	if x.cfg.Secrets == nil {
		return nil, nil, errors.New("secrets are not enabled on this gateway")
	}
	return x.cfg.Secrets.Reveal(ctx, names)
}

func (x *Executor) recorded(a core.ApprovalRequest, to core.ExecStatus) {
	if x.cfg.Recorded != nil {
		x.cfg.Recorded(a, to)
	}
}

func (x *Executor) failpoint(name string) {
	if x.cfg.Failpoint == name {
		x.log.Warn("failpoint reached: killing the process", slog.String("failpoint", name))
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not deliverable to a blocked goroutine only; wait for it
	}
}

func fullOutput(r *core.ExecRecord) string {
	if r.Stderr == "" {
		return r.Stdout
	}
	return r.Stdout + "\n--- stderr ---\n" + r.Stderr
}

func formatMS(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return fmt.Sprintf("%.1f s", float64(ms)/1000)
}

// SandboxChecks adapts a core.Sandbox to the verification runner: each
// check runs as a separate sandboxed process, without network or secrets.
type SandboxChecks struct{ Sandbox core.Sandbox }

// RunCheck implements verify.CommandRunner.
func (s SandboxChecks) RunCheck(ctx context.Context, argv []string, dir string, timeout time.Duration) (int, []byte, error) {
	res, err := s.Sandbox.Run(ctx, core.ExecRequest{Argv: argv, Dir: dir, Timeout: timeout})
	if err != nil {
		return -1, nil, err
	}
	if res.TimedOut {
		return -1, res.Stdout, context.DeadlineExceeded
	}
	return res.ExitCode, res.Stdout, nil
}
