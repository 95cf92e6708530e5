package channeltest

import "testing/fstest"

// routedFlows is the flow the routed_flow_card scenario runs: one action
// the person who starts it may not approve.
var routedFlows = fstest.MapFS{"routed-echo.yaml": {Data: []byte(`name: routed-echo
version: "1"
description: Echo once; an owner elsewhere approves it.
nodes:
  - id: say
    type: action.shell
    config:
      command: "echo routed-flow"
      expect:
        - {name: exit code, exit_code: 0}
`)}}

// routedFlowStep: a flow an allowed person starts in the shared chat
// (which no owner has spoken in) asks for its step's approval where an
// owner can give it — a copy of the card in the owner's direct chat on
// another channel — and leaves a status card without buttons in the
// requesting chat; the owner's tap on the copy decides it once, the step
// runs once, and the copy and the status card both end in the final state
// (issue 28 point 1, for a flow step's card). It runs after
// approverElsewhere's /run, in its gateway (w.flows set before the start):
// one execution and one refused second tap were already counted.
func routedFlowStep(w *world) {
	routedRoundTrip(w, "/flow run routed-echo", "echo routed-flow", "the step's ", 2, 2)
}
