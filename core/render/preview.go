package render

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// MaxPreview bounds the preview a card carries (issue 28 point 5): a
// card stays on a phone screen, collapsed there as its Details.
const MaxPreview = 1500

// Preview says what an action will change, from its canonical form, for
// the card's expandable section: a program's resolved argv, one argument
// a line exactly as it is passed, and its working directory; an MCP call's
// server, tool and arguments. step, when set, names the flow step (its
// node and inputs) the action belongs to. The proposer stores it with the
// request and signs it, so what the approver read is what is decided.
func Preview(act core.Action, step string) string {
	var b strings.Builder
	if step != "" {
		fmt.Fprintf(&b, "Flow step: %s\n", step)
	}
	switch act.Tool {
	case core.ToolMCP:
		fmt.Fprintf(&b, "Calls tool %s on MCP server %s with arguments:\n", act.Name, act.Server)
		args := string(act.Arguments)
		var v any
		if json.Unmarshal(act.Arguments, &v) == nil {
			if pretty, err := json.MarshalIndent(v, "", "  "); err == nil {
				args = string(pretty)
			}
		}
		if args == "" {
			args = "{}"
		}
		b.WriteString(args)
	default:
		if len(act.Argv) == 0 {
			return strings.TrimSpace(b.String())
		}
		fmt.Fprintf(&b, "Program: %s (run without a shell)\n", act.Argv[0])
		for i, a := range act.Argv[1:] {
			fmt.Fprintf(&b, "Argument %d: %q\n", i+1, a)
		}
		b.WriteString("Working directory: a fresh, empty work directory of its own inside the sandbox")
		if act.Network {
			b.WriteString("\nNetwork: on")
		}
		for _, s := range act.Secrets {
			fmt.Fprintf(&b, "\nReceives secret %s as an environment variable (its value is never shown)", s)
		}
	}
	return Clip(cards.ShowInvisible(b.String()), MaxPreview)
}
