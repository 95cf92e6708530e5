package flow

import (
	"fmt"
	"html"
	"io"
	"strings"
)

// The picture of a run (the web chat shows it beside the progress card):
// the flow's graph as SVG, top to bottom, each node a box coloured by its
// state. Server-rendered and self-contained — no script, no style sheet,
// no external reference — so the page can show it as an image.

const (
	svgBoxW, svgBoxH = 168, 44
	svgGapX, svgGapY = 24, 36
	svgPad           = 12
)

// svgColours are a state's fill and stroke.
var svgColours = map[NodeStatus][2]string{
	NodePending:   {"#f4f4f5", "#a1a1aa"},
	NodeReady:     {"#f4f4f5", "#52525b"},
	NodeRunning:   {"#dbeafe", "#2563eb"},
	NodeBackoff:   {"#fef3c7", "#d97706"},
	NodeLooping:   {"#dbeafe", "#2563eb"},
	NodeSucceeded: {"#dcfce7", "#16a34a"},
	NodeFailed:    {"#fee2e2", "#dc2626"},
	NodeSkipped:   {"#fafafa", "#d4d4d8"},
	NodeCancelled: {"#e4e4e7", "#71717a"},
}

// svgMarks are the progress card's marks, repeated in the picture so it
// does not rely on colour alone.
var svgMarks = map[NodeStatus]string{
	NodePending: "·", NodeReady: "·", NodeRunning: "▶", NodeBackoff: "↻", NodeLooping: "▶",
	NodeSucceeded: "✓", NodeFailed: "✗", NodeSkipped: "–", NodeCancelled: "■",
}

// layers places each node in a row: the longest path from a starting node,
// not counting the edges that close a cycle (a loop's body back to it).
func (f *Flow) layers() (row map[string]int, back map[int]bool) {
	out := map[string][]int{}
	for i, e := range f.Edges {
		out[e.From] = append(out[e.From], i)
	}
	// Depth-first in file order: an edge to a node on the current path
	// closes a cycle.
	back = map[int]bool{}
	state := map[string]int{} // 0 new, 1 on the path, 2 done
	var visit func(id string)
	visit = func(id string) {
		state[id] = 1
		for _, ei := range out[id] {
			to := f.Edges[ei].To
			switch state[to] {
			case 1:
				back[ei] = true
			case 0:
				visit(to)
			}
		}
		state[id] = 2
	}
	for _, n := range f.Nodes {
		if state[n.ID] == 0 {
			visit(n.ID)
		}
	}
	row = map[string]int{}
	for range f.Nodes { // relax: at most one pass per node (the graph without back edges is acyclic)
		changed := false
		for i, e := range f.Edges {
			if !back[i] && row[e.To] < row[e.From]+1 {
				row[e.To], changed = row[e.From]+1, true
			}
		}
		if !changed {
			break
		}
	}
	return row, back
}

// WriteSVG writes the flow's graph with each node's state (a node missing
// from states is pending).
func WriteSVG(w io.Writer, f *Flow, states map[string]NodeStatus) error {
	row, back := f.layers()
	pos := map[string][2]int{}
	cols := map[int]int{}
	maxCols, maxRow := 1, 0
	for _, n := range f.Nodes { // in file order within a row
		r := row[n.ID]
		x := svgPad + cols[r]*(svgBoxW+svgGapX)
		y := svgPad + r*(svgBoxH+svgGapY)
		pos[n.ID] = [2]int{x, y}
		cols[r]++
		maxCols, maxRow = max(maxCols, cols[r]), max(maxRow, r)
	}
	width := 2*svgPad + maxCols*svgBoxW + (maxCols-1)*svgGapX
	height := 2*svgPad + (maxRow+1)*svgBoxH + maxRow*svgGapY
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, "<title>%s</title>\n", html.EscapeString("Flow "+f.Name+" v"+f.Version))
	b.WriteString(`<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#71717a"/></marker></defs>` + "\n")
	for i, e := range f.Edges {
		a, z := pos[e.From], pos[e.To]
		x1, y1 := a[0]+svgBoxW/2, a[1]+svgBoxH
		x2, y2 := z[0]+svgBoxW/2, z[1]
		dash := ""
		if back[i] {
			// Back to a loop: from the box's side, dashed.
			x1, y1, x2, y2 = a[0]+svgBoxW, a[1]+svgBoxH/2, z[0]+svgBoxW, z[1]+svgBoxH/2
			dash = ` stroke-dasharray="4 3"`
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#71717a" stroke-width="1.2" marker-end="url(#arrow)"%s>`, x1, y1, x2, y2, dash)
		if e.When != nil {
			fmt.Fprintf(&b, "<title>when %s</title>", html.EscapeString(e.When.Src))
		}
		b.WriteString("</line>\n")
	}
	for _, n := range f.Nodes {
		st := states[n.ID]
		if st == "" {
			st = NodePending
		}
		c, ok := svgColours[st]
		if !ok {
			c = svgColours[NodePending]
		}
		p := pos[n.ID]
		fmt.Fprintf(&b, `<g data-node="%s" data-state="%s"><title>%s (%s): %s</title>`, html.EscapeString(n.ID), st,
			html.EscapeString(n.ID), html.EscapeString(n.Type), st)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" rx="6" fill="%s" stroke="%s" stroke-width="1.5"/>`, p[0], p[1], svgBoxW, svgBoxH, c[0], c[1])
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s %s</text>`, p[0]+8, p[1]+18, svgMarks[st], html.EscapeString(clipRunes(n.ID, 20)))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#52525b">%s</text></g>`+"\n", p[0]+8, p[1]+35, html.EscapeString(clipRunes(n.Type, 24)))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
