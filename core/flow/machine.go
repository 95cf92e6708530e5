package flow

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Machine advances runs of one pinned flow. It holds no run state and is
// safe for concurrent use; Step never mutates the run it is given.
type Machine struct {
	f *Flow
}

// NewMachine returns the machine of a loaded flow.
func NewMachine(f *Flow) *Machine { return &Machine{f: f} }

// DefaultMaxItems bounds a foreach without max_items.
const DefaultMaxItems = 100

// Start begins a run: inputs are bound (defaults, types), the starting
// nodes are decided, and the first commands returned.
func (m *Machine) Start(inputs map[string]any, maxParallel int) (*Run, Transition, error) {
	in, err := m.f.BindInputs(inputs)
	if err != nil {
		return nil, Transition{}, err
	}
	r := &Run{V: StateVersion, Flow: m.f.Name, FlowHash: m.f.Hash, Inputs: in, Status: RunRunning,
		MaxParallel: maxParallel, Nodes: map[string]*NodeState{}, Edges: make([]EdgeStatus, len(m.f.Edges))}
	for _, n := range m.f.Nodes {
		r.Nodes[n.ID] = &NodeState{Status: NodePending}
	}
	for i := range r.Edges {
		r.Edges[i] = EdgePending
	}
	s := &step{m: m, r: r}
	s.settle()
	r.Seq = 1
	return r, Transition{Seq: 1, Commands: s.cmds}, nil
}

// Step applies one event to a copy of r and returns it with the
// transition. Stale events (another attempt than the node's current one,
// a run already over) change nothing but Seq and say why in Ignored.
// Errors are for events that cannot belong to this run at all.
func (m *Machine) Step(r *Run, ev Event) (*Run, Transition, error) {
	if r.V != StateVersion {
		return nil, Transition{}, fmt.Errorf("flow: run state version %d, want %d", r.V, StateVersion)
	}
	if r.FlowHash != m.f.Hash {
		return nil, Transition{}, errors.New("flow: the run was started with another version of the flow (it is pinned by hash)")
	}
	switch ev.Kind {
	case EvCancel:
	case EvStarted, EvSucceeded, EvFailed, EvTimer, EvSkip:
		if _, ok := r.Nodes[ev.Node]; !ok || m.f.Node(ev.Node) == nil {
			return nil, Transition{}, fmt.Errorf("flow: event about unknown node %q", ev.Node)
		}
	default:
		return nil, Transition{}, fmt.Errorf("flow: unknown event kind %q", ev.Kind)
	}
	if ev.Kind == EvTimer && ev.Timer != TimerTimeout && ev.Timer != TimerBackoff {
		return nil, Transition{}, fmt.Errorf("flow: unknown timer kind %q", ev.Timer)
	}
	// The output is stored as it is: it must be JSON, or the run could no
	// longer be stored.
	if len(ev.Output) > 0 && !json.Valid(ev.Output) {
		return nil, Transition{}, fmt.Errorf("flow: %s's output is not JSON", ev.Node)
	}
	if ev.Error != nil {
		e := *ev.Error
		ev.Error = &e
	}
	s := &step{m: m, r: r.clone(), ev: ev, own: map[string]bool{}}
	s.r.Seq++
	s.apply()
	if s.ignored == "" {
		s.settle()
	}
	return s.r, Transition{Seq: s.r.Seq, Event: ev, Commands: s.cmds, Ignored: s.ignored}, nil
}

// step is one transition in progress.
type step struct {
	m       *Machine
	r       *Run
	ev      Event
	cmds    []Command
	ignored string
	scope   map[string]any // nodes.<id> values, built on first use
	// own are the nodes whose state this step copied from the run it was
	// given (copy on write: a step changes a few nodes, and copying all
	// of a long flow's on every step was most of its cost); nil when the
	// step owns them all (a new run).
	own map[string]bool
}

// ns is node id's state, to change: the step's own copy.
func (s *step) ns(id string) *NodeState {
	st := s.r.Nodes[id]
	if s.own == nil || s.own[id] || st == nil {
		return st
	}
	c := *st
	if st.Error != nil {
		e := *st.Error
		c.Error = &e
	}
	s.r.Nodes[id] = &c
	s.own[id] = true
	return &c
}

// peek is node id's state, only to read.
func (s *step) peek(id string) *NodeState { return s.r.Nodes[id] }

