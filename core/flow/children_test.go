package flow

import (
	"strings"
	"testing"
)

// Subflows and foreach on the pure machine: a foreach's items are
// evaluated when it becomes ready (from inputs or an upstream output) and
// handed to the runtime with its start; anything but a list within the
// bound fails it before anything starts; the runtime's outputs —
// {outputs} of a subflow, {items, count} of a foreach — are what later
// edges and expressions read; a child's failure is an ordinary failure
// (retry, continue_on_error, fail-fast).
func TestChildNodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		src    string
		script map[string][]outcome
		want   string
		run    RunStatus
		trace  []string
		code   map[string]string // node → error code
	}{
		{
			name: "foreach items from an upstream output travel with the start",
			src: hdr + `nodes:
  - {id: list, type: data.json.parse, config: {text: "'[\"a\",\"b\"]'"}}
  - {id: each, type: control.foreach, config: {items: nodes.list.value, flow: one}}
edges:
  - {from: list, to: each}
`,
			script: map[string][]outcome{"list": {ok(`{"value":["a","b"]}`)}, "each": {ok(`{"items":[{"x":1},{"x":2}],"count":2}`)}},
			want:   "list=succeeded each=succeeded", run: RunSucceeded,
			trace: []string{`input each#1 ["a","b"]`},
		},
		{
			name: "foreach over an empty list still starts (the runtime ends it at once)",
			src: hdr + `inputs: {hosts: {type: list, default: []}}
nodes:
  - {id: each, type: control.foreach, config: {items: inputs.hosts, flow: one}}
`,
			script: map[string][]outcome{"each": {ok(`{"items":[],"count":0}`)}},
			want:   "each=succeeded", run: RunSucceeded,
			trace: []string{"input each#1 []"},
		},
		{
			name: "foreach items that are not a list fail it with code expression, nothing started",
			src: hdr + `nodes:
  - {id: n, type: control.noop, config: {value: "'web1'"}}
  - {id: each, type: control.foreach, config: {items: nodes.n.value, flow: one}}
edges:
  - {from: n, to: each}
`,
			script: map[string][]outcome{"n": {ok(`{"value":"web1"}`)}},
			want:   "n=succeeded each=failed", run: RunFailed,
			code: map[string]string{"each": CodeExpression},
		},
		{
			name: "foreach over the default bound (100) fails with code bound",
			src: hdr + `inputs: {hosts: {type: list}}
nodes:
  - {id: each, type: control.foreach, config: {items: inputs.hosts, flow: one}}
`,
			want: "each=failed", run: RunFailed,
			code: map[string]string{"each": CodeBound},
		},
		{
			name: "foreach over its bound with continue_on_error takes the handled branch",
			src: hdr + `inputs: {hosts: {type: list, default: [a, b, c]}}
nodes:
  - {id: each, type: control.foreach, config: {items: inputs.hosts, flow: one, max_items: 2}, policy: {continue_on_error: true}}
  - {id: fine, type: system.log, config: {message: fine}}
  - {id: tooMany, type: system.log, config: {message: "${{ nodes.each.error.code }}"}}
edges:
  - {from: each, to: fine, when: "!has(nodes.each.failed)"}
  - {from: each, to: tooMany, when: "has(nodes.each.failed) && nodes.each.error.code == 'bound'"}
`,
			want: "each=failed fine=skipped tooMany=succeeded", run: RunSucceeded,
			code: map[string]string{"each": CodeBound},
		},
		{
			name: "foreach output {items, count} routes the next edges",
			src: hdr + `inputs: {hosts: {type: list, default: [a, b]}}
nodes:
  - {id: each, type: control.foreach, config: {items: inputs.hosts, flow: one}}
  - {id: all, type: system.log, config: {message: "${{ nodes.each.count }}"}}
  - {id: some, type: system.log, config: {message: partial}}
edges:
  - {from: each, to: all, when: "nodes.each.count == size(inputs.hosts) && nodes.each.items.all(i, i.up.healthy)"}
  - {from: each, to: some, when: "!(nodes.each.count == size(inputs.hosts) && nodes.each.items.all(i, i.up.healthy))"}
`,
			script: map[string][]outcome{"each": {ok(`{"items":[{"up":{"healthy":true}},{"up":{"healthy":true}}],"count":2}`)}},
			want:   "each=succeeded all=succeeded some=skipped", run: RunSucceeded,
		},
		{
			name: "a child's failure is retried, then handled by continue_on_error",
			src: hdr + `nodes:
  - {id: sub, type: control.subflow, config: {flow: one}, policy: {retry: {max_attempts: 2}, continue_on_error: true}}
  - {id: rollback, type: system.log, config: {message: "${{ nodes.sub.error.message }}"}}
  - {id: report, type: system.log, config: {message: ok}}
edges:
  - {from: sub, to: rollback, when: "has(nodes.sub.failed)"}
  - {from: sub, to: report, when: "!has(nodes.sub.failed)"}
`,
			script: map[string][]outcome{"sub": {bad("child")}},
			want:   "sub=failed rollback=succeeded report=skipped", run: RunSucceeded,
			trace: []string{"start sub#1", "start sub#2"},
			code:  map[string]string{"sub": "child"},
		},
		{
			name: "a permanent child failure is not retried and fails fast",
			src: hdr + `nodes:
  - {id: sub, type: control.subflow, config: {flow: one}, policy: {retry: {max_attempts: 3}}}
  - {id: other, type: action.shell, config: {command: x}}
  - {id: after, type: system.log, config: {message: hi}}
edges:
  - {from: sub, to: after}
`,
			script: map[string][]outcome{"sub": {{fail: "child", perm: true}}, "other": {hang}},
			want:   "sub=failed other=cancelled after=cancelled", run: RunFailed,
			code: map[string]string{"sub": "child"},
		},
		{
			name: "a subflow output without the field read fails the source edge's node",
			src: hdr + `nodes:
  - {id: sub, type: control.subflow, config: {flow: one}}
  - {id: next, type: system.log, config: {message: hi}}
edges:
  - {from: sub, to: next, when: "nodes.sub.outputs.check.healthy"}
`,
			script: map[string][]outcome{"sub": {ok(`{"outputs":{}}`)}},
			want:   "sub=failed next=cancelled", run: RunFailed, // fail_fast: the unhandled failure cancels the rest
			code: map[string]string{"sub": CodeExpression},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, tc.src, tc.script)
			var inputs map[string]any
			if strings.Contains(tc.name, "default bound") {
				hosts := make([]any, DefaultMaxItems+1)
				for i := range hosts {
					hosts[i] = "h"
				}
				inputs = map[string]any{"hosts": hosts}
			}
			r := s.run(inputs, 0)
			if got := s.statuses(); got != tc.want {
				t.Errorf("statuses\n got %s\nwant %s\n%s", got, tc.want, s.dump())
			}
			if r.Status != tc.run {
				t.Errorf("run %s, want %s\n%s", r.Status, tc.run, s.dump())
			}
			for _, l := range tc.trace {
				if !s.has(l) {
					t.Errorf("trace lacks %q:\n%s", l, strings.Join(s.trace, "\n"))
				}
			}
			for node, code := range tc.code {
				if e := r.Nodes[node].Error; e == nil || e.Code != code {
					t.Errorf("%s: error %+v, want code %s", node, e, code)
				}
			}
			if tc.code["each"] != "" && !strings.Contains(tc.name, "continue_on_error") && s.starts["each"] != 0 {
				t.Errorf("each started %d times before failing on its items", s.starts["each"])
			}
		})
	}
}
