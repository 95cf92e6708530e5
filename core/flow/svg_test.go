package flow

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The run's picture: well-formed SVG with no script or external
// reference, one box per node carrying its state, rows following the
// edges, a loop's back edge dashed, labels escaped.
func TestWriteSVG(t *testing.T) {
	lib, err := LoadLibrary([]Source{{Label: "configs/flows", FS: os.DirFS("../../configs/flows")}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flow   string
		states map[string]NodeStatus
		want   map[string]string // node → state shown
		dashed int
	}{
		{flow: "restart-web", states: map[string]NodeStatus{"confirm": NodeSucceeded, "restart": NodeRunning},
			want: map[string]string{"confirm": "succeeded", "restart": "running", "health": "pending", "rollback": "pending"}},
		{flow: "wait-healthy", states: map[string]NodeStatus{"poll": NodeLooping, "probe": NodeFailed, "pause": NodeBackoff},
			want: map[string]string{"poll": "looping", "probe": "failed", "pause": "backoff", "up": "pending"}, dashed: 2},
	} {
		t.Run(tc.flow, func(t *testing.T) {
			f := lib.Flows[tc.flow]
			var b bytes.Buffer
			if err := WriteSVG(&b, f, tc.states); err != nil {
				t.Fatal(err)
			}
			svg := b.String()
			dec := xml.NewDecoder(strings.NewReader(svg))
			for {
				if _, err := dec.Token(); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("not well-formed: %v\n%s", err, svg)
				}
			}
			for _, bad := range []string{"<script", "href=\"http", "<style", "<foreignObject", "onload"} {
				if strings.Contains(svg, bad) {
					t.Fatalf("the picture contains %q", bad)
				}
			}
			for node, st := range tc.want {
				if !strings.Contains(svg, `data-node="`+node+`" data-state="`+st+`"`) {
					t.Errorf("node %s not shown %s:\n%s", node, st, svg)
				}
			}
			if n := len(regexp.MustCompile(`<g data-node=`).FindAllString(svg, -1)); n != len(f.Nodes) {
				t.Errorf("%d boxes for %d nodes", n, len(f.Nodes))
			}
			if n := strings.Count(svg, "stroke-dasharray"); n != tc.dashed {
				t.Errorf("%d dashed (back) edges, want %d", n, tc.dashed)
			}
			row, back := f.layers()
			for i, e := range f.Edges {
				if !back[i] && row[e.To] <= row[e.From] {
					t.Errorf("edge %s → %s does not go down (%d → %d)", e.From, e.To, row[e.From], row[e.To])
				}
			}
		})
	}
	// Ids and types are escaped (a flow's text is data).
	f := &Flow{Name: "x<y", Version: "1", Nodes: []*Node{{ID: "a", Type: "<b>&"}}}
	var b bytes.Buffer
	if err := WriteSVG(&b, f, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "<b>&") || !strings.Contains(b.String(), "&lt;b&gt;&amp;") {
		t.Fatalf("not escaped: %s", b.String())
	}
}
