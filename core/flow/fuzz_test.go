package flow

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// genFlow builds a random acyclic flow (edges only from lower to higher
// index) and a script for it from fuzz bytes.
func genFlow(data []byte) (string, map[string][]outcome, int) {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	n := 2 + next()%10
	var b strings.Builder
	b.WriteString("name: fuzz\nversion: \"1\"\ninputs: {flag: {type: bool, default: true}}\n")
	fmt.Fprintf(&b, "policy: {fail_fast: %v}\nnodes:\n", next()%2 == 0)
	script := map[string][]outcome{}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("n%d", i)
		var pol []string
		if next()%3 == 0 {
			pol = append(pol, "merge: any")
		}
		switch next() % 5 {
		case 0:
			fmt.Fprintf(&b, "  - {id: %s, type: control.noop", id)
		case 1:
			fmt.Fprintf(&b, "  - {id: %s, type: control.if, config: {condition: \"inputs.flag\"}", id)
		case 2:
			fmt.Fprintf(&b, "  - {id: %s, type: control.fail, config: {message: boom}", id)
			pol = append(pol, "continue_on_error: true")
		default:
			fmt.Fprintf(&b, "  - {id: %s, type: action.shell, config: {command: x}", id)
			timeout := next()%2 == 0
			if timeout {
				pol = append(pol, "timeout: 5s")
			}
			if a := next() % 4; a > 1 {
				pol = append(pol, fmt.Sprintf("retry: {max_attempts: %d, backoff: 1s, max_backoff: 2s}", a))
			}
			if next()%3 == 0 {
				pol = append(pol, "continue_on_error: true")
			}
			for k := 0; k < 3; k++ {
				switch next() % 4 {
				case 0:
					script[id] = append(script[id], bad("exit"))
				case 1:
					if timeout {
						script[id] = append(script[id], hang)
						continue
					}
					fallthrough
				default:
					script[id] = append(script[id], ok(fmt.Sprintf(`{"v": %d}`, next()%3)))
				}
			}
		}
		if len(pol) > 0 {
			fmt.Fprintf(&b, ", policy: {%s}", strings.Join(pol, ", "))
		}
		b.WriteString("}\n")
	}
	var edges []string
	for j := 1; j < n; j++ {
		for i := 0; i < j; i++ {
			if next()%3 != 0 {
				continue
			}
			when := ""
			switch next() % 5 {
			case 0:
				when = `, when: "inputs.flag"`
			case 1:
				when = `, when: "1 > 2"`
			case 2:
				when = fmt.Sprintf(`, when: "has(nodes.n%d.v) && nodes.n%d.v == 1"`, i, i)
			case 3:
				when = fmt.Sprintf(`, when: "nodes.n%d.nope == 1"`, i) // fails at run time
			}
			edges = append(edges, fmt.Sprintf("  - {from: n%d, to: n%d%s}\n", i, j, when))
		}
	}
	if next()%2 == 0 {
		// A loop: lp → lb → lc → lp (and maybe lb → lp), entered from a
		// random node or as a root, left through lx.
		whiles := []string{"true", "inputs.flag", "has(nodes.lb.v) && nodes.lb.v == 1", "nodes.lb.nope == 1"}
		fmt.Fprintf(&b, "  - {id: lp, type: control.loop, config: {while: %q, max_iterations: %d}}\n", whiles[next()%4], 1+next()%3)
		fmt.Fprintf(&b, "  - {id: lb, type: action.shell, config: {command: x}}\n")
		fmt.Fprintf(&b, "  - {id: lc, type: control.noop, policy: {merge: %s}}\n", []string{"all", "any"}[next()%2])
		b.WriteString("  - {id: lx, type: system.log, config: {message: x}}\n")
		for k := 0; k < 3; k++ {
			if next()%3 == 0 {
				script["lb"] = append(script["lb"], bad("exit"))
			} else {
				script["lb"] = append(script["lb"], ok(fmt.Sprintf(`{"v": %d}`, next()%2)))
			}
		}
		if e := next() % (n + 1); e < n {
			edges = append(edges, fmt.Sprintf("  - {from: n%d, to: lp}\n", e))
		}
		edges = append(edges, "  - {from: lp, to: lb}\n", "  - {from: lc, to: lp}\n")
		switch next() % 3 {
		case 0:
			edges = append(edges, "  - {from: lb, to: lc}\n")
		case 1:
			edges = append(edges, "  - {from: lb, to: lc, when: \"has(nodes.lb.v) && nodes.lb.v == 0\"}\n", "  - {from: lb, to: lp}\n")
		default:
			edges = append(edges, "  - {from: lb, to: lc, when: \"nodes.lb.v == 0\"}\n")
		}
		edges = append(edges, []string{"  - {from: lp, to: lx}\n", "  - {from: lp, to: lx, when: \"nodes.lp.exhausted\"}\n"}[next()%2])
	}
	if len(edges) > 0 {
		b.WriteString("edges:\n" + strings.Join(edges, ""))
	}
	return b.String(), script, next() % 4
}

