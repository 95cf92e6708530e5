package flowrun

import (
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core/flow"
)

// A flow step's preview names its node and what the argv was resolved
// from: each template as written and the run's inputs.
func TestStepPreview(t *testing.T) {
	t.Parallel()
	n := &flow.Node{ID: "restart", Type: "action.shell",
		Templates: map[string]*flow.Template{"command": {Src: "systemctl restart ${{ inputs.service }}"}}}
	got := stepPreview(n, flow.Command{Iteration: 0, Attempt: 2}, map[string]any{"service": "nginx", "force": true})
	for _, want := range []string{"node restart (action.shell), iteration 0, attempt 2",
		"As written: command: systemctl restart ${{ inputs.service }}", `Input force = true`, `Input service = "nginx"`} {
		if !strings.Contains(got, want) {
			t.Fatalf("preview %q lacks %q", got, want)
		}
	}
}
