package engine_test

import (
	"context"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/gateway"
)

// renamed is a fake channel under another name.
type renamed struct {
	*fakeChannel
	name core.ChannelName
}

func (r renamed) Name() core.ChannelName { return r.name }

// TestNotifyOwners: a channel that lost its connection for good tells the
// owners elsewhere — in the newest direct conversation each owner had on
// every other channel; not in a group, not to someone who is not an owner,
// not on the channel that asked.
func TestNotifyOwners(t *testing.T) {
	t.Parallel()
	ch := newFakeChannel()
	wa := renamed{newFakeChannel(), "wa"}
	b := setupAccess(t, ch, ch, "", func(c *gateway.Config) { c.Channels = append(c.Channels, wa) })
	ctx := context.Background()
	if n, err := b.eng.NotifyOwners(ctx, "wa", "nobody yet"); err != nil || n != 0 {
		t.Fatalf("with no conversation: %d, %v", n, err)
	}
	deliver := func(chn core.ChannelName, conv core.ConversationID, from core.IdentityID, kind, id string) {
		t.Helper()
		if _, err := b.eng.Deliver(ctx, core.Turn{Channel: chn, Conversation: conv, Sender: from, EventID: id, ChatKind: kind,
			Text: "/whoami", Evidence: core.Evidence{Authenticated: true, Method: "test"}}); err != nil {
			t.Fatal(err)
		}
	}
	deliver("test", "test:old", owner, core.ChatDirect, "n1")
	deliver("test", "test:chat", owner, core.ChatDirect, "n2")
	deliver("test", "test:group", owner, core.ChatGroup, "n3")
	deliver("test", "test:friend", "test:friend", core.ChatDirect, "n4")
	deliver("wa", "wa:owner", owner, core.ChatDirect, "n5")
	ch.waitFor(t, "the answers", func(msgs []core.OutMessage) bool { return len(msgs) == 4 })

	n, err := b.eng.NotifyOwners(ctx, "wa", "WhatsApp: logged out. Link it again with `silas whatsapp link`.")
	if err != nil || n != 1 {
		t.Fatalf("NotifyOwners: %d, %v", n, err)
	}
	msgs := ch.waitFor(t, "the notice", func(msgs []core.OutMessage) bool { return len(msgs) == 5 })
	if m := msgs[4]; m.Conversation != "test:chat" || m.Text != "WhatsApp: logged out. Link it again with `silas whatsapp link`." || m.Card != nil {
		t.Fatalf("notice %+v", m)
	}
	wa.mu.Lock()
	defer wa.mu.Unlock()
	for _, m := range wa.msgs {
		if m.Text == "WhatsApp: logged out. Link it again with `silas whatsapp link`." {
			t.Fatal("the channel that asked was told too")
		}
	}
}
