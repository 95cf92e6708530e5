package flowrun

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/silas-gateway/silas/core/flow"
)

// stepPreview names a flow step for its card's preview (issue 28 point 5:
// "for a flow step, its node and inputs"): the node, its iteration and
// attempt, each ${{ }} template of its configuration as the flow file
// writes it, and the run's inputs — what the argv that follows was
// resolved from. The proposer signs it with the request.
func stepPreview(n *flow.Node, c flow.Command, inputs map[string]any) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s (%s), iteration %d, attempt %d", n.ID, n.Type, c.Iteration, c.Attempt)
	for _, field := range slices.Sorted(maps.Keys(n.Templates)) {
		fmt.Fprintf(&b, "\nAs written: %s: %s", field, n.Templates[field].Src)
	}
	for _, k := range slices.Sorted(maps.Keys(inputs)) {
		v, err := json.Marshal(inputs[k])
		if err != nil {
			v = []byte(fmt.Sprint(inputs[k]))
		}
		fmt.Fprintf(&b, "\nInput %s = %s", k, v)
	}
	return b.String()
}
