package flow

import (
	"fmt"
	"io"
	"strings"
)

// WriteText writes a flow as text: its inputs, nodes with their policies
// and edges with their conditions (`silas flow show`).
func WriteText(w io.Writer, f *Flow) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (version %s) — %s\n", f.Name, f.Version, f.File)
	if f.Description != "" {
		fmt.Fprintf(&b, "%s\n", strings.TrimSpace(f.Description))
	}
	if !f.FailFast {
		b.WriteString("policy: fail_fast off (other branches go on after a failure)\n")
	}
	if len(f.Inputs) > 0 {
		b.WriteString("\ninputs:\n")
		for _, in := range f.Inputs {
			def := "required"
			if in.HasDefault {
				def = "default " + string(mustJSON(in.Default))
			}
			fmt.Fprintf(&b, "  %-16s %-7s %s", in.Name, in.Type, def)
			if in.Description != "" {
				fmt.Fprintf(&b, " — %s", in.Description)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\nnodes:\n")
	for _, n := range f.Nodes {
		line := fmt.Sprintf("  %-16s %-20s %s", n.ID, n.Type, policyText(n.Policy))
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	if len(f.Edges) > 0 {
		b.WriteString("\nedges:\n")
		for _, e := range f.Edges {
			fmt.Fprintf(&b, "  %s → %s", e.From, e.To)
			if e.When != nil {
				fmt.Fprintf(&b, "  when %s", e.When.Src)
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func policyText(p Policy) string {
	var ps []string
	if p.Merge == MergeAny {
		ps = append(ps, "merge any")
	}
	if p.Timeout > 0 {
		ps = append(ps, "timeout "+p.Timeout.String())
	}
	if p.Retry.MaxAttempts > 1 {
		r := fmt.Sprintf("retry %d×", p.Retry.MaxAttempts)
		if p.Retry.Backoff > 0 {
			r += " backoff " + p.Retry.Backoff.String()
		}
		if p.Retry.MaxBackoff > 0 {
			r += " max " + p.Retry.MaxBackoff.String()
		}
		ps = append(ps, r)
	}
	if p.ContinueOnError {
		ps = append(ps, "continue on error")
	}
	if len(ps) == 0 {
		return ""
	}
	return "(" + strings.Join(ps, ", ") + ")"
}

// WriteMermaid writes a flow as a Mermaid flowchart: decisions are
// rhombi, gates and actions stand out, conditions label their edges.
func WriteMermaid(w io.Writer, f *Flow) error {
	var b strings.Builder
	b.WriteString("flowchart TD\n")
	// Mermaid ids get a prefix: a node called end or graph would
	// otherwise be read as a keyword.
	for _, n := range f.Nodes {
		label := mermaidText(n.ID + "\n" + n.Type)
		id := "n_" + n.ID
		switch {
		case n.Type == "control.if" || n.Type == "control.switch":
			fmt.Fprintf(&b, "  %s{\"%s\"}\n", id, label)
		case n.Type == "control.gate":
			fmt.Fprintf(&b, "  %s[/\"%s\"/]\n", id, label)
		case n.Type == "control.loop" || n.Type == "control.foreach":
			fmt.Fprintf(&b, "  %s([\"%s\"])\n", id, label)
		case strings.HasPrefix(n.Type, "action.") || n.Type == "agent.run":
			fmt.Fprintf(&b, "  %s[[\"%s\"]]\n", id, label)
		default:
			fmt.Fprintf(&b, "  %s[\"%s\"]\n", id, label)
		}
	}
	for _, e := range f.Edges {
		if e.When != nil {
			fmt.Fprintf(&b, "  n_%s -->|\"%s\"| n_%s\n", e.From, mermaidText(e.When.Src), e.To)
		} else {
			fmt.Fprintf(&b, "  n_%s --> n_%s\n", e.From, e.To)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mermaidText escapes a label: Mermaid reads #quot; and friends as
// entities, and a line break as <br/>.
func mermaidText(s string) string {
	r := strings.NewReplacer("#", "#35;", "\"", "#quot;", "<", "#lt;", ">", "#gt;", "|", "#124;", "\n", "<br/>")
	return r.Replace(s)
}
