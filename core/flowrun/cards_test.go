package flowrun

import (
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/flow"
)

// The progress card shows one line per node: its mark, id, type and
// state, the attempt from the second on, and a final failure's code.
func TestProgressCardLines(t *testing.T) {
	f, err := flow.Parse("p.yaml", []byte(`name: p
version: "2"
nodes:
  - {id: a, type: control.wait, config: {duration: 1s}}
  - {id: b, type: control.wait, config: {duration: 1s}}
  - {id: c, type: control.wait, config: {duration: 1s}}
  - {id: d, type: control.wait, config: {duration: 1s}}
edges:
  - {from: a, to: b}
  - {from: a, to: c}
  - {from: c, to: d}
`), flow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fr := &flow.Run{Status: flow.RunRunning, Nodes: map[string]*flow.NodeState{
		"a": {Status: flow.NodeSucceeded, Attempt: 1},
		"b": {Status: flow.NodeBackoff, Attempt: 2, Error: &flow.NodeError{Code: "timeout"}},
		"c": {Status: flow.NodeFailed, Attempt: 3, Error: &flow.NodeError{Code: "declined"}},
		"d": {Status: flow.NodePending},
	}}
	c := progress("flow-x", "p", "2", "0123456789", f, fr)
	want := "✓ a (control.wait) — succeeded\n↻ b (control.wait) — backoff, attempt 2\n✗ c (control.wait) — failed, attempt 3: declined\n· d (control.wait) — pending"
	if c.Details != want {
		t.Errorf("details:\n%s\nwant:\n%s", c.Details, want)
	}
	if c.ID != "flow-x" || c.Status != cards.StatusRunning || c.Outcome != "Running: 2 of 4 nodes finished." || c.Intent != "Flow p v2 — run 01234567" {
		t.Errorf("card: %+v", c)
	}
}
