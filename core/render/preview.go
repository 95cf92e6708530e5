package render

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// MaxPreview bounds the preview a card carries (issue 28 point 5): a
// card stays on a phone screen, collapsed there as its Details. A longer
// one is stored and signed whole (up to MaxStoredPreview), and the card
// links to the secure page that shows all of it (core/previewlink).
const MaxPreview = 1500

// MaxStoredPreview bounds the preview stored and signed with a request.
const MaxStoredPreview = 32000

// PreviewClipped reports whether a's card shows only part of its preview.
func PreviewClipped(a core.ApprovalRequest) bool {
	return utf8.RuneCountInString(cards.ShowInvisible(a.Preview)) > MaxPreview
}

// Preview says what an action will change, from its canonical form, for
// the card's expandable section: a program's resolved argv, one argument
// a line exactly as it is passed, and its working directory; an MCP call's
// server, tool and arguments — for a call that writes a file, the diff. step, when set, names the flow step (its
// node and inputs) the action belongs to. The proposer stores it with the
// request and signs it, so what the approver read is what is decided.
func Preview(act core.Action, step string) string {
	var b strings.Builder
	if step != "" {
		fmt.Fprintf(&b, "Flow step: %s\n", step)
	}
	switch act.Tool {
	case core.ToolMCP:
		if diff, rest, ok := fileChange(act.Arguments); ok {
			fmt.Fprintf(&b, "Calls tool %s on MCP server %s, which %s", act.Name, act.Server, diff)
			if len(rest) > 0 {
				pretty, _ := json.MarshalIndent(rest, "", "  ")
				fmt.Fprintf(&b, "\nOther arguments:\n%s", pretty)
			}
			break
		}
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
	return Clip(cards.ShowInvisible(b.String()), MaxStoredPreview)
}

// fileChange recognises an MCP call that writes a file by its arguments,
// not by the tool's name (each server chooses its own): a path with the
// whole new content (the reference filesystem server's write_file), or a
// path with edits of old text to new text (its edit_file). It says what
// the call changes as a diff — for a whole write, every line of the new
// content added: the file's current content is on the MCP server, which
// the gateway does not read — and returns the other arguments to show.
func fileChange(raw json.RawMessage) (diff string, rest map[string]json.RawMessage, ok bool) {
	var args map[string]json.RawMessage
	if json.Unmarshal(raw, &args) != nil {
		return "", nil, false
	}
	var path string
	if json.Unmarshal(args["path"], &path) != nil || path == "" {
		return "", nil, false
	}
	var b strings.Builder
	var content string
	var edits []struct {
		Old *string `json:"oldText"`
		New *string `json:"newText"`
	}
	switch {
	case json.Unmarshal(args["content"], &content) == nil && args["content"] != nil:
		fmt.Fprintf(&b, "writes the whole file %s (its current content is on the MCP server and not shown; every line below is the new content):\n--- %s\n+++ %s\n", path, path, path)
		for _, l := range lines(content) {
			b.WriteString("+" + l + "\n")
		}
		delete(args, "content")
	case json.Unmarshal(args["edits"], &edits) == nil && len(edits) > 0:
		for _, e := range edits {
			if e.Old == nil || e.New == nil {
				return "", nil, false
			}
		}
		fmt.Fprintf(&b, "edits the file %s:\n--- %s\n+++ %s\n", path, path, path)
		for i, e := range edits {
			fmt.Fprintf(&b, "@@ edit %d @@\n", i+1)
			lineDiff(&b, lines(*e.Old), lines(*e.New))
		}
		delete(args, "edits")
	default:
		return "", nil, false
	}
	delete(args, "path")
	return strings.TrimSuffix(b.String(), "\n"), args, true
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// lineDiff writes old → new as unchanged leading and trailing lines around
// the removed and added middle: an edit replaces one stretch of text.
func lineDiff(b *strings.Builder, old, new []string) {
	pre := 0
	for pre < len(old) && pre < len(new) && old[pre] == new[pre] {
		pre++
	}
	suf := 0
	for suf < len(old)-pre && suf < len(new)-pre && old[len(old)-1-suf] == new[len(new)-1-suf] {
		suf++
	}
	for _, l := range old[:pre] {
		b.WriteString(" " + l + "\n")
	}
	for _, l := range old[pre : len(old)-suf] {
		b.WriteString("-" + l + "\n")
	}
	for _, l := range new[pre : len(new)-suf] {
		b.WriteString("+" + l + "\n")
	}
	for _, l := range old[len(old)-suf:] {
		b.WriteString(" " + l + "\n")
	}
}