func (s *step) apply() {
	ev := s.ev
	if s.r.Status != RunRunning {
		s.ignored = "run is over (" + string(s.r.Status) + ")"
		return
	}
	if ev.Kind == EvCancel {
		s.r.Status = RunCancelled
		s.r.Reason = "cancelled: " + ev.Reason
		s.cancelAll(s.r.Reason)
		return
	}
	n, st := s.m.f.Node(ev.Node), s.ns(ev.Node)
	current := ev.Iteration == st.Iteration && ev.Attempt == st.Attempt
	if ev.Kind == EvSkip {
		s.personSkip(n, st, current)
		return
	}
	switch {
	case ev.Kind == EvTimer && ev.Timer == TimerBackoff:
		if st.Status != NodeBackoff || !current {
			s.ignored = "stale backoff timer"
			return
		}
		st.Status = NodeReady
		return
	case st.Status != NodeRunning || !current:
		s.ignored = fmt.Sprintf("stale event: %s is %s at iteration %d attempt %d", ev.Node, st.Status, st.Iteration, st.Attempt)
		return
	}
	switch ev.Kind {
	case EvStarted:
		if n.Policy.Timeout > 0 {
			s.cmds = append(s.cmds, Command{Kind: CmdTimer, Node: n.ID, Iteration: st.Iteration, Attempt: st.Attempt,
				Timer: TimerTimeout, At: ev.At.Add(n.Policy.Timeout)})
		} else {
			s.ignored = "no timeout to arm"
		}
	case EvSucceeded:
		s.succeed(n, ev.Output)
	case EvFailed:
		e := ev.Error
		if e == nil {
			e = &NodeError{Code: "failed", Message: "the attempt failed"}
		}
		s.fail(n, e, ev.Output)
	case EvTimer:
		// A timeout is a failed attempt: it is stopped, then retried like
		// any failure while attempts remain.
		s.cmds = append(s.cmds, Command{Kind: CmdStop, Node: n.ID, Iteration: st.Iteration, Attempt: st.Attempt, Reason: CodeTimeout})
		s.fail(n, &NodeError{Code: CodeTimeout, Message: fmt.Sprintf("attempt %d ran longer than %s", st.Attempt, n.Policy.Timeout)}, nil)
	}
}

// personSkip applies EvSkip: only a node on the frontier (ready, running,
// waiting to retry) at the attempt the event names is skipped.
func (s *step) personSkip(n *Node, st *NodeState, current bool) {
	switch {
	case !current:
		s.ignored = fmt.Sprintf("stale skip: %s is at iteration %d attempt %d", n.ID, st.Iteration, st.Attempt)
		return
	case st.Status != NodeReady && st.Status != NodeRunning && st.Status != NodeBackoff:
		s.ignored = fmt.Sprintf("%s is %s: only a ready, running or retrying node is skipped", n.ID, st.Status)
		return
	}
	if st.Status == NodeRunning {
		s.cmds = append(s.cmds, Command{Kind: CmdStop, Node: n.ID, Iteration: st.Iteration, Attempt: st.Attempt, Reason: "skipped: " + s.ev.Reason})
	}
	out := s.ev.Output
	if len(out) == 0 {
		out = mustJSON(map[string]any{"skipped": true, "reason": s.ev.Reason})
	}
	st.Status, st.Output, st.Error = NodeSkipped, out, nil
	s.setScope(n.ID)
	for _, ei := range s.m.f.out[s.m.f.index[n.ID]] {
		e := s.m.f.Edges[ei]
		s.r.Edges[ei] = EdgeFired
		if e.When == nil {
			continue
		}
		if ok, err := e.When.EvalBool(s.scopeNow()); err != nil || !ok {
			s.r.Edges[ei] = EdgeSkipped
		}
	}
}

// nodes returns the nodes.<id> values of expressions: finished nodes'
// outputs, {skipped: true} for skipped ones, a looping loop's progress.
func (s *step) nodes() map[string]any {
	if s.scope != nil {
		return s.scope
	}
	s.scope = map[string]any{}
	for _, n := range s.m.f.Nodes {
		s.setScope(n.ID)
	}
	return s.scope
}

func (s *step) setScope(id string) {
	if s.scope == nil {
		return
	}
	st := s.peek(id)
	delete(s.scope, id)
	switch {
	case st.Status == NodeSkipped:
		s.scope[id] = map[string]any{"skipped": true}
	case st.Status == NodeSucceeded || st.Status == NodeLooping || st.Status == NodeFailed && st.Handled:
		v, err := decodeJSON(st.Output)
		if err == nil && v != nil {
			s.scope[id] = v
		} else if err == nil {
			s.scope[id] = map[string]any{}
		}
	}
}

// Scope is what expressions of a run see now (the runtime evaluates work
// nodes' config expressions with it).
func (m *Machine) Scope(r *Run) Scope {
	s := &step{m: m, r: r}
	return Scope{Inputs: r.Inputs, Nodes: s.nodes()}
}

