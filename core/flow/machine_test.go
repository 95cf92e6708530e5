package flow

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

const hdr = "name: t\nversion: \"1\"\n"

func TestMachine(t *testing.T) {
	for _, tc := range []struct {
		name        string
		src         string
		inputs      map[string]any
		script      map[string][]outcome
		maxParallel int
		cancelAt    int
		want        string // node statuses in flow order
		run         RunStatus
		trace       []string // lines the trace must contain
		notTrace    []string
		check       func(t *testing.T, s *sim)
	}{
		{
			name: "skip propagates down a chain",
			src: hdr + `inputs: {go: {type: bool, default: false}}
nodes:
  - {id: a, type: system.log, config: {message: hi}}
  - {id: b, type: system.log, config: {message: hi}}
  - {id: c, type: system.log, config: {message: hi}}
edges:
  - {from: a, to: b, when: inputs.go}
  - {from: b, to: c}
`,
			want: "a=succeeded b=skipped c=skipped", run: RunSucceeded,
			notTrace: []string{"start b#1", "start c#1"},
		},
		{
			name: "merge all with one branch skipped skips the join",
			src: hdr + `nodes:
  - {id: a, type: control.if, config: {condition: "true"}}
  - {id: b, type: system.log, config: {message: hi}}
  - {id: c, type: system.log, config: {message: hi}}
  - {id: d, type: system.log, config: {message: hi}}
edges:
  - {from: a, to: b, when: nodes.a.condition}
  - {from: a, to: c, when: "!nodes.a.condition"}
  - {from: b, to: d}
  - {from: c, to: d}
`,
			want: "a=succeeded b=succeeded c=skipped d=skipped", run: RunSucceeded,
		},
		{
			name: "diamond with merge any runs the join once",
			src: hdr + `nodes:
  - {id: a, type: system.log, config: {message: hi}}
  - {id: b, type: system.log, config: {message: hi}}
  - {id: c, type: system.log, config: {message: hi}}
  - {id: d, type: control.merge, config: {mode: any}}
  - {id: e, type: system.log, config: {message: hi}}
edges:
  - {from: a, to: b}
  - {from: a, to: c}
  - {from: b, to: d}
  - {from: c, to: d}
  - {from: d, to: e}
`,
			want: "a=succeeded b=succeeded c=succeeded d=succeeded e=succeeded", run: RunSucceeded,
			check: func(t *testing.T, s *sim) {
				// e (after the any-merge) starts before c finishes: b's edge was enough.
				if strings.Join(s.trace, ",") == "" || s.starts["e"] != 1 {
					t.Fatalf("e started %d times", s.starts["e"])
				}
			},
		},
		{
			name: "diamond with merge all waits for both",
			src: hdr + `nodes:
  - {id: a, type: system.log, config: {message: hi}}
  - {id: b, type: system.log, config: {message: hi}}
  - {id: c, type: system.log, config: {message: hi}}
  - {id: d, type: system.log, config: {message: hi}}
edges:
  - {from: a, to: b}
  - {from: a, to: c}
  - {from: b, to: d}
  - {from: c, to: d}
`,
			want: "a=succeeded b=succeeded c=succeeded d=succeeded", run: RunSucceeded,
		},
		{
			name: "merge any with every branch skipped is skipped",
			src: hdr + `nodes:
  - {id: a, type: system.log, config: {message: hi}}
  - {id: b, type: system.log, config: {message: hi}}
  - {id: c, type: system.log, config: {message: hi}}
  - {id: d, type: system.log, config: {message: hi}, policy: {merge: any}}
edges:
  - {from: a, to: b, when: "false && true"}
  - {from: a, to: c, when: "1 > 2"}
  - {from: b, to: d}
  - {from: c, to: d}
`,
			want: "a=succeeded b=skipped c=skipped d=skipped", run: RunSucceeded,
		},
		{
			name: "switch takes its default route",
			src: hdr + `inputs: {env: {type: string, default: lab}}
nodes:
  - id: sw
    type: control.switch
    config:
      value: inputs.env
      cases: [{when: "inputs.env == 'prod'", route: careful}, {when: "inputs.env == 'stage'", route: quick}]
      default: lab
  - {id: careful, type: system.log, config: {message: hi}}
  - {id: quick, type: system.log, config: {message: hi}}
  - {id: lab, type: system.log, config: {message: "${{ nodes.sw.value }}"}}
edges:
  - {from: sw, to: careful, when: "nodes.sw.route == 'careful'"}
  - {from: sw, to: quick, when: "nodes.sw.route == 'quick'"}
  - {from: sw, to: lab, when: "nodes.sw.route == 'lab'"}
`,
			want: "sw=succeeded careful=skipped quick=skipped lab=succeeded", run: RunSucceeded,
		},
		{
			name: "switch takes a matching case",
			src: hdr + `inputs: {env: {type: string, default: prod}}
nodes:
  - id: sw
    type: control.switch
    config:
      cases: [{when: "inputs.env == 'prod'", route: careful}]
      default: lab
  - {id: careful, type: system.log, config: {message: hi}}
  - {id: lab, type: system.log, config: {message: hi}}
edges:
  - {from: sw, to: careful, when: "nodes.sw.route == 'careful'"}
  - {from: sw, to: lab, when: "nodes.sw.route == 'lab'"}
`,
			want: "sw=succeeded careful=succeeded lab=skipped", run: RunSucceeded,
		},
		{
			name: "timeout stops the attempt and fails the node",
			src: hdr + `nodes:
  - {id: a, type: action.shell, config: {command: sleep 100}, policy: {timeout: 5s}}
  - {id: b, type: system.log, config: {message: hi}}
edges:
  - {from: a, to: b}
`,
			script: map[string][]outcome{"a": {hang}},
			want:   "a=failed b=cancelled", run: RunFailed,
			trace: []string{"timer timeout a +5s", "stop a#1 (timeout)", "finish failed"},
			check: func(t *testing.T, s *sim) {
				if e := s.r.Nodes["a"].Error; e == nil || e.Code != CodeTimeout {
					t.Fatalf("a's error %+v", e)
				}
			},
		},
		{
			name: "timeout is retried like a failure",
			src: hdr + `nodes:
  - {id: a, type: action.shell, config: {command: flaky}, policy: {timeout: 5s, retry: {max_attempts: 2, backoff: 1s}}}
`,
			script: map[string][]outcome{"a": {hang, ok(`{"exit_code": 0}`)}},
			want:   "a=succeeded", run: RunSucceeded,
			trace: []string{"stop a#1 (timeout)", "timer backoff a +1s", "start a#2"},
		},
		{
			name: "retry with exponential backoff and a cap",
			src: hdr + `nodes:
  - {id: a, type: action.shell, config: {command: flaky}, policy: {retry: {max_attempts: 4, backoff: 1s, max_backoff: 3s}}}
`,
			script: map[string][]outcome{"a": {bad("exit"), bad("exit"), bad("exit"), ok(`{}`)}},
			want:   "a=succeeded", run: RunSucceeded,
			trace: []string{"timer backoff a +1s", "timer backoff a +2s", "timer backoff a +3s", "start a#4"},
		},
		{
			name: "permanent failures are not retried",
			src: hdr + `nodes:
  - {id: a, type: action.shell, config: {command: rm}, policy: {retry: {max_attempts: 3, backoff: 1s}}}
`,
			script: map[string][]outcome{"a": {{fail: "declined", perm: true}}},
			want:   "a=failed", run: RunFailed,
			notTrace: []string{"start a#2"},
		},
		{
			name: "continue on error gives the marker and routes to the rollback",
			src: hdr + `nodes:
  - {id: deploy, type: action.shell, config: {command: deploy}, policy: {continue_on_error: true, retry: {max_attempts: 2, backoff: 1s}}}
  - {id: rollback, type: action.shell, config: {command: "rollback # ${{ nodes.deploy.error.code }}"}}
  - {id: notify, type: system.log, config: {message: done}}
edges:
  - {from: deploy, to: rollback, when: "has(nodes.deploy.failed) && nodes.deploy.failed"}
  - {from: deploy, to: notify, when: "!has(nodes.deploy.failed)"}
`,
			script: map[string][]outcome{"deploy": {bad("exit")}},
			want:   "deploy=failed rollback=succeeded notify=skipped", run: RunSucceeded,
			check: func(t *testing.T, s *sim) {
				var m map[string]any
				if err := json.Unmarshal(s.r.Nodes["deploy"].Output, &m); err != nil {
					t.Fatal(err)
				}
				e, _ := m["error"].(map[string]any)
				if m["failed"] != true || e["code"] != "exit" || e["message"] != "exit happened" || !s.r.Nodes["deploy"].Handled {
					t.Fatalf("marker %s", s.r.Nodes["deploy"].Output)
				}
			},
		},
		{
			name: "fail fast cancels the parallel branch and stops its attempt",
			src: hdr + `nodes:
  - {id: a, type: action.shell, config: {command: "false"}}
  - {id: b, type: action.shell, config: {command: sleep 100}}
  - {id: c, type: system.log, config: {message: after b}}
edges:
  - {from: b, to: c}
`,
			script: map[string][]outcome{"a": {bad("exit")}, "b": {hang}},
			want:   "a=failed b=cancelled c=cancelled", run: RunFailed,
			trace: []string{"stop b#1 (fail_fast: a failed (exit))", "finish failed"},
		},
		{
			name: "without fail fast other branches go on, the run still fails",
			src: hdr + `policy: {fail_fast: false}
nodes:
  - {id: a, type: action.shell, config: {command: "false"}}
  - {id: a2, type: system.log, config: {message: after a}}
  - {id: b, type: action.shell, config: {command: "true"}}
  - {id: c, type: system.log, config: {message: after b}}
edges:
  - {from: a, to: a2}
  - {from: b, to: c}
`,
			script: map[string][]outcome{"a": {bad("exit")}},
			want:   "a=failed a2=skipped b=succeeded c=succeeded", run: RunFailed,
		},
		{
			name: "a failing when fails its node",
			src: hdr + `nodes:
  - {id: a, type: system.log, config: {message: hi}}
  - {id: b, type: system.log, config: {message: hi}}
edges:
  - {from: a, to: b, when: "nodes.a.missing == 1"}
`,
			want: "a=failed b=cancelled", run: RunFailed,
			check: func(t *testing.T, s *sim) {
				if e := s.r.Nodes["a"].Error; e == nil || e.Code != CodeExpression || !strings.Contains(e.Message, "missing") {
					t.Fatalf("a's error %+v", e)
				}
			},
		},
		{
			name: "control.fail continued on error",
			src: hdr + `nodes:
  - {id: stop, type: control.fail, config: {message: "no ${{ 1 + 1 }}"}, policy: {continue_on_error: true}}
  - {id: b, type: system.log, config: {message: hi}}
edges:
  - {from: stop, to: b, when: "nodes.stop.error.message == 'no 2'"}
`,
			want: "stop=failed b=succeeded", run: RunSucceeded,
		},
		{
			name: "loop repeats its body until while is false",
			src: hdr + `nodes:
  - {id: start, type: system.log, config: {message: go}}
  - {id: again, type: control.loop, config: {while: "nodes.probe.status != 'ok'", max_iterations: 5}}
  - {id: probe, type: action.shell, config: {command: curl}}
  - {id: done, type: system.log, config: {message: "after ${{ nodes.again.iteration }}"}}
edges:
  - {from: start, to: again}
  - {from: again, to: probe}
  - {from: probe, to: again}
  - {from: again, to: done, when: "!nodes.again.exhausted"}
`,
			script: map[string][]outcome{"probe": {ok(`{"status":"down"}`), ok(`{"status":"down"}`), ok(`{"status":"ok"}`)}},
			want:   "start=succeeded again=succeeded probe=succeeded done=succeeded", run: RunSucceeded,
			check: func(t *testing.T, s *sim) {
				if s.starts["probe"] != 3 || string(s.r.Nodes["again"].Output) != `{"exhausted":false,"iteration":3}` {
					t.Fatalf("probe ran %d times, loop output %s", s.starts["probe"], s.r.Nodes["again"].Output)
				}
			},
		},
		{
			name: "loop stops at max_iterations",
			src: hdr + `nodes:
  - {id: again, type: control.loop, config: {while: "true", max_iterations: 3}}
  - {id: probe, type: action.shell, config: {command: curl}}
  - {id: gaveup, type: system.log, config: {message: gave up}}
edges:
  - {from: again, to: probe}
  - {from: probe, to: again}
  - {from: again, to: gaveup, when: "nodes.again.exhausted"}
`,
			want: "again=succeeded probe=succeeded gaveup=succeeded", run: RunSucceeded,
			check: func(t *testing.T, s *sim) {
				if s.starts["probe"] != 3 {
					t.Fatalf("probe ran %d times", s.starts["probe"])
				}
			},
		},
		{
			name: "a failed iteration fails the loop",
			src: hdr + `policy: {fail_fast: false}
nodes:
  - {id: again, type: control.loop, config: {while: "true", max_iterations: 3}}
  - {id: probe, type: action.shell, config: {command: curl}}
  - {id: after, type: system.log, config: {message: x}}
edges:
  - {from: again, to: probe}
  - {from: probe, to: again}
  - {from: again, to: after}
`,
			script: map[string][]outcome{"probe": {ok(`{}`), bad("exit")}},
			want:   "again=failed probe=failed after=skipped", run: RunFailed,
		},
		{
			name: "a loop whose body edge fails continues on error through its exits",
			src: hdr + `nodes:
  - {id: again, type: control.loop, config: {while: "true", max_iterations: 3}, policy: {continue_on_error: true}}
  - {id: probe, type: action.shell, config: {command: curl}}
  - {id: after, type: system.log, config: {message: "${{ nodes.again.error.code }}"}}
edges:
  - {from: again, to: probe, when: "nodes.again.nope == 1"}
  - {from: probe, to: again}
  - {from: again, to: after, when: "nodes.again.failed"}
`,
			want: "again=failed probe=skipped after=succeeded", run: RunSucceeded,
			notTrace: []string{"start probe#1"},
		},
		{
			name: "merge any starts on the first branch without waiting for the other",
			src: hdr + `nodes:
  - {id: a, type: system.log, config: {message: hi}}
  - {id: fast, type: system.log, config: {message: hi}}
  - {id: slow, type: action.shell, config: {command: x}, policy: {timeout: 5s, continue_on_error: true}}
  - {id: next, type: system.log, config: {message: hi}, policy: {merge: any}}
edges:
  - {from: a, to: fast}
  - {from: a, to: slow}
  - {from: fast, to: next}
  - {from: slow, to: next}
`,
			script: map[string][]outcome{"slow": {hang}},
			want:   "a=succeeded fast=succeeded slow=failed next=succeeded", run: RunSucceeded,
			check: func(t *testing.T, s *sim) {
				if i, j := slices.Index(s.trace, "start next#1"), slices.Index(s.trace, "stop slow#1 (timeout)"); i < 0 || j < 0 || i > j || s.starts["next"] != 1 {
					t.Fatalf("next must start once, before slow times out:\n%s", strings.Join(s.trace, "\n"))
				}
			},
		},
		{
			name: "foreach within its bound starts with the items",
			src: hdr + `inputs: {hosts: {type: list, default: [web1, web2]}}
nodes:
  - {id: each, type: control.foreach, config: {items: inputs.hosts, flow: restart-one, max_items: 2}}
`,
			want: "each=succeeded", run: RunSucceeded,
		},
		{
			name: "foreach over its bound fails without starting",
			src: hdr + `inputs: {hosts: {type: list, default: [web1, web2, web3]}}
nodes:
  - {id: each, type: control.foreach, config: {items: inputs.hosts, flow: restart-one, max_items: 2}, policy: {retry: {max_attempts: 3}}}
`,
			want: "each=failed", run: RunFailed,
			notTrace: []string{"start each#1"},
			check: func(t *testing.T, s *sim) {
				if e := s.r.Nodes["each"].Error; e == nil || e.Code != CodeBound {
					t.Fatalf("error %+v", e)
				}
			},
		},
		{
			name: "subflow outputs route the next edge",
			src: hdr + `nodes:
  - {id: sub, type: control.subflow, config: {flow: health, inputs: {host: "'web1'"}}}
  - {id: fine, type: system.log, config: {message: fine}}
  - {id: sick, type: system.log, config: {message: sick}}
edges:
  - {from: sub, to: fine, when: "nodes.sub.outputs.healthy"}
  - {from: sub, to: sick, when: "!nodes.sub.outputs.healthy"}
`,
			script: map[string][]outcome{"sub": {ok(`{"outputs":{"healthy":true}}`)}},
			want:   "sub=succeeded fine=succeeded sick=skipped", run: RunSucceeded,
		},
		{
			name: "parallel branches bounded by max_parallel",
			src: hdr + `nodes:
  - {id: a, type: action.shell, config: {command: x}}
  - {id: b, type: action.shell, config: {command: x}}
  - {id: c, type: action.shell, config: {command: x}}
  - {id: d, type: action.shell, config: {command: x}}
`,
			maxParallel: 2,
			want:        "a=succeeded b=succeeded c=succeeded d=succeeded", run: RunSucceeded,
			check: func(t *testing.T, s *sim) {
				if s.maxRun != 2 {
					t.Fatalf("%d attempts ran at once, want 2", s.maxRun)
				}
			},
		},
		{
			name: "cancel stops what runs and cancels the rest",
			src: hdr + `nodes:
  - {id: a, type: action.shell, config: {command: x}}
  - {id: b, type: action.shell, config: {command: x}}
edges:
  - {from: a, to: b}
`,
			script: map[string][]outcome{"a": {hang}}, cancelAt: 1,
			want: "a=cancelled b=cancelled", run: RunCancelled,
			trace: []string{"stop a#1 (cancelled: test)", "finish cancelled"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, tc.src, tc.script)
			s.cancelAt = tc.cancelAt
			r := s.run(tc.inputs, tc.maxParallel)
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
			for _, l := range tc.notTrace {
				if s.has(l) {
					t.Errorf("trace has %q:\n%s", l, strings.Join(s.trace, "\n"))
				}
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// Precedence, event by event: a result after its attempt's timeout is
// stale; a timeout after the result is stale; cancel beats both and no
// retry follows it.
func TestPrecedence(t *testing.T) {
	src := hdr + `nodes:
  - {id: a, type: action.shell, config: {command: x}, policy: {timeout: 5s, retry: {max_attempts: 3, backoff: 1s}}}
`
	f, err := Parse("t.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMachine(f)
	t0 := time.Unix(0, 0)
	step := func(r *Run, ev Event) (*Run, Transition) {
		t.Helper()
		r2, tr, err := m.Step(r, ev)
		if err != nil {
			t.Fatal(err)
		}
		return r2, tr
	}
	r, tr, err := m.Start(nil, 0)
	if err != nil || len(tr.Commands) != 1 || tr.Commands[0].Kind != CmdStart {
		t.Fatalf("start: %+v %v", tr, err)
	}
	r, _ = step(r, Event{Kind: EvStarted, Node: "a", Attempt: 1, At: t0})

	t.Run("result after timeout is stale", func(t *testing.T) {
		r1, tr := step(r, Event{Kind: EvTimer, Timer: TimerTimeout, Node: "a", Attempt: 1, At: t0.Add(5 * time.Second)})
		if r1.Nodes["a"].Status != NodeBackoff || tr.Commands[0].Kind != CmdStop {
			t.Fatalf("after timeout: %s %+v", r1.Nodes["a"].Status, tr.Commands)
		}
		r2, tr := step(r1, Event{Kind: EvSucceeded, Node: "a", Attempt: 1, At: t0.Add(6 * time.Second)})
		if tr.Ignored == "" || r2.Nodes["a"].Status != NodeBackoff {
			t.Fatalf("late result taken: %+v", tr)
		}
	})
	t.Run("timeout after result is stale", func(t *testing.T) {
		r1, _ := step(r, Event{Kind: EvSucceeded, Node: "a", Attempt: 1, At: t0.Add(time.Second)})
		r2, tr := step(r1, Event{Kind: EvTimer, Timer: TimerTimeout, Node: "a", Attempt: 1, At: t0.Add(5 * time.Second)})
		if tr.Ignored == "" || r2.Status != RunSucceeded {
			t.Fatalf("late timeout taken: %+v %s", tr, r2.Status)
		}
	})
	t.Run("cancel beats timeout and retry", func(t *testing.T) {
		r1, tr := step(r, Event{Kind: EvCancel, Reason: "stop", At: t0.Add(time.Second)})
		if r1.Status != RunCancelled || tr.Commands[0].Kind != CmdStop {
			t.Fatalf("cancel: %s %+v", r1.Status, tr.Commands)
		}
		_, tr = step(r1, Event{Kind: EvTimer, Timer: TimerTimeout, Node: "a", Attempt: 1, At: t0.Add(5 * time.Second)})
		if tr.Ignored == "" || len(tr.Commands) != 0 {
			t.Fatalf("timeout after cancel acted: %+v", tr)
		}
	})
	t.Run("the input run is never changed", func(t *testing.T) {
		if r.Nodes["a"].Status != NodeRunning || r.Seq != 2 {
			t.Fatalf("run changed: %+v", r.Nodes["a"])
		}
	})
	t.Run("events that cannot belong to the run are errors", func(t *testing.T) {
		for _, ev := range []Event{
			{Kind: "exploded", Node: "a", Attempt: 1},
			{Kind: EvSucceeded, Node: "ghost", Attempt: 1},
			{Kind: EvTimer, Node: "a", Attempt: 1},
			{Kind: EvSucceeded, Node: "a", Attempt: 1, Output: []byte("{not json")},
		} {
			if _, _, err := m.Step(r, ev); err == nil {
				t.Errorf("%+v accepted", ev)
			}
		}
	})
	t.Run("another flow version is refused", func(t *testing.T) {
		other := *r
		other.FlowHash = "x"
		if _, _, err := m.Step(&other, Event{Kind: EvCancel}); err == nil {
			t.Fatal("stepped a run of another flow version")
		}
	})
}

func TestRetryDelay(t *testing.T) {
	r := Retry{MaxAttempts: 10, Backoff: time.Second, MaxBackoff: 10 * time.Second}
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, r.Delay(n))
	}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("delays %v", got)
		}
	}
	if d := (Retry{Backoff: time.Hour}).Delay(100); d <= 0 {
		t.Fatalf("uncapped delay overflowed: %v", d)
	}
}
