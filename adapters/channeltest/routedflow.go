package channeltest

import (
	"fmt"
	"strings"
	"testing/fstest"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

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
	w.p.Say(w.t, Other, "/flow run routed-echo")
	status := w.waitMessage("the step's status card", func(m Message) bool {
		return len(m.Buttons) == 0 && strings.Contains(m.Text, "echo routed-flow") && strings.Contains(m.Text, "sent to elsewhere")
	})
	cp := w.waitElsewhere("the step's card", func(m core.OutMessage) bool {
		return m.Card != nil && m.Card.Command == "echo routed-flow" && len(m.Card.Choices) > 0
	})
	w.sayElsewhere("", &core.Tap{Card: cp.Card.ID, Choice: "approve"})
	w.waitElsewhere("the step's card verified", func(m core.OutMessage) bool {
		return m.Card != nil && m.Card.ID == cp.Card.ID && m.Card.Status == cards.StatusDone && len(m.Card.Choices) == 0
	})
	w.waitSame(status.ID, "the step's status card verified", func(m Message) bool {
		return len(m.Buttons) == 0 && (m.Status == cards.StatusDone || strings.Contains(m.Text, "verified"))
	})
	w.sayElsewhere("", &core.Tap{Card: cp.Card.ID, Choice: "approve"}) // a second tap decides nothing
	w.eventually("the step's second tap refused", 30*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'approval.refused' AND data->>'reason' = 'already_decided'`)
		return n == 2, fmt.Sprintf("%d refusals", n)
	})
	if n := w.count(`SELECT count(*) FROM executions`); n != 2 {
		w.t.Fatalf("%d executions; want the /run's and the step's, once each", n)
	}
}
