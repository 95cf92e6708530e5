package execute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/render"
)

// A card never shows a state that did not happen (issue 22 point 8): an
// approved action that cannot start for a reason known in the transaction
// that approves it — no executor for its tool, a sandbox that cannot give
// it the isolation it needs (network off or on), a declared secret that
// is not stored — is refused there, so its card goes from confirming
// straight to refused, never through "running…" (which the decision's card
// says of a queued run).

// Readiness is what a sandbox knows before any run: nil when it can give
// runs their isolation, or why every run (network-on runs) would be
// refused. *sandbox.Subprocess implements it; a sandbox that does not
// leaves such runs to be refused when they start.
type Readiness interface {
	Available() error
	NetworkAvailable() error
}

// isolationRefusal is the reason an action is refused when the sandbox
// cannot isolate it as it asks. For network-on the sandbox's reason names
// the missing tool and its package; for network off it says only what
// (the namespace details are for doctor and the log).
func isolationRefusal(act core.Action, err error) string {
	if act.Network {
		why := strings.TrimPrefix(err.Error(), "sandbox: ")
		return "the sandbox cannot provide the isolation this action requires (network on: " + render.Clip(why, 300) + "); nothing was run"
	}
	return "the sandbox cannot provide the isolation this action requires (network off); nothing was run"
}

// ready is why act cannot start at all, whatever its secrets: "" when it
// may.
func (x *Executor) ready(act core.Action) string {
	if _, byTool := x.cfg.Tools[act.Tool]; byTool {
		return "" // its runner checks what it needs when it runs
	}
	if act.Tool != "shell" {
		return fmt.Sprintf("no executor for tool %q", act.Tool)
	}
	r, ok := x.cfg.Sandbox.(Readiness)
	if !ok {
		return ""
	}
	err := r.Available()
	if err == nil && act.Network {
		err = r.NetworkAvailable()
	}
	if err != nil {
		return isolationRefusal(act, err)
	}
	return ""
}

// Presence tells which declared secrets are not stored, without opening
// any (Sealed implements it). An Executor whose Secrets does not leaves
// such a run to be refused when it starts.
type Presence interface {
	// Enabled: stored secrets can be opened at all (a sealing key).
	Enabled() bool
	Missing(ctx context.Context, names []string) ([]string, error)
	// CanAsk: missing secrets can be asked for through the secure form.
	CanAsk() bool
}

// Missing implements Presence.
func (s Sealed) Missing(ctx context.Context, names []string) ([]string, error) {
	var missing []string
	for _, n := range names {
		_, err := s.Store.SecretCiphertext(ctx, n)
		if errors.Is(err, core.ErrNotFound) {
			missing = append(missing, n)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("execute: is secret %s stored: %w", n, err)
		}
	}
	return missing, nil
}

// Enabled implements Presence.
func (s Sealed) Enabled() bool { return s.Sealer != nil }

// CanAsk implements Presence.
func (s Sealed) CanAsk() bool {
	e, ok := s.Asker.(interface{ Enabled() bool })
	return s.Sealer != nil && s.Asker != nil && (!ok || e.Enabled())
}

var _ Presence = Sealed{}

// Unready is the refusal RefuseUnready wrote.
type Unready struct {
	// Card is the request's card, refused.
	Card *cards.Card
	// Reason is why, as the card and the audit entry say it.
	Reason string
	// Audit is the execution.refused entry, for the caller's transaction.
	Audit audit.Entry
	// After runs once the transaction committed: it asks for the missing
	// secrets (secure-input cards, on approver's behalf) and reports the
	// refusal (metrics, the lane's kick) as any refusal is.
	After func()
}

// RefuseUnready refuses, in tx, the execution of request a that was just
// approved and queued there (a as the decider carried it: the row is not
// read again), when it cannot start: no executor for its tool, isolation
// the sandbox says it cannot give, or a declared secret that is not
// stored (or secrets are not enabled). nil: nothing to refuse (it runs).
func (x *Executor) RefuseUnready(ctx context.Context, tx Tx, a core.ApprovalRequest, approver core.IdentityID) (*Unready, error) {
	id := a.ID
	var act core.Action
	if err := json.Unmarshal(a.ActionCanonical, &act); err != nil {
		return nil, nil // the gate judges a request that does not decode
	}
	reason := x.ready(act)
	var ask []string
	switch p, ok := x.cfg.Secrets.(Presence); {
	case reason != "", len(act.Secrets) == 0:
	case x.cfg.Secrets == nil, ok && !p.Enabled():
		reason = "secrets are not enabled on this gateway"
	case !ok:
		return nil, nil
	default:
		missing, err := p.Missing(ctx, act.Secrets)
		if err != nil || len(missing) == 0 {
			return nil, err
		}
		reason = (&MissingSecretsError{Names: missing}).Error()
		if p.CanAsk() {
			ask = missing
			reason = fmt.Sprintf("secret %s is not stored; a secure-form link to store it was sent — approve the command again once it is stored",
				strings.Join(missing, ", "))
		}
	}
	if reason == "" {
		return nil, nil
	}
	u := core.ExecUpdate{Reason: reason, Done: true}
	ok, err := tx.TransitionExecution(ctx, id, core.ExecQueued, core.ExecRefused, u)
	if err != nil || !ok {
		return nil, err
	}
	if a.Task != "" {
		// A task's call: wake its step with this commit, as every outcome
		// the executor records does (it reads the refusal from the rows).
		tx.QueueTaskStep(a.Task)
	}
	ex := after(core.Execution{ApprovalID: id, Status: core.ExecQueued}, core.ExecRefused, u)
	x.log.Warn("execution refused before it started", slog.String("approval", string(id)), slog.String("reason", reason))
	bg := context.WithoutCancel(ctx)
	return &Unready{Card: render.Approval(a, &ex, x.cfg.OutputPreview), Reason: reason,
		Audit: audit.Entry{Kind: audit.KindExecutionRefused, Actor: "silas", Conversation: string(a.Conversation),
			Data: map[string]any{"approval": string(id), "reason": reason}},
		After: func() {
			if len(ask) > 0 {
				x.cfg.Secrets.AskFor(bg, a, approver, ask)
			}
			x.recorded(a, core.ExecRefused)
		}}, nil
}
