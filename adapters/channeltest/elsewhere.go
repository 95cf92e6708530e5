package channeltest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// Approvals routed to another channel (issue 28): the adapter under test
// is where a request is made; "elsewhere", a small in-memory channel, is
// where an owner has a direct conversation with Silas. The Other person
// is an allowed (auth) identity in these scenarios, who may ask but not
// approve what only an owner approves.

const (
	elsewhereName  core.ChannelName    = "elsewhere"
	elsewhereOwner core.IdentityID     = "elsewhere:owner"
	elsewhereDM    core.ConversationID = "elsewhere:dm-owner"
)

// elsewhere is the second channel: what it was sent, by message ref.
type elsewhere struct {
	mu   sync.Mutex
	msgs []core.OutMessage
}

func (e *elsewhere) Name() core.ChannelName { return elsewhereName }
func (e *elsewhere) Run(ctx context.Context, _ core.Inbox) error {
	<-ctx.Done()
	return nil
}
func (e *elsewhere) Send(_ context.Context, m core.OutMessage) (core.MessageRef, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.msgs = append(e.msgs, m)
	return core.MessageRef(fmt.Sprint(len(e.msgs) - 1)), nil
}
func (e *elsewhere) Update(_ context.Context, ref core.MessageRef, m core.OutMessage) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var i int
	if _, err := fmt.Sscan(string(ref), &i); err != nil || i >= len(e.msgs) {
		return &core.PermanentError{Err: fmt.Errorf("no message %s", ref)}
	}
	e.msgs[i] = m
	return nil
}

func (e *elsewhere) shown() []core.OutMessage {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.msgs)
}

// sayElsewhere delivers a turn from the elsewhere owner's direct chat.
func (w *world) sayElsewhere(text string, tap *core.Tap) {
	w.t.Helper()
	turn := core.Turn{Channel: elsewhereName, Conversation: elsewhereDM, Sender: elsewhereOwner, ChatKind: core.ChatDirect,
		EventID: "elsewhere-" + core.NewID(), Text: text, Tap: tap, Evidence: core.Evidence{Authenticated: true, Method: "test"}}
	if _, err := w.node.eng.Deliver(w.ctx, turn); err != nil {
		w.t.Fatalf("elsewhere: %v", err)
	}
}

