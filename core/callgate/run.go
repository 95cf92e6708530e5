package callgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
)

// RunRequest is a caller's run_command: the same action /run proposes.
type RunRequest struct {
	Argv []string
	// Secrets are names of stored secrets the command receives as
	// environment variables (values never pass through the caller).
	Secrets []string
	// Verify are the checks that decide whether it worked (default: exit
	// code 0).
	Verify []verify.Check
	// TimeoutSeconds bounds the run (0: the configured default).
	TimeoutSeconds int
	// Why is the caller's reason, shown on the card as its words.
	Why string
}

// RunResult is what became of an approved command: the verified outcome
// and its output.
type RunResult struct {
	Approval  core.ApprovalID `json:"approval"`
	DecidedBy core.IdentityID `json:"decided_by"`
	// Status is verified, failed, refused or interrupted; only verified
	// means the checks passed.
	Status   core.ExecStatus `json:"status"`
	Verified bool            `json:"verified"`
	// Summary is the checks' line ("exit code 0 ✓"); Reason why a run was
	// refused or interrupted.
	Summary   string          `json:"summary,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	ExitCode  int             `json:"exit_code"`
	Stdout    string          `json:"stdout,omitempty"`
	Stderr    string          `json:"stderr,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
	TimedOut  bool            `json:"timed_out,omitempty"`
	OutputRef string          `json:"output_ref,omitempty"`
	Checks    []verify.Result `json:"checks,omitempty"`
	// Withheld: the command received a secret, so its output is not
	// returned to the caller (an agent); the owner can show it in chat.
	Withheld bool `json:"withheld,omitempty"`
}

// Run proposes the command from c in the owner's conversation and waits
// for its outcome: the card on the owner's channel, the tap, the run in
// the sandbox and its verification. A decline, an expiry or a refusal is
// a *Refusal.
func (g *Gate) Run(ctx context.Context, c Caller, r RunRequest, progress func(string)) (RunResult, error) {
	origin, err := g.origin(ctx, c)
	if err != nil {
		return RunResult{}, err
	}
	checks := r.Verify
	if len(checks) == 0 {
		checks = []verify.Check{verify.ExitCodeZero()}
	}
	a := core.Action{Tool: "shell", Argv: r.Argv, Secrets: r.Secrets, Verify: checks, TimeoutSeconds: r.TimeoutSeconds}
	rationale := "An agent connected over MCP (" + string(c.id) + ") asks to run this; it waits for your answer."
	if r.Why != "" {
		rationale = render.Said(string(c.id), r.Why)
	}
	pa := core.ProposedAction{Action: a, Intent: a.CommandLine(), Rationale: rationale}
	var step propose.Step
	err = g.cfg.Store.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		var err error
		if step, err = g.cfg.Actions.Propose(ctx, tx, "", origin, pa); err != nil {
			return nil, err
		}
		call := audit.Entry{Kind: audit.KindMCPCall, Actor: string(c.id), Conversation: string(origin.Conversation),
			Data: map[string]any{"tool": "run_command", "command": a.CommandLine(), "approval": string(step.Approval), "refused": step.Refused}}
		return append([]audit.Entry{call}, step.Audit...), nil
	})
	if err != nil {
		return RunResult{}, fmt.Errorf("callgate: run: %w", err)
	}
	// After commit: an action policy allows starts now.
	g.cfg.Actions.Proposed(step)
	// Every message the commit queued (the card, policy's or a standing
	// consent's update, the consent's line): the lane reads that many.
	g.kick(origin.Conversation, step.Messages)
	id, refused := step.Approval, step.Refused
	if id == "" {
		return RunResult{}, &Refusal{Reason: "refused", Message: "Not proposed: " + refused}
	}
	var out RunResult
	err = g.wait(ctx, progress, func() (bool, string, error) {
		ap, err := g.cfg.Store.GetApproval(ctx, id)
		if err != nil {
			return false, "", fmt.Errorf("callgate: run: %w", err)
		}
		switch {
		case ap.Status == core.ApprovalDeclined:
			return false, "", &Refusal{Reason: "declined", Message: fmt.Sprintf("Declined by %s: `%s` was not run.", ap.DecidedBy, a.CommandLine())}
		case ap.Status == core.ApprovalExpired, ap.Status.Open() && !g.cfg.Now().Before(ap.ExpiresAt):
			// Past its expiry a tap is refused, so the answer is final
			// even before the expiry job turned the card.
			return false, "", &Refusal{Reason: "expired", Message: fmt.Sprintf("Nobody approved `%s` before the card expired: it was not run.", a.CommandLine())}
		case ap.Status.Open():
			return false, fmt.Sprintf("waiting for the owner's approval on %s (card %s)", origin.Channel, id), nil
		}
		ex, err := g.cfg.Store.GetExecution(ctx, id)
		if errors.Is(err, core.ErrNotFound) {
			return false, "approved by " + string(ap.DecidedBy) + ", starting", nil
		}
		if err != nil {
			return false, "", fmt.Errorf("callgate: run: %w", err)
		}
		switch ex.Status {
		case core.ExecVerified, core.ExecFailed, core.ExecRefused, core.ExecInterrupted:
			out = result(ap, ex, len(a.Secrets) > 0)
			return true, "", nil
		}
		return false, "approved by " + string(ap.DecidedBy) + ", " + string(ex.Status), nil
	})
	return out, err
}

// result is a settled execution as the caller sees it.
func result(ap core.ApprovalRequest, ex core.Execution, secret bool) RunResult {
	out := RunResult{Approval: ap.ID, DecidedBy: ap.DecidedBy, Status: ex.Status, Verified: ex.Status == core.ExecVerified, Reason: ex.Reason}
	var rep verify.Report
	if len(ex.Report) > 0 && json.Unmarshal(ex.Report, &rep) == nil {
		out.Summary, out.Checks = rep.Summary(), rep.Results
	}
	if r := ex.Result; r != nil {
		out.ExitCode, out.Truncated, out.TimedOut = r.ExitCode, r.Truncated, r.TimedOut
		if secret {
			// A secret's bytes may be in the output in a form no
			// redaction finds; the caller is a model. The checks' own
			// output is withheld too.
			out.Withheld = true
			for i := range out.Checks {
				out.Checks[i].Output = ""
			}
		} else {
			out.Stdout, out.Stderr, out.OutputRef = r.Stdout, r.Stderr, r.OutputRef
		}
	}
	return out
}