// FuzzMachine runs random graphs to the end and checks the invariants:
// every node ends in exactly one final state, no attempt starts twice,
// no node starts before its inputs allow it (sim checks both as it goes),
// the run ends with a status, and two runs of the same input agree.
func FuzzMachine(f *testing.F) {
	f.Add([]byte{3, 0, 1, 4, 4, 4, 0, 2, 2, 1, 0, 0, 2, 0, 3})
	f.Add([]byte{9, 1, 0, 3, 3, 1, 0, 1, 1, 2, 3, 0, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte("a random-ish seed with many bytes in it to make edges"))
	f.Fuzz(checkRandomFlow)
}

// TestRandomGraphs runs the fuzz body over fixed pseudo-random inputs, so
// plain `go test` covers many graphs too.
func TestRandomGraphs(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 1))
	for i := range 150 {
		data := make([]byte, 80)
		for j := range data {
			data[j] = byte(rng.IntN(256))
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkRandomFlow(t, data) })
	}
}

func checkRandomFlow(t *testing.T, data []byte) {
	{
		src, script, par := genFlow(data)
		if _, err := Parse("fuzz.yaml", []byte(src), Options{}); err != nil {
			if strings.Contains(err.Error(), "unreachable") {
				return // every path into a node passes a failing control.fail
			}
			t.Fatalf("generated flow does not load: %v\n%s", err, src)
		}
		var traces [2][]string
		for k := range traces {
			s := newSim(t, src, script)
			r := s.run(nil, par)
			if r.Status == RunRunning {
				t.Fatalf("run did not end\n%s", s.dump())
			}
			for _, n := range s.f.Nodes {
				st := r.Nodes[n.ID]
				if !st.Status.Final() {
					t.Fatalf("%s ends %s\n%s\n%s", n.ID, st.Status, src, s.dump())
				}
				inLoop := strings.HasPrefix(n.ID, "l") // ends in its last iteration's state
				if st.Status == NodeSkipped && s.starts[n.ID] > 0 && !inLoop {
					t.Fatalf("%s ran and is skipped\n%s", n.ID, s.dump())
				}
				if st.Status == NodeSucceeded && !Inline(n.Type) && s.starts[n.ID] == 0 {
					t.Fatalf("%s succeeded without running\n%s", n.ID, s.dump())
				}
			}
			if r.Status == RunSucceeded && r.Failed {
				t.Fatal("succeeded with an unhandled failure")
			}
			if s.trace[len(s.trace)-1] != "finish "+string(r.Status) {
				t.Fatalf("trace does not end with finish: %v", s.trace)
			}
			traces[k] = s.trace
		}
		if !slices.Equal(traces[0], traces[1]) {
			t.Fatalf("two runs differ:\n%v\n%v", traces[0], traces[1])
		}
	}
}

// FuzzParse: no input makes the loader panic, and what loads can start.
func FuzzParse(f *testing.F) {
	f.Add([]byte(okFlow))
	for _, name := range []string{"restart-web", "disk-cleanup", "wait-healthy"} {
		if b, err := os.ReadFile("../../configs/flows/" + name + ".yaml"); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("name: x\nversion: \"1\"\nnodes:\n  - {id: a, type: control.loop, config: {while: \"true\", max_iterations: 2}}\n  - {id: b, type: control.noop}\nedges:\n  - {from: a, to: b}\n  - {from: b, to: a}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fl, err := Parse("f.yaml", data, Options{Model: true})
		if err != nil {
			return
		}
		if _, _, err := NewMachine(fl).Start(nil, 2); err != nil && !strings.Contains(err.Error(), "required") {
			t.Fatalf("loaded flow does not start: %v", err)
		}
	})
}