// waitElsewhere waits until the elsewhere channel shows a message
// satisfying pred.
func (w *world) waitElsewhere(what string, pred func(core.OutMessage) bool) core.OutMessage {
	w.t.Helper()
	var got core.OutMessage
	w.eventually(what+" elsewhere", 30*time.Second, func() (bool, string) {
		msgs := w.elsewhere.shown()
		for _, m := range msgs {
			if pred(m) {
				got = m
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", msgs)
	})
	return got
}

// approverElsewhere: a request an allowed person makes in the shared chat
// (which no owner has spoken in) is shown there as a status card without
// buttons, and as a card in the owner's direct chat on another channel;
// the owner's tap there decides it once, and both cards end verified.
// A flow's step card the same person asks for then goes the same way
// (routedFlowStep), in the same gateway: make test's time.
func approverElsewhere(w *world) {
	w.routed, w.flows = true, routedFlows
	w.start(5 * time.Second)
	w.sayElsewhere("/whoami", nil)
	w.waitElsewhere("the owner's answer", func(m core.OutMessage) bool { return strings.Contains(m.Text, "owner trust") })
	routedRoundTrip(w, "/run echo approver-elsewhere", "echo approver-elsewhere", "", 1, 1)
	routedFlowStep(w)
}

// noApproverReachable: with no owner reachable on any channel, an allowed
// person's request is refused at once with the reason; nothing waits.
func noApproverReachable(w *world) {
	w.routed = true
	w.start(5 * time.Second)
	w.p.Say(w.t, Other, "/run echo nobody-can-approve")
	w.waitMessage("the refusal", func(m Message) bool {
		return m.Card == "" && strings.Contains(m.Text, "Nobody can approve") && strings.Contains(m.Text, "nothing is waiting")
	})
	if n := w.count(`SELECT count(*) FROM approvals`); n != 0 {
		w.t.Fatalf("%d approval requests stored; want none waiting", n)
	}
	if n := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'approval.unroutable'`); n != 1 {
		w.t.Fatalf("%d approval.unroutable entries; want 1", n)
	}
}

// deafChannel: the platform stops delivering events while its connection
// stays open; past the threshold the owner is told on another channel
// (elsewhere), once, and told again when it hears again.
func deafChannel(w *world) {
	d, ok := w.p.(Deafener)
	if !ok {
		w.t.Skip("this platform's fake cannot go deaf")
	}
	w.routed = true
	w.deafAfter = 3 * time.Second
	n := w.start(5 * time.Second)
	name := n.ch.Name()
	w.sayElsewhere("/whoami", nil)
	w.waitElsewhere("the owner's answer", func(m core.OutMessage) bool { return strings.Contains(m.Text, "owner trust") })
	w.p.Say(w.t, Approver, "/whoami")
	w.waitMessage("the answer on the channel", func(m Message) bool { return strings.Contains(m.Text, "owner trust") })
	d.Deafen(w.t, true)
	deaf := fmt.Sprintf("the %s channel has heard nothing", name)
	w.waitElsewhere("the owner told the channel is deaf", func(m core.OutMessage) bool { return strings.Contains(m.Text, deaf) })
	d.Deafen(w.t, false)
	again := fmt.Sprintf("the %s channel hears again", name)
	w.waitElsewhere("the owner told it hears again", func(m core.OutMessage) bool { return strings.Contains(m.Text, again) })
	told := 0
	for _, m := range w.elsewhere.shown() {
		if strings.Contains(m.Text, deaf) {
			told++
		}
	}
	if told != 1 {
		w.t.Fatalf("told %d times the channel is deaf; want once per incident", told)
	}
	if n := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'channel.deaf'`); n != 1 {
		w.t.Fatalf("%d channel.deaf entries; want 1", n)
	}
	w.p.Say(w.t, Approver, "/status")
	w.waitMessage("/status after recovery", func(m Message) bool {
		return strings.Contains(m.Text, "Channels:") && strings.Contains(m.Text, string(name)+": ok")
	})
}

// routedRoundTrip is one routed request end to end: Other says say in the
// shared chat; a status card without buttons appears there and a copy
// with choices in the owner's conversation elsewhere; the owner's tap on
// the copy runs cmd once, the copy and the status card both end verified,
// and a second tap decides nothing. refusals and executions are the
// running totals the scenario expects after it (what names the request
// in failure messages: "" for the /run, "the step's " for a flow step).
func routedRoundTrip(w *world, say, cmd, what string, refusals, executions int) {
	w.p.Say(w.t, Other, say)
	// Without buttons a platform's view may not know the card's id: the
	// status card is found by what it says.
	status := w.waitMessage(what+"status card", func(m Message) bool {
		return len(m.Buttons) == 0 && strings.Contains(m.Text, cmd) && strings.Contains(m.Text, "sent to elsewhere")
	})
	cp := w.waitElsewhere(what+"card", func(m core.OutMessage) bool {
		return m.Card != nil && m.Card.Command == cmd && len(m.Card.Choices) > 0
	})
	w.sayElsewhere("", &core.Tap{Card: cp.Card.ID, Choice: "approve"})
	w.waitElsewhere(what+"card verified", func(m core.OutMessage) bool {
		return m.Card != nil && m.Card.ID == cp.Card.ID && m.Card.Status == cards.StatusDone && len(m.Card.Choices) == 0
	})
	w.waitSame(status.ID, what+"status card verified", func(m Message) bool {
		return len(m.Buttons) == 0 && (m.Status == cards.StatusDone || strings.Contains(m.Text, "verified"))
	})
	w.sayElsewhere("", &core.Tap{Card: cp.Card.ID, Choice: "approve"}) // a second tap decides nothing
	w.eventually(what+"second tap refused", 30*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'approval.refused' AND data->>'reason' = 'already_decided'`)
		return n == refusals, fmt.Sprintf("%d refusals", n)
	})
	if n := w.count(`SELECT count(*) FROM executions`); n != executions {
		w.t.Fatalf("%d executions; want %d (each routed request once)", n, executions)
	}
}
