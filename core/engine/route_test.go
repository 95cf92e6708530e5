package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/gateway"
)

// routed is a test bundle with a second channel "wa" where the owner has a
// direct conversation.
type routed struct {
	*bundle
	wa renamed
}

func setupRouted(t *testing.T, ownerDM bool, opts ...func(*gateway.Config)) routed {
	t.Helper()
	ch := newFakeChannel()
	wa := renamed{newFakeChannel(), "wa"}
	b := setupAccess(t, ch, ch, "", append([]func(*gateway.Config){func(c *gateway.Config) { c.Channels = append(c.Channels, wa) }}, opts...)...)
	if ownerDM {
		b.deliver(t, core.Turn{Channel: "wa", Conversation: "wa:owner", Sender: owner, ChatKind: core.ChatDirect, Text: "/whoami"})
		wa.waitFor(t, "the owner's answer on wa", func(msgs []core.OutMessage) bool { return len(msgs) == 1 })
	}
	return routed{b, wa}
}

func (b *bundle) deliver(t *testing.T, turn core.Turn) {
	t.Helper()
	b.seq++
	turn.EventID = "r" + string(rune('a'+b.seq%26)) + string(turn.Conversation) + string(rune('0'+b.seq/26))
	turn.Evidence = core.Evidence{Authenticated: true, Method: "test"}
	if _, err := b.eng.Deliver(context.Background(), turn); err != nil {
		t.Fatal(err)
	}
}

// TestApproverElsewhere: an auth user's request in a group no owner spoke
// in goes to the owner's direct conversation on another channel; the group
// gets a status card without buttons; the owner's tap there decides once,
// and the copy and the status card both end verified.
func TestApproverElsewhere(t *testing.T) {
	t.Parallel()
	b := setupRouted(t, true)
	b.deliver(t, core.Turn{Channel: "test", Conversation: "test:group", Sender: "test:friend", ChatKind: core.ChatGroup, Text: "/run echo routed"})
	msgs := b.ch.waitFor(t, "the status card", func(msgs []core.OutMessage) bool { return len(msgs) == 1 })
	status := msgs[0].Card
	if status == nil || len(status.Choices) != 0 || !strings.Contains(status.Outcome, "sent to wa") {
		t.Fatalf("status card: %s", dump(msgs))
	}
	copies := b.wa.waitFor(t, "the copy", func(msgs []core.OutMessage) bool { return len(msgs) == 2 })
	cp := copies[1]
	if cp.Conversation != "wa:owner" || cp.Card == nil || cp.Card.ID != status.ID || len(cp.Card.Choices) == 0 {
		t.Fatalf("copy: %s", dump(copies))
	}
	// Someone in the group cannot decide it (the friend may not; a tap
	// from the requesting conversation is checked like any).
	b.deliver(t, core.Turn{Channel: "test", Conversation: "test:group", Sender: "test:friend", ChatKind: core.ChatGroup,
		Tap: &core.Tap{Card: status.ID, Choice: "approve"}})
	b.deliver(t, core.Turn{Channel: "wa", Conversation: "wa:owner", Sender: owner, ChatKind: core.ChatDirect,
		Tap: &core.Tap{Card: status.ID, Choice: "approve"}})
	b.wa.waitFor(t, "the copy verified", func(msgs []core.OutMessage) bool {
		return len(msgs) == 2 && msgs[1].Card.Status == cards.StatusDone && strings.Contains(msgs[1].Card.Output, "routed")
	})
	b.waitStatus(t, status.ID, cards.StatusDone)
	if c := b.waitStatus(t, status.ID, cards.StatusDone); len(c.Choices) != 0 {
		t.Fatalf("the status card shows choices %v", c.Choices)
	}
	// A second tap on the copy decides nothing.
	b.deliver(t, core.Turn{Channel: "wa", Conversation: "wa:owner", Sender: owner, ChatKind: core.ChatDirect,
		Tap: &core.Tap{Card: status.ID, Choice: "approve"}})
	var refused int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM audit_log WHERE kind = 'approval.refused' AND data->>'reason' IN ('already_decided', 'not_approver')`).Scan(&refused); err != nil {
		t.Fatal(err)
	}
	if n := b.executions(t); n != 1 || refused != 2 {
		t.Fatalf("%d executions, %d refused taps; want 1 and 2", n, refused)
	}
	kinds := auditKinds(t, b.bundle)
	if !kinds["approval.routed"] {
		t.Fatal("routing not audited")
	}
}

// TestNoApproverReachable: with no owner reachable anywhere the requester
// is told at once why, nothing is stored to wait, and it is audited.
func TestNoApproverReachable(t *testing.T) {
	t.Parallel()
	b := setupRouted(t, false)
	b.deliver(t, core.Turn{Channel: "test", Conversation: "test:friend", Sender: "test:friend", ChatKind: core.ChatDirect, Text: "/run echo nobody"})
	msgs := b.ch.waitFor(t, "the refusal", func(msgs []core.OutMessage) bool { return len(msgs) == 1 })
	if !strings.Contains(msgs[0].Text, "Nobody can approve `echo nobody`") || !strings.Contains(msgs[0].Text, "direct conversation") || msgs[0].Card != nil {
		t.Fatalf("reply: %s", dump(msgs))
	}
	var open int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM approvals`).Scan(&open); err != nil || open != 0 {
		t.Fatalf("%d approvals stored (%v); want none", open, err)
	}
	if !auditKinds(t, b.bundle)["approval.unroutable"] {
		t.Fatal("refusal not audited")
	}
}

