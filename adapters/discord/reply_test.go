package discord

import (
	"strings"
	"testing"

	"github.com/silas-gateway/silas/adapters/discord/discordtest"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease/leasetest"
)

// TestReplyToOwnMessageCarriesItsRef: a message replying to the bot's own
// message (message_reference) carries that message's ref as Send returned
// it (what the outbox records), so a flow's card takes the reply; a reply
// to a person's message carries none.
func TestReplyToOwnMessageCarriesItsRef(t *testing.T) {
	t.Parallel()
	srv := discordtest.NewServer(t)
	a, err := New(Config{Token: discordtest.Token, ApplicationID: discordtest.AppID, BaseURL: srv.BaseURL})
	if err != nil {
		t.Fatal(err)
	}
	in := &leasetest.Inbox{}
	leasetest.Run(t, a, in)
	leasetest.Wait(t, "the gateway session", srv.Connected)
	ctx := t.Context()
	user := discordtest.User{ID: "1300000000000000001", Username: "olive"}
	dm := srv.DM(user.ID)
	ref, err := a.Send(ctx, core.OutMessage{Conversation: conversation("discord", dm), Text: "Flow deploy asks: which day?"})
	if err != nil {
		t.Fatal(err)
	}
	_, botMsg, _ := strings.Cut(string(ref), ":")
	mine := srv.SendReply(user, dm, "my own words", false, "")
	srv.SendReply(user, dm, "friday", false, botMsg)
	srv.SendReply(user, dm, "not to the bot", false, mine)
	leasetest.Wait(t, "three turns", func() bool { return len(in.Turns()) >= 3 })
	byText := map[string]core.Turn{}
	for _, tr := range in.Turns() {
		byText[tr.Text] = tr
	}
	if r := byText["friday"].ReplyTo; r != ref {
		t.Fatalf("reply to the bot's message: ReplyTo = %q, want %q", r, ref)
	}
	if r := byText["not to the bot"].ReplyTo + byText["my own words"].ReplyTo; r != "" {
		t.Fatalf("reply to a person's message carries ReplyTo %q", r)
	}
}
