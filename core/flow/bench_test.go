package flow

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkStep100 is the machine's share of one transition on a 100-node
// flow (a chain of ten fans of ten): one succeeded event, state copied.
// The runtime's storage cost comes on top once it exists.
func BenchmarkStep100(b *testing.B) {
	var src strings.Builder
	src.WriteString("name: bench\nversion: \"1\"\nnodes:\n")
	var edges []string
	for i := range 100 {
		fmt.Fprintf(&src, "  - {id: n%d, type: action.shell, config: {command: x}}\n", i)
		if i >= 10 {
			edges = append(edges, fmt.Sprintf("  - {from: n%d, to: n%d, when: \"has(nodes.n%d.ok)\"}\n", i-10, i, i-10))
		}
	}
	src.WriteString("edges:\n" + strings.Join(edges, ""))
	f, err := Parse("bench.yaml", []byte(src.String()), Options{})
	if err != nil {
		b.Fatal(err)
	}
	m := NewMachine(f)
	r, _, err := m.Start(nil, 0)
	if err != nil {
		b.Fatal(err)
	}
	ev := Event{Kind: EvSucceeded, Node: "n0", Attempt: 1, At: time.Unix(0, 0), Output: []byte(`{"ok":true}`)}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := m.Step(r, ev); err != nil {
			b.Fatal(err)
		}
	}
}
