package flow

import (
	"strings"
	"testing"
)

const okFlow = `name: restart-web
version: "1"
description: restart and check
inputs:
  host: {type: string, default: web1}
  tries: {type: int, default: 3}
policy: {fail_fast: true}
nodes:
  - id: restart
    type: action.shell
    config:
      command: "systemctl restart nginx # on ${{ inputs.host }}"
      expect: [{exit_code: 0}]
    policy: {timeout: 30s, retry: {max_attempts: 3, backoff: 1s, max_backoff: 10s}}
  - id: check
    type: control.if
    config: {condition: "nodes.restart.exit_code == 0"}
  - id: done
    type: system.log
    config: {message: "ok ${{ nodes.restart.exit_code }}"}
  - id: rollback
    type: action.shell
    config: {command: "rollback"}
edges:
  - {from: restart, to: check}
  - {from: check, to: done, when: "nodes.check.condition"}
  - {from: check, to: rollback, when: "!nodes.check.condition"}
`

func TestLoadOK(t *testing.T) {
	f, err := Parse("ok.yaml", []byte(okFlow), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "restart-web" || len(f.Nodes) != 4 || len(f.Edges) != 3 || !f.FailFast {
		t.Fatalf("loaded %+v", f)
	}
	r := f.Node("restart").Policy
	if r.Timeout.String() != "30s" || r.Retry.MaxAttempts != 3 || r.Retry.MaxBackoff.String() != "10s" {
		t.Fatalf("policy %+v", r)
	}
	got, err := f.Node("restart").Templates["command"].Render(Scope{Inputs: map[string]any{"host": "web2"}})
	if err != nil || got != "systemctl restart nginx # on web2" {
		t.Fatalf("render = %q, %v", got, err)
	}
}

// Each bad file must name the file, the line and the field.
func TestLoadErrors(t *testing.T) {
	head := "name: x\nversion: \"1\"\n"
	for _, tc := range []struct {
		name, src, want string
		opts            Options
	}{
		{name: "unknown type", src: head + "nodes:\n  - id: a\n    type: control.iff\n", want: `f.yaml:5: nodes.a.type: unknown node type "control.iff"`},
		{name: "dangling edge", src: head + "nodes:\n  - {id: a, type: control.noop}\nedges:\n  - {from: a, to: b}\n", want: `f.yaml:6: edges[0].to: no node "b" (dangling edge)`},
		{name: "cycle", src: head + "nodes:\n  - {id: s, type: control.noop}\n  - {id: a, type: control.noop}\n  - {id: b, type: control.noop}\nedges:\n  - {from: s, to: a}\n  - {from: a, to: b}\n  - {from: b, to: a}\n", want: "edges: cycle outside control.loop through a, b"},
		{name: "unreachable after fail", src: head + "nodes:\n  - {id: a, type: control.fail, config: {message: no}}\n  - {id: b, type: control.noop}\nedges:\n  - {from: a, to: b}\n", want: "f.yaml:5: nodes.b: unreachable"},
		{name: "unreachable constant false", src: head + "nodes:\n  - {id: a, type: control.noop}\n  - {id: b, type: control.noop}\nedges:\n  - {from: a, to: b, when: \"false\"}\n", want: "nodes.b: unreachable"},
		{name: "bad expression", src: head + "nodes:\n  - {id: a, type: control.noop}\n  - {id: b, type: control.noop}\nedges:\n  - {from: a, to: b, when: \"nodes.a.x ==\"}\n", want: "f.yaml:7: edges[0].when: bad expression"},
		{name: "non-bool when", src: head + "nodes:\n  - {id: a, type: control.noop}\n  - {id: b, type: control.noop}\nedges:\n  - {from: a, to: b, when: \"1 + 2\"}\n", want: "is int, want bool"},
		{name: "unknown input in expr", src: head + "nodes:\n  - {id: a, type: control.if, config: {condition: \"inputs.nope\"}}\n", want: "nodes.a.config.condition: bad expression"},
		{name: "typed input misuse", src: head + "inputs:\n  n: {type: int}\nnodes:\n  - {id: a, type: control.if, config: {condition: \"inputs.n == 'x'\"}}\n", want: "nodes.a.config.condition: bad expression"},
		{name: "downstream read", src: head + "nodes:\n  - {id: a, type: control.if, config: {condition: \"nodes.b.ok\"}}\n  - {id: b, type: control.noop}\nedges:\n  - {from: a, to: b}\n", want: "reads nodes.b, which is not upstream of a"},
		{name: "input wrong type", src: head + "inputs:\n  n: {type: int, default: \"three\"}\nnodes:\n  - {id: a, type: control.noop}\n", want: `f.yaml:4: inputs.n.default: the string "three" is not a int`},
		{name: "input bad type", src: head + "inputs:\n  n: {type: integer}\nnodes:\n  - {id: a, type: control.noop}\n", want: `inputs.n.type: "integer" is not a type`},
		{name: "agent without model", src: head + "nodes:\n  - {id: a, type: agent.run, config: {goal: fix it}}\n", want: "nodes.a.type: agent.run needs a model, and none is configured"},
		{name: "bad json schema", src: head + "nodes:\n  - id: a\n    type: data.validate\n    config:\n      value: \"1\"\n      schema: {type: 7}\n", want: "f.yaml:8: nodes.a.config.schema: not a JSON Schema"},
		{name: "remote schema ref", src: head + "nodes:\n  - id: a\n    type: data.validate\n    config:\n      value: \"1\"\n      schema: {$ref: \"https://example.org/s.json\"}\n", want: "nodes.a.config.schema: not a JSON Schema"},
		{name: "missing config", src: head + "nodes:\n  - {id: a, type: action.shell}\n", want: "nodes.a.config.command: missing"},
		{name: "unknown config key", src: head + "nodes:\n  - id: a\n    type: action.shell\n    config:\n      command: ls\n      shell: bash\n", want: "f.yaml:8: nodes.a.config.shell: unknown key for action.shell"},
		{name: "loop without bound", src: head + "nodes:\n  - {id: l, type: control.loop, config: {while: \"true\"}}\n  - {id: b, type: control.noop}\nedges:\n  - {from: l, to: b}\n  - {from: b, to: l}\n", want: "nodes.l.config.max_iterations: missing"},
		{name: "loop body leak", src: head + "nodes:\n  - {id: l, type: control.loop, config: {while: \"true\", max_iterations: 3}}\n  - {id: b, type: control.noop}\n  - {id: c, type: control.noop}\nedges:\n  - {from: l, to: b}\n  - {from: b, to: l}\n  - {from: b, to: c}\n", want: "edges[2]: leaves the body of loop l"},
		{name: "bad duration", src: head + "nodes:\n  - {id: a, type: action.shell, config: {command: ls}, policy: {timeout: soon}}\n", want: `nodes.a.policy.timeout: "soon": want a positive duration`},
		{name: "retry on inline", src: head + "nodes:\n  - {id: a, type: control.noop, policy: {retry: {max_attempts: 2}}}\n", want: "timeout and retry do not apply"},
		{name: "bad id", src: head + "nodes:\n  - {id: my-step, type: control.noop}\n", want: `nodes[0].id: "my-step"`},
		{name: "gate unanswerable", src: head + "nodes:\n  - {id: g, type: control.gate, config: {prompt: proceed}}\n", want: "a gate needs choices or allow_text"},
		{name: "http url", src: head + "nodes:\n  - {id: h, type: action.http, config: {url: \"ftp://x\"}}\n", want: `nodes.h.config.url: "ftp://x" is not an http(s) URL`},
		{name: "http headers not a mapping", src: head + "nodes:\n  - {id: h, type: action.http, config: {url: \"https://x\", headers: [a]}}\n", want: "nodes.h.config.headers: must be a mapping"},
		{name: "http header not a string", src: head + "nodes:\n  - {id: h, type: action.http, config: {url: \"https://x\", headers: {a: [1]}}}\n", want: "nodes.h.config.headers.a: must be a string"},
		{name: "template unclosed", src: head + "nodes:\n  - {id: a, type: system.log, config: {message: \"${{ inputs\"}}\n", want: "not closed"},
		{name: "not yaml", src: "name: [\n", want: "f.yaml: not YAML"},
		{name: "unknown top key", src: head + "steps: []\nnodes:\n  - {id: a, type: control.noop}\n", want: "f.yaml:3: steps: unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.src), tc.opts)
			if err == nil {
				t.Fatalf("loaded; want error %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error:\n%v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestAgentWithModel(t *testing.T) {
	src := "name: x\nversion: \"1\"\nnodes:\n  - {id: a, type: agent.run, config: {goal: fix it}}\n"
	if _, err := Parse("f.yaml", []byte(src), Options{Model: true}); err != nil {
		t.Fatal(err)
	}
}

func TestBindInputs(t *testing.T) {
	f, err := Parse("ok.yaml", []byte(okFlow), Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := f.ParseArgs([]string{"tries=5"})
	if err != nil || in["tries"] != int64(5) || in["host"] != "web1" {
		t.Fatalf("inputs %v, %v", in, err)
	}
	for _, bad := range [][]string{{"tries=five"}, {"nope=1"}, {"tries"}} {
		if _, err := f.ParseArgs(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestExprErrorsAreValues(t *testing.T) {
	f, err := Parse("ok.yaml", []byte(okFlow), Options{CostLimit: 50})
	if err != nil {
		t.Fatal(err)
	}
	x := f.Edges[1].When
	if _, err := x.EvalBool(Scope{}); err == nil {
		t.Fatal("missing node output evaluated without error")
	}
	if _, err := x.EvalBool(Scope{Nodes: map[string]any{"check": map[string]any{"condition": "yes"}}}); err == nil {
		t.Fatal("string condition evaluated as bool")
	}
	env, _ := newExprEnv(nil, nil, 50)
	costly, err := env.compile("[1,2,3,4,5,6,7,8,9,10].map(x, [1,2,3,4,5,6,7,8,9,10].map(y, x*y)).size() > 0", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := costly.Eval(Scope{}); err == nil || !strings.Contains(err.Error(), "cost") {
		t.Fatalf("over the cost limit: %v", err)
	}
}
