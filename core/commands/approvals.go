package commands

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/internal/lazyre"
)

// pending answers /pending: the conversation's open approvals.
func (c *Table) pending(ctx context.Context, t Turn, _ string, out Out) error {
	open, err := c.cfg.Reads.OpenApprovals(ctx, t.Turn.Conversation)
	if err != nil {
		return err
	}
	if len(open) == 0 {
		out.Reply("No open approvals here.")
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d open approval(s):", len(open))
	now := c.cfg.Now()
	for _, a := range open {
		if c.cfg.Decider.Intact(a) != nil {
			// Not its stored text: that is what was altered.
			fmt.Fprintf(&b, "\n• a request that was altered in storage or is unsigned; it cannot be approved (card %s)", a.ID)
			continue
		}
		left := a.ExpiresAt.Sub(now).Round(time.Second)
		state := "waiting for a tap"
		if a.Status == core.ApprovalConfirming {
			state = "waiting for confirmation"
		}
		fmt.Fprintf(&b, "\n• %s — %s risk, %s, expires in %s (card %s)", a.Intent, a.Risk, state, max(left, 0), a.ID)
	}
	out.Reply("%s", b.String())
	return nil
}

// audit answers /audit [n]: the conversation's recent activity in words.
func (c *Table) audit(ctx context.Context, t Turn, arg string, out Out) error {
	n := 10
	if arg != "" {
		v, err := strconv.Atoi(arg)
		if err != nil || v < 1 {
			out.Reply("Usage: /audit [n] — n is a number of entries (1-50).")
			return nil
		}
		n = min(v, 50)
	}
	rows, err := c.cfg.Reads.AuditTail(ctx, n, t.Turn.Conversation, render.HumanKinds)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		out.Reply("Nothing to report yet.")
		return nil
	}
	cmds := map[string]string{}
	cmdOf := func(id string) string {
		if id == "" {
			return ""
		}
		if c, ok := cmds[id]; ok {
			return c
		}
		// The chained entry of the request first: the approvals table can
		// be edited by the gateway's role, the log cannot be rewritten.
		cmd, err := c.cfg.Reads.RequestedCommand(ctx, core.ApprovalID(id))
		if errors.Is(err, core.ErrNotFound) {
			if a, err := c.cfg.Reads.GetApproval(ctx, core.ApprovalID(id)); err == nil {
				var act core.Action
				if json.Unmarshal(a.ActionCanonical, &act) == nil {
					cmd = act.CommandLine()
				}
			}
		}
		cmds[id] = cmd
		return cmd
	}
	lines := render.Describe(rows, t.Turn.Sender, cmdOf)
	out.Reply("%s", strings.Join(lines, "\n"))
	return nil
}

// outputRefPrefix starts the ref under which an execution's full output is
// stored ("out-" + approval id).
const outputRefPrefix = "out-"

// outputArgRe is the shape /output accepts: a stored-output ref or the
// card id it belongs to.
var outputArgRe = lazyre.New(`^[A-Za-z0-9_-]{1,128}$`)

// output answers "/output <ref>" with an execution's stored output: the
// whole of a long one. It is limited to people who may decide that card,
// in the chat the card is in, and each showing is audited. The output of
// an action that received a secret is not answered at once: redaction
// cannot find every form a program may print a secret in, so a card asks
// the owner to show it (RevealTap), and says why.
func (c *Table) output(ctx context.Context, t Turn, arg string, out Out) error {
	if !outputArgRe.MatchString(arg) {
		out.Reply("Usage: /output <ref> — the ref a card names (out-…), or the card's id.")
		return nil
	}
	ref := arg
	if !strings.HasPrefix(ref, outputRefPrefix) {
		ref = outputRefPrefix + arg
	}
	id := core.ApprovalID(strings.TrimPrefix(ref, outputRefPrefix))
	none := func() error {
		// The same answer for another chat's card: do not reveal it exists.
		out.Reply("No stored output %s in this chat.", ref)
		return nil
	}
	a, err := c.cfg.Reads.GetApproval(ctx, id)
	if errors.Is(err, core.ErrNotFound) || err == nil && a.Conversation != t.Turn.Conversation {
		return none()
	}
	if err != nil {
		return err
	}
	if !c.cfg.Decider.MayDecide(a, t.Turn.Sender, t.Trust) {
		out.Note(audit.KindOutputRefused, map[string]any{"approval": string(id), "reason": "not_approver"})
		out.Reply("You (%s) may not decide card %s, so its output is not shown to you.", t.Turn.Sender, id)
		return nil
	}
	text, err := c.cfg.Reads.GetConversationOutput(ctx, t.Turn.Conversation, ref)
	var act core.Action
	secret := json.Unmarshal(a.ActionCanonical, &act) == nil && len(act.Secrets) > 0 || errors.Is(err, core.ErrWithheld)
	switch {
	case errors.Is(err, core.ErrNotFound):
		return none()
	case secret:
		c.askToReveal(t, ref, act.Secrets, out)
		return nil
	case err != nil:
		return fmt.Errorf("commands: read output %s: %w", ref, err)
	}
	out.Note(audit.KindOutputShown, map[string]any{"approval": string(id), "ref": ref})
	out.Reply("%s", c.showOutput("Output "+ref, text))
	return nil
}

// showOutput is the answer that shows a stored output under name, cut at
// OutputInlineMax characters.
func (c *Table) showOutput(name, text string) string {
	switch n, max := utf8.RuneCountInString(text), c.cfg.OutputInlineMax; {
	case n == 0:
		return name + " is empty."
	case n > max:
		return fmt.Sprintf("%s, the first %d of %d characters:\n%s", name, max, n, render.Clip(text, max))
	default:
		return name + ":\n" + text
	}
}
