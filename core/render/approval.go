package render

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// TaskStopped is recorded as the decider of an approval closed because its
// task was stopped (cards have no "cancelled" status: the card shows as
// declined, with nothing run, and says why).
const TaskStopped core.IdentityID = "silas:task-stopped"

// Approval renders an approval request (and its execution, if any) as a
// card. The labels state the consequence; the choices present depend only
// on the state, so a re-render is idempotent. preview is how much of a
// stored (long) output the card shows.
func Approval(a core.ApprovalRequest, ex *core.Execution, preview int) *cards.Card {
	var act core.Action
	decoded := json.Unmarshal(a.ActionCanonical, &act) == nil
	return approval(a, act, decoded, ex, preview)
}

// ApprovalOf is Approval for a caller that holds a's action already
// decoded from a.ActionCanonical (the executor: its gate decoded the action
// it runs). It renders the same card without decoding the action again —
// an execution's cards were each decoding it anew (issue 26).
func ApprovalOf(a core.ApprovalRequest, act core.Action, ex *core.Execution, preview int) *cards.Card {
	return approval(a, act, true, ex, preview)
}

// approval renders a's card from its action act; decoded is false when
// a.ActionCanonical did not decode (the card then shows the intent as the
// command, and whatever of act was decoded before the error).
func approval(a core.ApprovalRequest, act core.Action, decoded bool, ex *core.Execution, preview int) *cards.Card {
	cmd := a.Intent
	if decoded {
		cmd = act.CommandLine()
	}
	// Bidi controls from user text are shown, not obeyed (before
	// clipping, which then keeps the card within its limits).
	cmd = cards.ShowInvisible(cmd)
	c := &cards.Card{
		ID:        cards.ID(a.ID),
		Kind:      cards.KindApproval,
		Intent:    Clip(cards.ShowInvisible(a.Intent), cards.MaxIntent),
		Risk:      a.Risk,
		Rationale: Clip(cards.ShowInvisible(a.Rationale), cards.MaxRationale),
		Command:   cmd,
		ExpiresAt: a.ExpiresAt.UTC().Format(time.RFC3339),
	}
	if act.Network {
		c.AffectedItems = append(c.AffectedItems, "network access: on")
	}
	for _, s := range act.Secrets {
		c.AffectedItems = append(c.AffectedItems, "receives secret: "+s)
	}
	if len(act.Verify) > 0 {
		c.Details = fmt.Sprintf("Done when %d verification check(s) pass, run by the gateway outside the sandbox.", len(act.Verify))
	}
	if a.Preview != "" {
		// What will change, as signed with the request (issue 28).
		// A long one is clipped here, whole on the secure page.
		pv := Clip(cards.ShowInvisible(a.Preview), MaxPreview)
		if PreviewClipped(a) {
			pv += "\n(The preview continues: all of it is on the secure page behind the card's Full preview link.)"
		}
		c.Details = strings.TrimSpace(pv + "\n\n" + c.Details)
	}
	label := "Run " + "`" + Clip(cmd, cards.MaxLabel-6) + "`"
	switch a.Status {
	case core.ApprovalPending:
		c.Status = cards.StatusPending
		c.Choices = []cards.Choice{{ID: "approve", Label: label, Style: cards.StylePrimary, Kind: cards.ChoiceForward}, {ID: "decline", Label: "Decline", Style: cards.StyleDanger, Kind: cards.ChoiceDecline}}
		if a.Risk.NeedsConfirm() {
			c.Choices[0].Label = Clip("Review: "+label, cards.MaxLabel)
		}
	case core.ApprovalConfirming:
		c.Status = cards.StatusConfirming
		c.Outcome = fmt.Sprintf("%s risk: confirm to run it.", a.Risk)
		c.Choices = []cards.Choice{{ID: "confirm", Label: Clip("Confirm: "+label, cards.MaxLabel), Style: cards.StylePrimary, Kind: cards.ChoiceForward}, {ID: "decline", Label: "Decline", Style: cards.StyleDanger, Kind: cards.ChoiceDecline}}
		if a.Risk == cards.RiskIrreversible {
			// Waiting for the passkey step-up (core/stepup): no tap runs
			// it; the first choice asks for a fresh step-up link.
			c.Outcome = "Irreversible: waiting for the passkey confirmation on the secure page."
			c.Choices[0] = cards.Choice{ID: "approve", Label: "New passkey link", Style: cards.StyleSecondary, Kind: cards.ChoiceForward}
		}
	case core.ApprovalDeclined:
		c.Status = cards.StatusDeclined
		c.Outcome = fmt.Sprintf("Declined by %s. Nothing was run.", a.DecidedBy)
		if a.DecidedBy == TaskStopped {
			c.Outcome = "Cancelled: its task was stopped. Nothing was run."
		}
	case core.ApprovalExpired:
		c.Status = cards.StatusExpired
		c.Outcome = "Expired without a decision. Nothing was run."
	case core.ApprovalApproved:
		c.Status = cards.StatusApproved
		c.Outcome = fmt.Sprintf("Approved by %s.", a.DecidedBy)
		if ex != nil {
			execution(c, a, ex, preview)
			// NUL stays the replacement character it always was (the stored
			// card is JSON PostgreSQL refuses NUL in); every other invisible
			// character is shown by name.
			c.Output = cards.ShowInvisible(strings.ReplaceAll(c.Output, "\x00", "\uFFFD"))
			hideSecretOutput(c, act.Secrets)
		}
	}
	return c
}

