package llm_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/gateway"
)

// TestTaskStepRoutedToTheOwner: a task an allowed person asks for in a
// chat no owner has spoken in proposes its step where an owner can decide
// it — a copy of the card in the owner's own direct chat — and leaves a
// status card without buttons in the requesting chat; the owner's tap on
// the copy runs the step once, the task finishes, and the copy and the
// status card both end in the final state (issue 28 point 1, for a task's
// card). Checked to fail with the task runtime's Router unset.
func TestTaskStepRoutedToTheOwner(t *testing.T) {
	t.Parallel()
	h := setupTasks(t, taskOpts{configure: func(c *gateway.Config) { c.Allowed = []core.IdentityID{friend} }})
	const dm core.ConversationID = "test:dm-owner"
	say := func(from core.IdentityID, conv core.ConversationID, kind string, text string, tap *core.Tap) {
		t.Helper()
		h.n++
		if _, err := h.eng.Deliver(h.ctx, core.Turn{Channel: "test", Conversation: conv, Sender: from, ChatKind: kind,
			EventID: fmt.Sprintf("routed-%d", h.n), Text: text, Tap: tap, Evidence: core.Evidence{Authenticated: true, Method: "test"}}); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
	}
	say(owner, dm, core.ChatDirect, "/whoami", nil)
	h.ch.waitFor(t, "the owner's answer", func(m []core.OutMessage) bool { return hasText(m, "owner trust") })

	h.fake.Script(planTaskCall("say hi"), planReply("title: Say hi\nsteps: [Say hi]\n"), shellCall(`["echo","hi"]`), stepDone("said hi"))
	say(friend, "test:chat", core.ChatGroup, "say hi", nil)
	in := func(conv core.ConversationID, pred func(*cards.Card) bool) func([]core.OutMessage) bool {
		return func(msgs []core.OutMessage) bool {
			for _, m := range msgs {
				if m.Conversation == conv && m.Card != nil && m.Card.Command == "echo hi" && pred(m.Card) {
					return true
				}
			}
			return false
		}
	}
	h.ch.waitFor(t, "the step's status card in the requesting chat", in("test:chat", func(c *cards.Card) bool {
		return len(c.Choices) == 0 && strings.Contains(c.Outcome, "sent to test")
	}))
	var cp *cards.Card
	h.ch.waitFor(t, "the step's card in the owner's direct chat", func(msgs []core.OutMessage) bool {
		for _, m := range msgs {
			if m.Conversation == dm && m.Card != nil && m.Card.Command == "echo hi" && m.Card.Status == cards.StatusPending {
				cp = m.Card
				return true
			}
		}
		return false
	})
	if n := h.executions(t); n != 0 {
		t.Fatalf("%d executions before the tap", n)
	}
	say(owner, dm, core.ChatDirect, "", &core.Tap{Card: cp.ID, Choice: "approve"})
	h.ch.waitFor(t, "the summary", func(m []core.OutMessage) bool { return hasText(m, "Done: Say hi ✓") })
	done := func(c *cards.Card) bool { return c.Status == cards.StatusDone && len(c.Choices) == 0 }
	h.ch.waitFor(t, "the copy final", in(dm, done))
	h.ch.waitFor(t, "the status card final", in("test:chat", done))
	if n := h.executions(t); n != 1 {
		t.Fatalf("%d executions; want exactly one", n)
	}
}
