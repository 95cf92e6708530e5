package flowrun

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/render"
)

// The run's cards: the progress card (one per run, edited in place as its
// nodes move) and a gate's question. Flow authors wrote the prompts and
// choices: they are shown as theirs, with invisible characters visible.

var nodeMark = map[flow.NodeStatus]string{
	flow.NodePending: "·", flow.NodeReady: "…", flow.NodeRunning: "▶", flow.NodeBackoff: "↻", flow.NodeLooping: "⟳",
	flow.NodeSucceeded: "✓", flow.NodeFailed: "✗", flow.NodeSkipped: "–", flow.NodeCancelled: "■",
}

// ShortID is the run id as chat shows it (/flow status accepts it).
func ShortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// progressCard shows every node of w's run and its state.
func (r *Runtime) progressCard(w *write) *cards.Card {
	return progress(w.row.ProgressCard, w.row.Flow, w.row.Version, w.row.ID, w.p.f, w.fr)
}

func progress(id, name, version, run string, f *flow.Flow, fr *flow.Run) *cards.Card {
	// Written piece by piece (it is rendered on every step of a run, for
	// every node): "✓ id (type) — status[, attempt N][: code]" a line.
	var d strings.Builder
	d.Grow(48 * len(f.Nodes))
	for _, n := range f.Nodes {
		st := fr.Nodes[n.ID]
		if st == nil {
			continue
		}
		for _, part := range [...]string{nodeMark[st.Status], " ", n.ID, " (", n.Type, ") — ", string(st.Status)} {
			d.WriteString(part)
		}
		if st.Attempt > 1 {
			d.WriteString(", attempt ")
			d.WriteString(strconv.Itoa(st.Attempt))
		}
		if st.Error != nil && st.Status.Final() {
			d.WriteString(": ")
			d.WriteString(st.Error.Code)
		}
		d.WriteString("\n")
	}
	c := &cards.Card{ID: cards.ID(id), Kind: cards.KindInfo,
		Intent: render.Clip(cards.ShowInvisible(fmt.Sprintf("Flow %s v%s — run %s", name, version, ShortID(run))), cards.MaxIntent),
		Rationale: "The progress of a flow you started; it is updated as the run moves. Each action asks for your approval unless the risk policy allows it. /flow stop " +
			ShortID(run) + " stops it.",
		Details: cards.ShowInvisible(strings.TrimRight(d.String(), "\n")),
	}
	done, total := 0, 0
	for _, st := range fr.Nodes {
		total++
		if st.Status.Final() {
			done++
		}
	}
	switch fr.Status {
	case flow.RunSucceeded:
		c.Status, c.Outcome = cards.StatusDone, "Succeeded."
	case flow.RunFailed:
		c.Status, c.Outcome = cards.StatusFailed, render.Clip("Failed. "+fr.Reason, cards.MaxIntent)
	case flow.RunCancelled:
		c.Status, c.Outcome = cards.StatusDeclined, render.Clip(fr.Reason, cards.MaxIntent)
	default:
		c.Status, c.Outcome = cards.StatusRunning, fmt.Sprintf("Running: %d of %d nodes finished.", done, total)
	}
	return c
}

// gateShown is the state a gate card shows.
type gateShown struct {
	by, answer, cancelled string
}

// gateCard renders a gate's question.
func gateCard(w *write, n *flow.Node, id, prompt string, s gateShown) *cards.Card {
	first, _, _ := strings.Cut(strings.TrimSpace(prompt), "\n")
	c := &cards.Card{ID: cards.ID(id), Kind: cards.KindInfo,
		Intent: render.Clip(cards.ShowInvisible("Flow "+w.row.Flow+" asks: "+first), cards.MaxIntent),
		Rationale: render.Clip("The flow's author wrote this question and its choices. The run ("+ShortID(w.row.ID)+", node "+n.ID+
			") waits for the answer; only "+string(w.row.Requester)+" or an owner can answer it."+sayHint(w, n), cards.MaxRationale),
		Details: cards.ShowInvisible(prompt),
	}
	switch {
	case s.cancelled != "":
		c.Status, c.Outcome = cards.StatusDeclined, render.Clip(s.cancelled, cards.MaxIntent)
	case s.by != "":
		c.Status, c.Outcome = cards.StatusDone, render.Clip(cards.ShowInvisible("Answered by "+s.by+": "+s.answer), cards.MaxIntent)
	default:
		c.Status = cards.StatusPending
		for i, ch := range gateChoices(n) {
			if i == cards.MaxChoices {
				break
			}
			c.Choices = append(c.Choices, cards.Choice{ID: render.QuestionChoice(i), Label: render.Clip(cards.ShowInvisible(ch), cards.MaxLabel),
				Style: cards.StyleSecondary, Kind: cards.ChoiceForward})
		}
	}
	return c
}

func gateChoices(n *flow.Node) []string {
	var out []string
	list, _ := n.Config["choices"].([]any)
	for _, c := range list {
		out = append(out, fmt.Sprint(c))
	}
	return out
}

// summary is the message a finished run sends.
func summary(w *write) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Flow %s (run %s) %s.", w.row.Flow, ShortID(w.row.ID), w.fr.Status)
	if w.fr.Reason != "" {
		b.WriteString(" " + w.fr.Reason + ".")
	}
	counts := map[flow.NodeStatus]int{}
	for _, st := range w.fr.Nodes {
		counts[st.Status]++
	}
	var parts []string
	for _, s := range []flow.NodeStatus{flow.NodeSucceeded, flow.NodeFailed, flow.NodeSkipped, flow.NodeCancelled} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	if len(parts) > 0 {
		b.WriteString(" Nodes: " + strings.Join(parts, ", ") + ".")
	}
	var failed []string
	for _, n := range w.p.f.Nodes {
		if st := w.fr.Nodes[n.ID]; st != nil && st.Status == flow.NodeFailed && st.Error != nil {
			failed = append(failed, fmt.Sprintf("%s: %s (%s)", n.ID, render.Clip(st.Error.Message, 200), st.Error.Code))
		}
	}
	slices.Sort(failed)
	for _, f := range failed {
		b.WriteString("\n✗ " + f)
	}
	return b.String()
}

func sayHint(w *write, n *flow.Node) string {
	if ok, _ := n.Config["allow_text"].(bool); ok {
		return " Answer in your own words with /flow say " + ShortID(w.row.ID) + " <text>."
	}
	return ""
}
