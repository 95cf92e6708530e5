package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/render"
)

// outputArgRe is the shape /output accepts: a stored-output ref or the
// card id it belongs to.
var outputArgRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// cmdOutput answers "/output <ref>" with an execution's stored output: the
// whole of a long one, or the output of an action that received secrets,
// which its card does not show. What is stored was redacted before it was
// stored (secret values and their encodings are gone), so this shows
// nothing the execution's card could not have shown; it is still limited
// to people who may decide that card, in the chat the card is in, and each
// showing is audited.
func (e *Engine) cmdOutput(ctx context.Context, o *outcome, arg string) error {
	t := o.st.Turn
	if !outputArgRe.MatchString(arg) {
		o.reply("Usage: /output <ref> — the ref a card names (out-…), or the card's id.")
		return nil
	}
	ref := arg
	if !strings.HasPrefix(ref, execute.OutputRefPrefix) {
		ref = execute.OutputRefPrefix + arg
	}
	id := core.ApprovalID(strings.TrimPrefix(ref, execute.OutputRefPrefix))
	none := func() error {
		// The same answer for another chat's card: do not reveal it exists.
		o.reply("No stored output %s in this chat.", ref)
		return nil
	}
	a, err := e.st.GetApproval(ctx, id)
	if errors.Is(err, core.ErrNotFound) || err == nil && a.Conversation != t.Conversation {
		return none()
	}
	if err != nil {
		return err
	}
	if !decide.MayDecide(a, t.Sender, o.trust) {
		o.note(audit.KindOutputRefused, map[string]any{"approval": string(id), "reason": "not_approver"})
		o.reply("You (%s) may not decide card %s, so its output is not shown to you.", t.Sender, id)
		return nil
	}
	out, err := e.st.GetConversationOutput(ctx, t.Conversation, ref)
	if errors.Is(err, core.ErrNotFound) {
		return none()
	}
	if err != nil {
		return fmt.Errorf("engine: read output %s: %w", ref, err)
	}
	o.note(audit.KindOutputShown, map[string]any{"approval": string(id), "ref": ref})
	name := "Output " + ref
	var act core.Action
	if json.Unmarshal(a.ActionCanonical, &act) == nil && len(act.Secrets) > 0 {
		name += " (secret values redacted)"
	}
	switch n := utf8.RuneCountInString(out); {
	case n == 0:
		o.reply("%s is empty.", name)
	case n > e.cfg.OutputInlineMax:
		o.reply("%s, the first %d of %d characters:\n%s", name, e.cfg.OutputInlineMax, n, render.Clip(out, e.cfg.OutputInlineMax))
	default:
		o.reply("%s:\n%s", name, out)
	}
	return nil
}
