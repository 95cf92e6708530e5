package slack

import (
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/slack/slacktest"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease/leasetest"
)

// TestThreadReplyToOwnMessageCarriesItsRef: Slack's reply to a message is
// a reply in its thread. One under the bot's own message (a flow's card)
// carries that message's ref as Send returned it (what the outbox
// records) and the conversation it was posted in, so the card takes the
// reply; a reply in a thread under a person's message carries none.
func TestThreadReplyToOwnMessageCarriesItsRef(t *testing.T) {
	t.Parallel()
	srv := slacktest.NewServer(t, slacktest.Options{PerChannelInterval: time.Millisecond})
	a, err := New(Config{BotToken: slacktest.BotToken, AppToken: slacktest.AppToken, BaseURL: srv.URL, State: &memState{m: map[string]string{}},
		HTTPTimeout: 5 * time.Second, PingInterval: time.Second, PingTimeout: 2 * time.Second, Limits: Limits{PerChannelInterval: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	in := &leasetest.Inbox{}
	leasetest.Run(t, a, in)
	ctx := t.Context()
	const dm, user = "D0OLIVE", "U0OLIVE"
	srv.Send(slacktest.Msg{Channel: dm, User: user, Text: "hello"})
	leasetest.Wait(t, "the first turn", func() bool { return len(in.Turns()) >= 1 }) // connected
	ref, err := a.Send(ctx, core.OutMessage{Conversation: conversation("slack", user, ""), Text: "Flow deploy asks: which day?"})
	if err != nil {
		t.Fatal(err)
	}
	channel, ts, _ := strings.Cut(string(ref), ":")
	srv.Send(slacktest.Msg{Channel: channel, User: user, Text: "friday", Thread: ts})
	mine := srv.Send(slacktest.Msg{Channel: dm, User: user, Text: "my own words"})
	srv.Send(slacktest.Msg{Channel: dm, User: user, Text: "under my own", Thread: mine})
	byText := map[string]core.Turn{}
	leasetest.Wait(t, "four turns", func() bool { return len(in.Turns()) >= 4 })
	for _, tr := range in.Turns() {
		byText[tr.Text] = tr
	}
	if r := byText["friday"]; r.ReplyTo != ref || r.ReplyIn != "slack:"+user || r.RepliedIn() != "slack:"+user || r.Conversation == "slack:"+user {
		t.Fatalf("reply in the bot's message's thread: %+v (want ReplyTo %q in slack:%s)", r, ref, user)
	}
	if r := byText["under my own"]; r.ReplyTo != "" || r.ReplyIn != "" {
		t.Fatalf("reply under a person's message: %+v", r)
	}
}