func execution(c *cards.Card, a core.ApprovalRequest, ex *core.Execution, preview int) {
	switch ex.Status {
	case core.ExecQueued, core.ExecRunning:
		c.Status = cards.StatusRunning
		c.Outcome = fmt.Sprintf("Approved by %s; running…", a.DecidedBy)
	case core.ExecExecuted:
		c.Status = cards.StatusRunning
		c.Outcome = "Ran; verifying…"
	case core.ExecRefused:
		c.Status = cards.StatusRefused
		c.Outcome = "Refused: " + ex.Reason
	case core.ExecInterrupted:
		c.Status = cards.StatusInterrupted
		c.Outcome = "Interrupted by a gateway restart; it may or may not have completed and was not re-run."
		if strings.HasPrefix(ex.Reason, "stopped with its task") {
			c.Outcome = "Stopped with its task: the program was killed; it may have done part of its work and was not re-run."
		}
	case core.ExecVerified, core.ExecFailed:
		c.Status = cards.StatusDone
		if ex.Status == core.ExecFailed {
			c.Status = cards.StatusFailed
		}
		c.Outcome = ex.Reason
	}
	if r := ex.Result; r != nil {
		out := r.Stdout
		if r.Stderr != "" {
			if out != "" && out[len(out)-1] != '\n' {
				out += "\n"
			}
			out += r.Stderr
		}
		if r.OutputRef != "" {
			c.Output = Clip(out, preview)
			c.OutputRef = r.OutputRef
		} else {
			c.Output = out
		}
		if r.Truncated {
			c.Details = "Output was longer than the sandbox keeps; the rest was discarded."
		}
	}
}

// hideSecretOutput collapses the output of an action that received
// secrets: the card says why and how to see it, and the output itself —
// already redacted, yet possibly carrying the secret in a form redaction
// cannot recognise — reaches the chat only when someone asks for it with
// /output (or the web chat's full-output link).
func hideSecretOutput(c *cards.Card, secrets []string) {
	if len(secrets) == 0 || c.Output == "" && c.OutputRef == "" {
		return
	}
	c.Output = ""
	what := "secret " + secrets[0]
	if len(secrets) > 1 {
		what = "secrets " + strings.Join(secrets, ", ")
	}
	note := "Output hidden because this action received " + what + "."
	if c.OutputRef != "" {
		note += " Send /output " + c.OutputRef + " to see it (redacted)."
	}
	if c.Outcome != "" {
		note = c.Outcome + " — " + note
	}
	c.Outcome = note
}
