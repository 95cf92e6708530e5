package flow

import (
	"fmt"
	"strings"
)

// loopShape is what the loader derived about one control.loop: its body
// (the nodes on a cycle through it) and its edges by role.
type loopShape struct {
	body  map[int]bool
	entry []int // edges into the loop from outside
	back  []int // edges from the body into the loop
	enter []int // edges from the loop into its body
	exit  []int // edges from the loop to the rest of the flow
}

func (f *Flow) reach(start int, fwd bool) map[int]bool {
	seen := map[int]bool{}
	stack := []int{start}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		adj := f.out[v]
		if !fwd {
			adj = f.in[v]
		}
		for _, ei := range adj {
			e := f.Edges[ei]
			w := f.index[e.To]
			if !fwd {
				w = f.index[e.From]
			}
			if !seen[w] {
				seen[w] = true
				stack = append(stack, w)
			}
		}
	}
	return seen
}

// shape finds loops, rejects cycles that do not pass through a
// control.loop and nodes nothing can reach.
func (l *loader) shape() {
	f := l.f
	f.loops = map[int]*loopShape{}
	owner := map[int]int{} // body node → its loop
	isBack := map[int]bool{}
	for li, n := range f.Nodes {
		if n.Type != "control.loop" {
			continue
		}
		fwd, bwd := f.reach(li, true), f.reach(li, false)
		ls := &loopShape{body: map[int]bool{}}
		for v := range fwd {
			if bwd[v] && v != li {
				ls.body[v] = true
			}
		}
		if len(ls.body) == 0 {
			l.errAt(n.Line, "nodes."+n.ID, "control.loop %s has no body: add edges from it to the steps to repeat and from the last step back to it", n.ID)
			continue
		}
		for v := range ls.body {
			if f.Nodes[v].Type == "control.loop" {
				l.errAt(f.Nodes[v].Line, "nodes."+f.Nodes[v].ID, "control.loop inside the body of %s: nested loops are not supported yet (use a subflow)", n.ID)
			}
			if o, ok := owner[v]; ok && o != li {
				l.errAt(f.Nodes[v].Line, "nodes."+f.Nodes[v].ID, "in the body of two loops (%s and %s)", f.Nodes[o].ID, n.ID)
			}
			owner[v] = li
		}
		inBody := func(v int) bool { return ls.body[v] }
		for ei, e := range f.Edges {
			from, to := f.index[e.From], f.index[e.To]
			field := fmt.Sprintf("edges[%d]", ei)
			switch {
			case to == li && inBody(from):
				ls.back = append(ls.back, ei)
				isBack[ei] = true
			case to == li:
				ls.entry = append(ls.entry, ei)
			case from == li && inBody(to):
				ls.enter = append(ls.enter, ei)
			case from == li:
				ls.exit = append(ls.exit, ei)
			case inBody(from) && !inBody(to):
				l.errAt(e.Line, field, "leaves the body of loop %s from %s: a loop's body is left only through the loop node", n.ID, e.From)
			case inBody(to) && !inBody(from):
				l.errAt(e.Line, field, "enters the body of loop %s at %s: a loop's body is entered only through the loop node", n.ID, e.To)
			}
		}
		f.loops[li] = ls
	}
	// Without the back edges the graph must be acyclic (Kahn).
	indeg := make([]int, len(f.Nodes))
	for ei, e := range f.Edges {
		if !isBack[ei] {
			indeg[f.index[e.To]]++
		}
	}
	var queue []int
	for v, d := range indeg {
		if d == 0 {
			queue = append(queue, v)
		}
	}
	done := 0
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		done++
		for _, ei := range f.out[v] {
			if isBack[ei] {
				continue
			}
			w := f.index[f.Edges[ei].To]
			if indeg[w]--; indeg[w] == 0 {
				queue = append(queue, w)
			}
		}
	}
	if done < len(f.Nodes) {
		var ids []string
		first := -1
		for v, d := range indeg {
			if d > 0 {
				ids = append(ids, f.Nodes[v].ID)
				if first < 0 {
					first = v
				}
			}
		}
		l.errAt(f.Nodes[first].Line, "edges", "cycle outside control.loop through %s", strings.Join(ids, ", "))
		return
	}
	l.reachable(isBack)
}

// reachable reports nodes no run can reach: from the roots (nodes without
// incoming edges), following edges that can fire — not out of a
// control.fail (it never succeeds) unless it continues on error, and not
// along an edge whose when is the constant false.
func (l *loader) reachable(isBack map[int]bool) {
	f := l.f
	seen := map[int]bool{}
	var stack []int
	for v := range f.Nodes {
		roots := true
		for _, ei := range f.in[v] {
			if !isBack[ei] {
				roots = false
			}
		}
		if roots && len(f.in[v]) == 0 || roots && f.Nodes[v].Type == "control.loop" {
			seen[v] = true
			stack = append(stack, v)
		}
	}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := f.Nodes[v]
		if n.Type == "control.fail" && !n.Policy.ContinueOnError {
			continue
		}
		for _, ei := range f.out[v] {
			if w := l.whens[ei]; w != nil && strings.TrimSpace(w.Value) == "false" {
				continue
			}
			to := f.index[f.Edges[ei].To]
			if !seen[to] {
				seen[to] = true
				stack = append(stack, to)
			}
		}
	}
	for v, n := range f.Nodes {
		if !seen[v] {
			l.errAt(n.Line, "nodes."+n.ID, "unreachable: no path from a starting node can run it")
		}
	}
}

// upstream maps each node to the nodes that have finished whenever it
// runs: its ancestors along edges, leaving out loop back edges.
func (l *loader) upstream() []map[string]bool {
	f := l.f
	back := map[int]bool{}
	for _, ls := range f.loops {
		for _, ei := range ls.back {
			back[ei] = true
		}
	}
	up := make([]map[string]bool, len(f.Nodes))
	var visit func(v int) map[string]bool
	visit = func(v int) map[string]bool {
		if up[v] != nil {
			return up[v]
		}
		m := map[string]bool{}
		up[v] = m
		for _, ei := range f.in[v] {
			if back[ei] {
				continue
			}
			u := f.index[f.Edges[ei].From]
			m[f.Nodes[u].ID] = true
			for k := range visit(u) {
				m[k] = true
			}
		}
		return m
	}
	for v := range f.Nodes {
		visit(v)
	}
	return up
}

// loopScope is what a loop's while and exit edges may read: what is
// upstream of the loop, the loop itself and its body (run at least once).
func (f *Flow) loopScope(id string, up map[string]bool) map[string]bool {
	li := f.index[id]
	m := map[string]bool{id: true}
	for k := range up {
		m[k] = true
	}
	if ls := f.loops[li]; ls != nil {
		for v := range ls.body {
			m[f.Nodes[v].ID] = true
		}
	}
	return m
}