func (s *step) scopeNow() Scope { return Scope{Inputs: s.r.Inputs, Nodes: s.nodes()} }

func (s *step) setOutput(id string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{}`)
	}
	s.ns(id).Output = b
	s.setScope(id)
}

func (s *step) succeed(n *Node, out json.RawMessage) {
	st := s.ns(n.ID)
	if len(out) == 0 {
		out = json.RawMessage(`{}`)
	}
	st.Status, st.Output, st.Error = NodeSucceeded, out, nil
	s.setScope(n.ID)
	s.decide(n, s.m.f.out[s.m.f.index[n.ID]])
}

// decide evaluates edges out of a finished node. An edge whose when fails
// to evaluate is skipped and fails the node (code expression); the other
// edges keep their decision if the node continues on error.
func (s *step) decide(n *Node, edges []int) {
	var bad []string
	for _, ei := range edges {
		e := s.m.f.Edges[ei]
		if e.When == nil {
			s.r.Edges[ei] = EdgeFired
			continue
		}
		ok, err := e.When.EvalBool(s.scopeNow())
		if err != nil {
			bad = append(bad, fmt.Sprintf("edge to %s: %v", e.To, err))
			s.r.Edges[ei] = EdgeSkipped
			continue
		}
		s.r.Edges[ei] = EdgeSkipped
		if ok {
			s.r.Edges[ei] = EdgeFired
		}
	}
	if len(bad) > 0 {
		st := s.ns(n.ID)
		prev := st.Output
		st.Status = NodeRunning // fail() finishes it
		s.fail(n, &NodeError{Code: CodeExpression, Message: fmt.Sprint(bad), Permanent: true}, prev)
	}
}

// fail handles a failed attempt, in this order: retry while attempts
// remain (not for permanent errors), then continue_on_error, then the
// unhandled failure (its edges skipped; fail_fast cancels the rest).
func (s *step) fail(n *Node, e *NodeError, out json.RawMessage) {
	st := s.ns(n.ID)
	if !e.Permanent && !Inline(n.Type) && st.Attempt < n.Policy.Retry.MaxAttempts {
		st.Error = e
		if d := n.Policy.Retry.Delay(st.Attempt); d > 0 {
			st.Status = NodeBackoff
			s.cmds = append(s.cmds, Command{Kind: CmdTimer, Node: n.ID, Iteration: st.Iteration, Attempt: st.Attempt,
				Timer: TimerBackoff, At: s.ev.At.Add(d)})
		} else {
			st.Status = NodeReady
		}
		return
	}
	st.Status, st.Error = NodeFailed, e
	outs := s.m.f.out[s.m.f.index[n.ID]]
	if ls := s.m.f.loops[s.m.f.index[n.ID]]; ls != nil {
		// A failed loop starts no further iteration: its body, pending
		// whenever a loop can fail, is skipped; only its exits remain.
		for _, ei := range ls.enter {
			s.r.Edges[ei] = EdgeSkipped
		}
		outs = ls.exit
	}
	if n.Policy.ContinueOnError {
		st.Handled = true
		marker := map[string]any{"failed": true, "error": map[string]any{"code": e.Code, "message": e.Message}}
		if v, err := decodeJSON(out); err == nil && v != nil {
			marker["output"] = v
		}
		s.setOutput(n.ID, marker)
		// Edges a failing when already decided keep their decision.
		var pending []int
		for _, ei := range outs {
			if s.r.Edges[ei] == EdgePending {
				pending = append(pending, ei)
			}
		}
		s.decide(n, pending)
		return
	}
	st.Output = out
	s.setScope(n.ID)
	for _, ei := range s.m.f.out[s.m.f.index[n.ID]] {
		s.r.Edges[ei] = EdgeSkipped
	}
	s.r.Failed = true
	if s.m.f.FailFast {
		s.r.Reason = fmt.Sprintf("fail_fast: %s failed (%s)", n.ID, e.Code)
		s.cancelAll(s.r.Reason)
	}
}

// cancelAll ends every node that has not: running attempts get a stop.
func (s *step) cancelAll(reason string) {
	for _, n := range s.m.f.Nodes {
		if s.peek(n.ID).Status.Final() {
			continue
		}
		st := s.ns(n.ID)
		if st.Status == NodeRunning {
			s.cmds = append(s.cmds, Command{Kind: CmdStop, Node: n.ID, Iteration: st.Iteration, Attempt: st.Attempt, Reason: reason})
		}
		st.Status = NodeCancelled
		st.Error = &NodeError{Code: CodeCancelled, Message: reason}
		s.setScope(n.ID)
	}
}

// settle decides everything the last change made decidable, starts what
// the parallel bound allows and ends the run when every node is final.
func (s *step) settle() {
	f := s.m.f
	for changed := true; changed && s.r.Status == RunRunning; {
		changed = false
		for v, n := range f.Nodes {
			switch s.peek(n.ID).Status {
			case NodeLooping:
				changed = s.loopTurn(v, n) || changed
			case NodePending:
				changed = s.ready(v, n) || changed
			}
		}
	}
	if s.r.Status == RunRunning {
		s.startReady()
	}
	for _, st := range s.r.Nodes {
		if !st.Status.Final() {
			return
		}
	}
	if s.r.Status == RunRunning {
		s.r.Status = RunSucceeded
		if s.r.Failed {
			s.r.Status = RunFailed
		}
	}
	if !slices.ContainsFunc(s.cmds, func(c Command) bool { return c.Kind == CmdFinish }) {
		s.cmds = append(s.cmds, Command{Kind: CmdFinish, Status: s.r.Status, Reason: s.r.Reason})
	}
}

// incoming lists the edges that decide a pending node: a loop's entry
// edges (its back edges drive its later iterations), else all.
func (s *step) incoming(v int) []int {
	if ls := s.m.f.loops[v]; ls != nil {
		return ls.entry
	}
	return s.m.f.in[v]
}

// ready applies the readiness rule to a pending node; true if it changed.
func (s *step) ready(v int, n *Node) bool {
	fired, pending := 0, 0
	in := s.incoming(v)
	for _, ei := range in {
		switch s.r.Edges[ei] {
		case EdgeFired:
			fired++
		case EdgePending:
			pending++
		}
	}
	run := len(in) == 0
	switch n.Policy.Merge {
	case MergeAny:
		if fired > 0 {
			run = true
		} else if pending > 0 {
			return false
		}
	default:
		if pending > 0 {
			return false
		}
		if fired == len(in) {
			run = true
		}
	}
	if !run {
		s.skip(v, n)
		return true
	}
	s.run(v, n)
	return true
}

func (s *step) skip(v int, n *Node) {
	st := s.ns(n.ID)
	st.Status = NodeSkipped
	s.setScope(n.ID)
	for _, ei := range s.m.f.out[v] {
		s.r.Edges[ei] = EdgeSkipped
	}
}

// run begins a node that may run: inline control nodes are decided now,
// work nodes become ready for a slot.
func (s *step) run(v int, n *Node) {
	st := s.ns(n.ID)
	// Only the inline nodes below read the scope: building it decodes every
	// finished node's output, a cost per step that grows with the flow,
	// not to be paid for a work node that only becomes ready. (n is
	// pending, so it has no entry in the scope whether it is built before
	// or after n is marked running.)
	var sc Scope
	switch n.Type {
	case "control.if", "control.switch", "control.fail", "control.foreach":
		sc = s.scopeNow()
	}
	st.Status = NodeRunning // inline nodes pass through running to final
	switch n.Type {
	case "control.noop":
		s.succeed(n, mustJSON(map[string]any{"value": n.Config["value"]}))
	case "control.merge":
		s.succeed(n, mustJSON(map[string]any{"merged": true}))
	case "control.if":
		b, err := n.Exprs["condition"].EvalBool(sc)
		if err != nil {
			s.fail(n, &NodeError{Code: CodeExpression, Message: err.Error(), Permanent: true}, nil)
			return
		}
		s.succeed(n, mustJSON(map[string]any{"condition": b}))
	case "control.switch":
		s.doSwitch(n, sc)
	case "control.fail":
		msg, err := n.Templates["message"].Render(sc)
		if err != nil {
			msg = err.Error()
		}
		s.fail(n, &NodeError{Code: CodeFail, Message: msg, Permanent: true}, nil)
	case "control.loop":
		s.iterate(v, n, 1)
	case "control.foreach":
		s.foreach(n, sc)
	default:
		st.Status = NodeReady
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

func (s *step) doSwitch(n *Node, sc Scope) {
	var value any
	if x := n.Exprs["value"]; x != nil {
		v, err := x.Eval(sc)
		if err != nil {
			s.fail(n, &NodeError{Code: CodeExpression, Message: err.Error(), Permanent: true}, nil)
			return
		}
		value = v
	}
	route, _ := n.Config["default"].(string)
	cases, _ := n.Config["cases"].([]any)
	for i, c := range cases {
		ok, err := n.Exprs[fmt.Sprintf("cases[%d].when", i)].EvalBool(sc)
		if err != nil {
			s.fail(n, &NodeError{Code: CodeExpression, Message: err.Error(), Permanent: true}, nil)
			return
		}
		if ok {
			cm, _ := c.(map[string]any)
			route, _ = cm["route"].(string)
			break
		}
	}
	s.succeed(n, mustJSON(map[string]any{"route": route, "value": value}))
}

func (s *step) foreach(n *Node, sc Scope) {
	st := s.ns(n.ID)
	v, err := n.Exprs["items"].Eval(sc)
	if err != nil {
		s.fail(n, &NodeError{Code: CodeExpression, Message: err.Error(), Permanent: true}, nil)
		return
	}
	items, ok := v.([]any)
	if !ok {
		s.fail(n, &NodeError{Code: CodeExpression, Message: fmt.Sprintf("items is %s, not a list", describe(v)), Permanent: true}, nil)
		return
	}
	limit := int64(DefaultMaxItems)
	if m, ok := n.Config["max_items"].(int64); ok {
		limit = m
	}
	if int64(len(items)) > limit {
		s.fail(n, &NodeError{Code: CodeBound, Message: fmt.Sprintf("%d items, more than max_items %d", len(items), limit), Permanent: true}, nil)
		return
	}
	st.Input = mustJSON(items)
	st.Status = NodeReady
}

// startReady orders attempts for ready nodes, in flow order, while the
// parallel bound allows.
func (s *step) startReady() {
	running := 0
	for _, st := range s.r.Nodes {
		if st.Status == NodeRunning {
			running++
		}
	}
	for _, n := range s.m.f.Nodes {
		if s.peek(n.ID).Status != NodeReady {
			continue
		}
		if s.r.MaxParallel > 0 && running >= s.r.MaxParallel {
			return
		}
		st := s.ns(n.ID)
		running++
		st.Status = NodeRunning
		st.Attempt++
		s.cmds = append(s.cmds, Command{Kind: CmdStart, Node: n.ID, Iteration: st.Iteration, Attempt: st.Attempt, Input: st.Input})
	}
}

// iterate begins iteration i of loop v: its body is reset to pending and
// its edges into the body decided.
func (s *step) iterate(v int, n *Node, i int) {
	ls := s.m.f.loops[v]
	st := s.ns(n.ID)
	st.Status, st.Iteration = NodeLooping, i
	s.setOutput(n.ID, map[string]any{"iteration": i, "exhausted": false})
	for b := range ls.body {
		id := s.m.f.Nodes[b].ID
		*s.ns(id) = NodeState{Status: NodePending, Iteration: i}
		s.setScope(id)
		for _, ei := range s.m.f.out[b] {
			s.r.Edges[ei] = EdgePending
		}
	}
	for _, ei := range ls.enter {
		s.r.Edges[ei] = EdgePending
	}
	// decide only the edges into the body; exits wait for the last turn
	s.decideLoop(n, ls.enter)
}

func (s *step) decideLoop(n *Node, edges []int) {
	st := s.ns(n.ID)
	prev := st.Status
	st.Status = NodeSucceeded // decide() reads the loop's output
	s.decide(n, edges)
	if st.Status == NodeSucceeded {
		st.Status = prev
	}
}

// loopTurn ends an iteration once every body node is final and every back
// edge decided: do-while, so while sees the body's outputs.
func (s *step) loopTurn(v int, n *Node) bool {
	ls := s.m.f.loops[v]
	failed := false
	for b := range ls.body {
		bs := s.peek(s.m.f.Nodes[b].ID)
		if !bs.Status.Final() {
			return false
		}
		failed = failed || bs.Status == NodeFailed && !bs.Handled
	}
	for _, ei := range ls.back {
		if s.r.Edges[ei] == EdgePending {
			return false
		}
	}
	st := s.ns(n.ID)
	if failed {
		st.Status = NodeRunning
		s.fail(n, &NodeError{Code: CodeBodyFailed, Message: fmt.Sprintf("iteration %d failed", st.Iteration), Permanent: true}, st.Output)
		return true
	}
	again, err := n.Exprs["while"].EvalBool(s.scopeNow())
	if err != nil {
		st.Status = NodeRunning
		s.fail(n, &NodeError{Code: CodeExpression, Message: err.Error(), Permanent: true}, st.Output)
		return true
	}
	limit, _ := n.Config["max_iterations"].(int64)
	if again && int64(st.Iteration) < limit {
		s.iterate(v, n, st.Iteration+1)
		return true
	}
	st.Status = NodeSucceeded
	s.setOutput(n.ID, map[string]any{"iteration": st.Iteration, "exhausted": again})
	s.decide(n, ls.exit)
	return true
}
