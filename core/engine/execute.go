package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/redact"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
)

// startExecution runs an approved action in the background; the engine
// waits for it on shutdown.
func (e *Engine) startExecution(id core.ApprovalID) {
	e.work.Add(1)
	go func() {
		defer e.work.Done()
		e.execute(e.workCtx, id)
	}()
}

// resumeExecutions settles executions a previous process left unfinished:
// queued ones run (they never started), executed ones are verified and
// reported, and running ones are marked interrupted — they may have had
// effects, so they are never run a second time.
func (e *Engine) resumeExecutions(ctx context.Context) error {
	list, err := e.st.UnfinishedExecutions(ctx)
	if err != nil {
		return fmt.Errorf("engine: resume executions: %w", err)
	}
	for _, ex := range list {
		switch ex.Status {
		case core.ExecQueued:
			e.log.Info("resuming queued execution", slog.String("approval", string(ex.ApprovalID)))
			e.startExecution(ex.ApprovalID)
		case core.ExecExecuted:
			e.log.Info("resuming verification", slog.String("approval", string(ex.ApprovalID)))
			id := ex.ApprovalID
			e.work.Add(1)
			go func() { defer e.work.Done(); e.verifyAndReport(e.workCtx, id) }()
		case core.ExecRunning:
			e.log.Warn("execution was running when the gateway stopped; marking it interrupted", slog.String("approval", string(ex.ApprovalID)))
			if err := e.finishExecution(ctx, ex.ApprovalID, core.ExecRunning, core.ExecInterrupted, store.ExecUpdate{Reason: "interrupted by restart", Done: true}, audit.KindExecutionInterrupted, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// finishExecution applies one execution transition and enqueues the card
// update that shows it, with its audit entry, in one transaction.
func (e *Engine) finishExecution(ctx context.Context, id core.ApprovalID, from, to core.ExecStatus, u store.ExecUpdate, kind audit.Kind, data map[string]any) error {
	var applied bool
	var conv core.ConversationID
	err := e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
		ok, err := tx.TransitionExecution(ctx, id, from, to, u)
		if err != nil || !ok {
			applied = false
			return nil, err
		}
		applied = true
		a, err := tx.GetApproval(ctx, id)
		if err != nil {
			return nil, err
		}
		conv = a.Conversation
		return e.showExecution(ctx, tx, a, to, u, kind, data)
	})
	if err != nil {
		return err
	}
	if applied {
		e.m.executions.WithLabelValues(string(to)).Inc()
		e.out.Kick(conv, 1)
		e.taskNotice(id)
	}
	return nil
}

// showExecution, after a transition to "to" in tx, stores long output,
// enqueues the card update that shows the new state and returns the
// transition's audit entry.
func (e *Engine) showExecution(ctx context.Context, tx *store.Tx, a core.ApprovalRequest, to core.ExecStatus, u store.ExecUpdate, kind audit.Kind, data map[string]any) ([]auditEntry, error) {
	id := a.ID
	if u.Result != nil && u.Result.OutputRef != "" {
		if err := tx.QueueOutput(u.Result.OutputRef, id, fullOutput(u.Result)); err != nil {
			return nil, err
		}
	}
	ex := core.Execution{ApprovalID: id, Status: to, Result: u.Result, Reason: u.Reason}
	if ex.Result == nil && to != core.ExecRefused && to != core.ExecInterrupted {
		// Later transitions keep the result stored earlier.
		var err error
		if ex.Result, err = e.storedResult(ctx, id); err != nil {
			return nil, err
		}
	}
	c := e.card(a, &ex)
	if err := tx.QueueMessage(a.Channel, core.OpUpdate, string(a.ID), core.OutMessage{Conversation: a.Conversation, Card: c}); err != nil {
		return nil, err
	}
	if data == nil {
		data = map[string]any{}
	}
	data["approval"] = string(id)
	if u.Reason != "" {
		data["reason"] = u.Reason
	}
	return []auditEntry{{Kind: kind, Actor: "silas", Conversation: string(a.Conversation), Data: data}}, nil
}

func (e *Engine) storedResult(ctx context.Context, id core.ApprovalID) (*core.ExecRecord, error) {
	ex, err := e.st.GetExecution(ctx, id)
	if err != nil {
		return nil, err
	}
	return ex.Result, nil
}

func fullOutput(r *core.ExecRecord) string {
	if r.Stderr == "" {
		return r.Stdout
	}
	return r.Stdout + "\n--- stderr ---\n" + r.Stderr
}

// execute runs one approved action exactly once: queued → running is a
// compare-and-swap, so a second caller (or a restart) finds nothing to do.
// The same transaction first passes the execution gate (admit): an
// execution that no recorded decision stands behind goes from queued
// straight to refused, and nothing runs.
func (e *Engine) execute(ctx context.Context, id core.ApprovalID) {
	e.failpoint("after-approve")
	log := e.log.With(slog.String("approval", string(id)))
	var a core.ApprovalRequest
	var started bool
	var refused string
	err := e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
		started, refused = false, ""
		// The approval row is locked (FOR UPDATE) for the check and the claim.
		var err error
		if a, err = tx.GetApproval(ctx, id); err != nil {
			return nil, err
		}
		reason, err := e.admit(ctx, tx, a)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			u := store.ExecUpdate{Reason: reason, Done: true}
			ok, err := tx.TransitionExecution(ctx, id, core.ExecQueued, core.ExecRefused, u)
			if err != nil || !ok {
				return nil, err
			}
			refused = reason
			return e.showExecution(ctx, tx, a, core.ExecRefused, u, audit.KindExecutionRefused, nil)
		}
		ok, err := tx.TransitionExecution(ctx, id, core.ExecQueued, core.ExecRunning, store.ExecUpdate{Started: true})
		if err != nil || !ok {
			return nil, err
		}
		started = true
		return []auditEntry{{Kind: audit.KindExecutionStarted, Actor: "silas", Conversation: string(a.Conversation), Data: map[string]any{"approval": string(id)}}}, nil
	})
	if err != nil {
		log.Error("could not start execution; it stays queued and resumes at next start", slog.Any("err", err))
		return
	}
	if refused != "" {
		log.Warn("execution refused before it started", slog.String("reason", refused))
		e.m.executions.WithLabelValues(string(core.ExecRefused)).Inc()
		e.out.Kick(a.Conversation, 1)
		e.taskNotice(id)
		return
	}
	if !started {
		return
	}
	if h := e.cfg.Hooks.ExecutionStarted; h != nil {
		h(id)
	}
	if e.beforeExecute != nil {
		e.beforeExecute(id)
	}
	refuse := func(reason string) {
		log.Warn("execution refused", slog.String("reason", reason))
		if err := e.finishExecution(ctx, id, core.ExecRunning, core.ExecRefused, store.ExecUpdate{Reason: reason, Done: true}, audit.KindExecutionRefused, nil); err != nil {
			log.Error("could not record refusal", slog.Any("err", err))
		}
	}
	// Read the stored request again: what runs is what is stored now, and it
	// must still pass the checks that need no database read (token, hash
	// binding, request signature) — the action about to run must be exactly
	// the one the approver saw.
	if a, err = e.st.GetApproval(ctx, id); err != nil {
		log.Error("could not reload approval; it stays running and is marked interrupted at next start", slog.Any("err", err))
		return
	}
	tok, act, reason := e.checkApproval(a)
	if reason != "" {
		refuse(reason)
		return
	}
	if act.Tool != "shell" {
		refuse(fmt.Sprintf("no executor for tool %q", act.Tool))
		return
	}
	timeout := e.cfg.ExecTimeout
	if act.TimeoutSeconds > 0 {
		timeout = time.Duration(act.TimeoutSeconds) * time.Second
	}
	env, values, err := e.revealSecrets(ctx, act.Secrets)
	var missing *missingSecretsError
	if errors.As(err, &missing) && e.askForMissingSecrets(ctx, a, core.IdentityID(tok.Token.Approver), missing.names) {
		refuse(fmt.Sprintf("secret %s is not stored; a secure-form link to store it was sent — approve the command again once it is stored",
			strings.Join(missing.names, ", ")))
		return
	}
	if err != nil {
		refuse(err.Error())
		return
	}
	runCtx, stopped, runDone := e.runContext(ctx, id)
	res, err := e.cfg.Sandbox.Run(runCtx, core.ExecRequest{Argv: act.Argv, Env: env, Timeout: timeout, Network: act.Network})
	runDone()
	if stopped() {
		// Killed because its task was stopped: whatever it did so far
		// stands, nothing of it is verified, and it is never run again.
		if err := e.finishExecution(ctx, id, core.ExecRunning, core.ExecInterrupted, store.ExecUpdate{Reason: "stopped with its task; the program was killed", Done: true}, audit.KindExecutionInterrupted, nil); err != nil {
			log.Error("could not record a stopped execution", slog.Any("err", err))
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
			refuse("the sandbox cannot provide the isolation this action requires (network off); nothing was run")
			return
		}
		if ctx.Err() != nil {
			// Shutting down mid-run: leave it "running"; the next start marks
			// it interrupted rather than running it twice.
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
	if n := len([]rune(fullOutput(rec))); n > e.cfg.OutputInlineMax || len(act.Secrets) > 0 && n > 0 {
		rec.OutputRef = outputRefPrefix + string(id)
	}
	data := map[string]any{"exit_code": res.ExitCode, "duration_ms": rec.DurationMS, "timed_out": res.TimedOut, "isolation": res.Isolation}
	if len(act.Secrets) > 0 {
		data["secrets"] = act.Secrets // the use of a secret is audited by name
	}
	if err := e.finishExecution(ctx, id, core.ExecRunning, core.ExecExecuted, store.ExecUpdate{Result: rec, Done: true}, audit.KindExecutionFinished, data); err != nil {
		log.Error("could not record execution result", slog.Any("err", err))
		return
	}
	e.failpoint("after-execute")
	e.verifyAndReport(ctx, id)
}

// verifyAndReport runs the action's checks outside the executor and moves
// the execution to verified or failed. Only this marks work done.
func (e *Engine) verifyAndReport(ctx context.Context, id core.ApprovalID) {
	log := e.log.With(slog.String("approval", string(id)))
	a, err := e.st.GetApproval(ctx, id)
	if err != nil {
		log.Error("verification: load approval", slog.Any("err", err))
		return
	}
	ex, err := e.st.GetExecution(ctx, id)
	if err != nil || ex.Result == nil {
		log.Error("verification: load execution", slog.Any("err", err))
		return
	}
	var act core.Action
	if err := json.Unmarshal(a.ActionCanonical, &act); err != nil {
		log.Error("verification: decode action", slog.Any("err", err))
		return
	}
	report := e.cfg.Verifier.Run(ctx, act.Verify, verify.Evidence{
		ExitCode: ex.Result.ExitCode, Stdout: []byte(ex.Result.Stdout), TimedOut: ex.Result.TimedOut, Dir: ex.Result.Dir,
	})
	raw, _ := json.Marshal(report)
	to, kind := core.ExecVerified, audit.KindVerificationPassed
	if !report.AllPassed {
		to, kind = core.ExecFailed, audit.KindVerificationFailed
	}
	summary := report.Summary()
	reason := fmt.Sprintf("ran %s; verified: %s", formatMS(ex.Result.DurationMS), summary)
	if !report.AllPassed {
		reason = fmt.Sprintf("ran %s; not verified: %s", formatMS(ex.Result.DurationMS), summary)
	}
	if err := e.finishExecution(ctx, id, core.ExecExecuted, to, store.ExecUpdate{Report: raw, Reason: reason}, kind,
		map[string]any{"summary": summary, "all_passed": report.AllPassed}); err != nil {
		log.Error("could not record verification", slog.Any("err", err))
	}
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
