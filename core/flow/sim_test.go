package flow

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// outcome is what the simulated runtime does with one attempt; a node's
// script lists the outcomes of its 1st, 2nd, … start (retries and loop
// iterations alike), the last one repeating.
type outcome struct {
	out  string // JSON output on success
	fail string // error code: the attempt fails
	hang bool   // never answers (only a timeout ends it)
	perm bool
}

func ok(out string) outcome   { return outcome{out: out} }
func bad(code string) outcome { return outcome{fail: code} }

var hang = outcome{hang: true}

// sim drives a machine like the runtime would: it runs each start
// command's scripted outcome, delivers timers in time order on a fake
// clock, and records a trace. It checks the invariants as it goes.
type sim struct {
	t        *testing.T
	m        *Machine
	f        *Flow
	r        *Run
	script   map[string][]outcome // node → outcome per attempt (last repeats)
	now      time.Time
	trace    []string
	queue    []Event
	timers   []Event
	started  map[string]bool // node/iteration/attempt
	starts   map[string]int  // node → starts so far
	running  int
	maxRun   int
	cancelAt int // cancel the run after this many transitions (0: never)
}

func newSim(t *testing.T, src string, script map[string][]outcome) *sim {
	t.Helper()
	f, err := Parse("t.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &sim{t: t, m: NewMachine(f), f: f, script: script, now: time.Unix(1_700_000_000, 0).UTC(), started: map[string]bool{}, starts: map[string]int{}}
}

func (s *sim) run(inputs map[string]any, maxParallel int) *Run {
	s.t.Helper()
	r, tr, err := s.m.Start(inputs, maxParallel)
	if err != nil {
		s.t.Fatal(err)
	}
	s.r = r
	s.handle(tr)
	for steps := 0; ; steps++ {
		if steps > 10_000 {
			s.t.Fatal("run does not end")
		}
		var ev Event
		switch {
		case s.cancelAt > 0 && steps >= s.cancelAt:
			s.cancelAt = 0
			ev = Event{Kind: EvCancel, Reason: "test"}
		case len(s.queue) > 0:
			ev, s.queue = s.queue[0], s.queue[1:]
		case len(s.timers) > 0:
			sort.SliceStable(s.timers, func(i, j int) bool { return s.timers[i].At.Before(s.timers[j].At) })
			ev, s.timers = s.timers[0], s.timers[1:]
			if ev.At.After(s.now) {
				s.now = ev.At
			}
		default:
			if s.r.Status == RunRunning {
				s.t.Fatalf("stuck: nothing to deliver, run %s\n%s", s.r.Status, s.dump())
			}
			return s.r
		}
		ev.At = s.now
		given, _ := json.Marshal(s.r)
		r, tr, err := s.m.Step(s.r, ev)
		if err != nil {
			s.t.Fatal(err)
		}
		// Step never mutates the run it is given (it copies a node's state
		// on write): the runtime steps again from a run it holds.
		if after, _ := json.Marshal(s.r); string(after) != string(given) {
			s.t.Fatalf("Step changed the run it was given:\n%s\n%s", given, after)
		}
		s.roundTrip(r)
		s.transitionTrip(tr)
		s.r = r
		if ev.Kind == EvSucceeded || ev.Kind == EvFailed {
			if tr.Ignored == "" {
				s.running--
			}
		}
		s.handle(tr)
	}
}

// roundTrip checks the state survives JSON (the runtime stores it).
func (s *sim) roundTrip(r *Run) {
	b, err := json.Marshal(r)
	if err != nil {
		s.t.Fatal(err)
	}
	back, err := DecodeRun(b)
	if err != nil {
		s.t.Fatal(err)
	}
	b2, _ := json.Marshal(back)
	if string(b) != string(b2) {
		s.t.Fatalf("run changes across JSON:\n%s\n%s", b, b2)
	}
}

// transitionTrip checks a transition survives JSON unchanged.
func (s *sim) transitionTrip(tr Transition) {
	b, err := json.Marshal(tr)
	if err != nil {
		s.t.Fatal(err)
	}
	var back Transition
	if err := json.Unmarshal(b, &back); err != nil {
		s.t.Fatal(err)
	}
	b2, _ := json.Marshal(back)
	if string(b) != string(b2) {
		s.t.Fatalf("transition changes across JSON:\n%s\n%s", b, b2)
	}
}

func (s *sim) handle(tr Transition) {
	for _, c := range tr.Commands {
		switch c.Kind {
		case CmdStart:
			key := fmt.Sprintf("%s/%d/%d", c.Node, c.Iteration, c.Attempt)
			if s.started[key] {
				s.t.Fatalf("attempt %s started twice", key)
			}
			s.started[key] = true
			s.checkInputs(c.Node)
			s.running++
			if s.running > s.maxRun {
				s.maxRun = s.running
			}
			s.trace = append(s.trace, fmt.Sprintf("start %s#%d", c.Node, c.Attempt))
			if len(c.Input) > 0 {
				s.trace = append(s.trace, fmt.Sprintf("input %s#%d %s", c.Node, c.Attempt, c.Input))
			}
			s.starts[c.Node]++
			oc := s.outcome(c.Node, s.starts[c.Node])
			base := Event{Node: c.Node, Iteration: c.Iteration, Attempt: c.Attempt}
			st := base
			st.Kind = EvStarted
			s.queue = append(s.queue, st)
			switch {
			case oc.hang:
			case oc.fail != "":
				base.Kind, base.Error = EvFailed, &NodeError{Code: oc.fail, Message: oc.fail + " happened", Permanent: oc.perm}
				s.queue = append(s.queue, base)
			default:
				base.Kind, base.Output = EvSucceeded, json.RawMessage(oc.out)
				if oc.out == "" {
					base.Output = json.RawMessage(`{}`)
				}
				s.queue = append(s.queue, base)
			}
		case CmdTimer:
			s.trace = append(s.trace, fmt.Sprintf("timer %s %s +%s", c.Timer, c.Node, c.At.Sub(s.now)))
			s.timers = append(s.timers, Event{Kind: EvTimer, Node: c.Node, Iteration: c.Iteration, Attempt: c.Attempt, Timer: c.Timer, At: c.At})
		case CmdStop:
			s.running--
			s.trace = append(s.trace, fmt.Sprintf("stop %s#%d (%s)", c.Node, c.Attempt, c.Reason))
		case CmdFinish:
			s.trace = append(s.trace, "finish "+string(c.Status))
		}
	}
}

func (s *sim) outcome(node string, nth int) outcome {
	oc := s.script[node]
	if len(oc) == 0 {
		return ok(`{}`)
	}
	return oc[min(nth, len(oc))-1]
}

// checkInputs: a node starts only once its incoming edges allow it.
func (s *sim) checkInputs(id string) {
	v := s.f.index[id]
	fired, pending := 0, 0
	for _, ei := range s.m.f.in[v] {
		switch s.r.Edges[ei] {
		case EdgeFired:
			fired++
			from := s.r.Nodes[s.f.Edges[ei].From]
			if from.Status != NodeSucceeded && !(from.Status == NodeFailed && from.Handled) && from.Status != NodeLooping {
				s.t.Fatalf("%s started after a fired edge from %s, which is %s", id, s.f.Edges[ei].From, from.Status)
			}
		case EdgePending:
			pending++
		}
	}
	n := s.f.Node(id)
	if len(s.m.f.in[v]) > 0 && fired == 0 {
		s.t.Fatalf("%s started with no fired incoming edge", id)
	}
	if n.Policy.Merge == MergeAll && pending > 0 && s.f.loops[v] == nil {
		s.t.Fatalf("%s (merge all) started with %d undecided incoming edges", id, pending)
	}
}

func (s *sim) dump() string {
	b, _ := json.MarshalIndent(s.r, "", " ")
	return string(b) + "\n" + strings.Join(s.trace, "\n")
}

// statuses is "id=status" for every node, in flow order.
func (s *sim) statuses() string {
	var out []string
	for _, n := range s.f.Nodes {
		out = append(out, n.ID+"="+string(s.r.Nodes[n.ID].Status))
	}
	return strings.Join(out, " ")
}

func (s *sim) has(line string) bool { return slices.Contains(s.trace, line) }