// TestSelfApprovalBarred: with approvals.self_approval false an owner's own
// request goes to another owner; the requester's own tap is refused; with
// no other owner reachable it is refused at once.
func TestSelfApprovalBarred(t *testing.T) {
	t.Parallel()
	bar := func(c *gateway.Config) {
		c.NoSelfApproval = []cards.Risk{cards.RiskLow, cards.RiskMedium}
		c.Owners = append(c.Owners, "wa:boss")
	}
	b := setupRouted(t, false, bar)
	b.send(t, owner, "/run echo mine")
	msgs := b.ch.waitFor(t, "the refusal", func(msgs []core.OutMessage) bool { return len(msgs) == 1 })
	if !strings.Contains(msgs[0].Text, "Nobody can approve") {
		t.Fatalf("reply: %s", dump(msgs))
	}
	b.deliver(t, core.Turn{Channel: "wa", Conversation: "wa:boss", Sender: "wa:boss", ChatKind: core.ChatDirect, Text: "/whoami"})
	b.wa.waitFor(t, "the boss's answer", func(msgs []core.OutMessage) bool { return len(msgs) == 1 })
	b.send(t, owner, "/run echo again")
	msgs = b.ch.waitFor(t, "the status card", func(msgs []core.OutMessage) bool { return len(msgs) == 2 })
	status := msgs[1].Card
	if status == nil || len(status.Choices) != 0 {
		t.Fatalf("status: %s", dump(msgs))
	}
	b.tap(t, owner, status.ID, "approve")
	b.waitRefused(t, "self_approval")
	if n := b.executions(t); n != 0 {
		t.Fatalf("%d executions after the requester's own tap", n)
	}
	b.deliver(t, core.Turn{Channel: "wa", Conversation: "wa:boss", Sender: "wa:boss", ChatKind: core.ChatDirect,
		Tap: &core.Tap{Card: status.ID, Choice: "approve"}})
	b.waitStatus(t, status.ID, cards.StatusDone)
}

func (b *bundle) waitRefused(t *testing.T, reason string) {
	t.Helper()
	b.ch.waitFor(t, "refusal "+reason, func([]core.OutMessage) bool {
		var n int
		_ = b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM audit_log WHERE kind = 'approval.refused' AND data->>'reason' = $1`, reason).Scan(&n)
		return n > 0
	})
}
