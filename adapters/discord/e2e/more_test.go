package e2e_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/silas-gateway/silas/adapters/discord"
	"github.com/silas-gateway/silas/adapters/discord/discordtest"
)

// TestServerCloseKeepsSession: Discord closes the socket with a close
// frame asking for a reconnect (4000) and the gateway loses what it
// dispatches while the bot is away. The bot must not answer with a 1000
// close (which would end the session), so its RESUME is accepted — no
// second IDENTIFY — and the catch-up that follows the accepted RESUME
// fetches the messages the gateway lost, each processed once.
func TestServerCloseKeepsSession(t *testing.T) {
	t.Parallel()
	w := newWorldWith(t, discord.ModeGateway, discordtest.DiscordLimits, func(c *discord.Config) { c.ReconnectMin = 500 * time.Millisecond })
	w.start()
	w.waitReady()
	dm := w.srv.DM(owner.ID)
	w.srv.SendMessage(owner, dm, "/whoami", false)
	w.eventually("first reply", 15*time.Second, func() (bool, string) { return len(whoamiReplies(w, dm)) == 1, "" })

	w.srv.LoseEvents(true)
	w.srv.CloseWith(4000)
	w.eventually("the socket closed", 10*time.Second, func() (bool, string) { return !w.srv.Connected(), "" })
	const missed = 4
	for range missed {
		w.srv.SendMessage(owner, dm, "/whoami", false)
	}
	w.eventually("every message answered after the RESUME", 30*time.Second, func() (bool, string) {
		n := len(whoamiReplies(w, dm))
		return n == missed+1, fmt.Sprintf("%d replies; gateway %+v", n, w.srv.Gateway())
	})
	g := w.srv.Gateway()
	if g.Identifies != 1 || g.Resumes < 1 || g.RefusedResumes != 0 || g.CleanCloses != 0 || g.ResumesAfterCleanClose != 0 {
		t.Errorf("gateway %+v: want one IDENTIFY, an accepted RESUME and no 1000/1001 close from the bot", g)
	}
	if n := w.count(`SELECT count(*) FROM turns WHERE channel = 'discord'`); n != missed+1 {
		t.Errorf("turns = %d; want %d", n, missed+1)
	}
	// At shutdown the bot ends its session on purpose: a 1000 close. (On a
	// loaded machine a late heartbeat ACK can make it replace the
	// connection meanwhile; a close needs a socket, so wait for one.)
	w.eventually("connected before the shutdown", 15*time.Second, func() (bool, string) { return w.srv.Connected(), "" })
	w.stop()
	if g := w.srv.Gateway(); !slices.Contains(g.CloseCodes, websocket.CloseNormalClosure) || g.ResumesAfterCleanClose != 0 {
		t.Errorf("gateway after shutdown %+v: want a 1000 close and no RESUME of that session", g)
	}
}

// TestGuildAddressing: in guilds the bot answers mentions (`@Silas run …`)
// and replies to its own messages (`run …`), in the guilds and channels
// discord.guilds allows ("<guild>" or "<guild>/<channel>"), and nothing
// else; a slash command in a channel not allowed gets an ephemeral
// refusal and is not stored.
func TestGuildAddressing(t *testing.T) {
	t.Parallel()
	const (
		guildA, chanA1, chanA2 = "1500000000000000001", "1500000000000000011", "1500000000000000012"
		guildB, chanB          = "1500000000000000002", "1500000000000000021"
		guildC, chanC          = "1500000000000000003", "1500000000000000031"
	)
	w := newWorldWith(t, discord.ModeGateway, discordtest.DiscordLimits, func(c *discord.Config) {
		c.Guilds = []string{guildA + "/" + chanA1, guildB}
	})
	w.srv.GuildChannel(guildA, chanA1)
	w.srv.GuildChannel(guildA, chanA2)
	w.srv.GuildChannel(guildB, chanB)
	w.srv.GuildChannel(guildC, chanC)
	w.start()
	w.waitReady()
	mention := "<@" + discordtest.BotID + "> "

	// Ignored: not addressed (allowed channel), and addressed where not
	// allowed (another channel of guild A, guild C).
	w.srv.SendMessage(owner, chanA1, "run echo not-addressed", false)
	w.srv.SendMessage(owner, chanA2, mention+"run echo other-channel", true)
	w.srv.SendMessage(owner, chanC, mention+"run echo other-guild", true)
	ix := w.srv.Command(owner, chanC, "run", [2]string{"command", "echo slash-elsewhere"})
	if cb := w.waitCallback(ix); cb.Type != 4 || !cb.Ephemeral() || !strings.Contains(fmt.Sprint(cb.Data["content"]), "does not answer in this channel") {
		t.Errorf("slash command in a channel not allowed answered %d %v; want an ephemeral refusal", cb.Type, cb.Data)
	}

	// Answered: a mention in the allowed channel, a mention anywhere in
	// the allowed guild B.
	w.srv.SendMessage(owner, chanA1, mention+"run echo mention-a", true)
	cardA := w.cardIn(chanA1, "the card for the mention in channel A1")
	if !strings.Contains(embedText(cardA), "echo mention-a") {
		t.Errorf("card in A1 = %s", embedText(cardA))
	}
	w.srv.SendMessage(owner, chanB, mention+"run echo mention-b", true)
	cardB := w.cardIn(chanB, "the card for the mention in guild B")

	// A reply to the bot's own message saying `run …` (the mention is the
	// reply's ping, not in the text).
	w.srv.SendReply(owner, chanB, "run echo replied", true, cardB.ID)
	w.eventually("the card for the reply", 15*time.Second, func() (bool, string) {
		for _, m := range w.srv.BotMessages(chanB) {
			if strings.Contains(embedText(m), "echo replied") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%v", w.srv.BotMessages(chanB))
	})
	// A reply to someone else's message is not addressed to the bot.
	other := w.srv.SendMessage(sam, chanB, "hello", false)
	w.srv.SendReply(owner, chanB, "run echo reply-to-sam", false, other)

	// The approver's tap in the guild decides the card in place.
	tap := w.srv.Tap(owner, cardA, choice(t, cardA, "approve"))
	if cb := w.waitCallback(tap); cb.Type != 7 {
		t.Errorf("tap in the guild answered with type %d; want 7", cb.Type)
	}
	w.eventually("the guild card shows the result", 20*time.Second, func() (bool, string) {
		m := w.message(chanA1, cardA.ID)
		return strings.Contains(embedText(m), "exit code 0 ✓") && len(buttons(m)) == 0, embedText(m)
	})

	// A last addressed message, after every ignored one: the adapter's
	// worker handles gateway messages one at a time, in order, so once it
	// is stored anything wrongly accepted before it is stored too.
	w.srv.SendMessage(owner, chanB, mention+"run echo last", true)
	w.eventually("the last message stored", 15*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM turns WHERE channel = 'discord' AND body->>'text' LIKE '%run echo last'`)
		return n == 1, fmt.Sprintf("%d", n)
	})
	var texts []string
	rows, err := w.db.Pool().Query(t.Context(), `SELECT body->>'text' FROM turns WHERE channel = 'discord' AND COALESCE(body->>'text', '') <> '' AND body->>'text' NOT LIKE '%run echo last' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		texts = append(texts, s)
	}
	rows.Close()
	want := []string{"/run echo mention-a", "/run echo mention-b", "/run echo replied"}
	if !slices.Equal(texts, want) {
		t.Errorf("stored turns %q; want only %q", texts, want)
	}
	for _, ch := range []string{chanA2, chanC} {
		if n := len(w.srv.BotMessages(ch)); n != 0 {
			t.Errorf("the bot wrote %d messages in %s, a channel not allowed", n, ch)
		}
	}
	if v := w.srv.Violations(); len(v) > 0 {
		t.Errorf("violations: %q", v)
	}
}

// TestStormAndOutage: a 429 storm on message creation, then a 60 s
// outage of the whole API and gateway, at one tenth scale: the outage
// lasts 6 s and the gateway's reconnect backoff runs from 100 ms to 12 s
// (instead of 1 s to 2 min), so the shape is Discord's in a tenth of the
// time. Messages keep arriving in a DM and a guild channel, some while
// Discord is down; afterwards every reply is delivered exactly once, in
// order per conversation, and the fake saw no request over its limits
// (Discord's 5 per channel per 5 s, 50 per second overall) and none before
// a 429's retry_after ended.
func TestStormAndOutage(t *testing.T) {
	t.Parallel()
	const outage = 6 * time.Second
	const guild, gch = "1500000000000000001", "1500000000000000011"
	w := newWorldWith(t, discord.ModeGateway, discordtest.DiscordLimits, func(c *discord.Config) {
		c.ReconnectMin, c.ReconnectMax = 100*time.Millisecond, 12*time.Second
		c.HTTPTimeout = 3 * time.Second
	})
	w.srv.GuildChannel(guild, gch)
	w.start()
	w.waitReady()
	dm := w.srv.DM(owner.ID)
	reply := func(cmd string) string { return "Unknown command " + cmd + ". Try /help." }
	want := map[string][]string{}
	say := func(ch, cmd string) {
		if ch == gch {
			w.srv.SendMessage(owner, ch, "<@"+discordtest.BotID+"> "+cmd, true)
		} else {
			w.srv.SendMessage(owner, ch, cmd, false)
		}
		want[ch] = append(want[ch], reply(cmd))
	}
	w.srv.Inject429("POST /channels/{id}/messages", 8, 700*time.Millisecond)
	for i := range 6 {
		say(dm, fmt.Sprintf("/d%02d", i))
		say(gch, fmt.Sprintf("/g%02d", i))
	}
	w.eventually("the storm's turns stored", 20*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM turns`)
		return n == 12, fmt.Sprintf("%d turns", n)
	})
	w.srv.Outage(true)
	time.Sleep(outage / 3)
	for i := 6; i < 9; i++ { // sent while Discord is down
		say(dm, fmt.Sprintf("/d%02d", i))
		say(gch, fmt.Sprintf("/g%02d", i))
	}
	time.Sleep(outage - outage/3)
	w.srv.Outage(false)
	total := 0
	for _, v := range want {
		total += len(v)
	}
	w.eventually("every reply after the outage", 60*time.Second, func() (bool, string) {
		got := len(w.srv.BotMessages(dm)) + len(w.srv.BotMessages(gch))
		return got >= total, fmt.Sprintf("%d of %d; gateway %+v", got, total, w.srv.Gateway())
	})
	for _, ch := range []string{dm, gch} {
		var got []string
		for _, m := range w.srv.BotMessages(ch) {
			got = append(got, m.Content)
		}
		if !slices.Equal(got, want[ch]) {
			t.Errorf("channel %s, in order:\n%q\nwant\n%q", ch, got, want[ch])
		}
	}
	w.eventually("the outbox drained", 10*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM outbox WHERE status = 'pending'`)
		return n == 0, fmt.Sprintf("%d pending", n)
	})
	if n := w.count(`SELECT count(*) FROM outbox WHERE status <> 'delivered'`); n != 0 {
		t.Errorf("%d replies not delivered", n)
	}
	if n := w.count(`SELECT count(DISTINCT event_id) FROM turns`); n != total {
		t.Errorf("turns = %d; want %d (each message once)", n, total)
	}
	if v := w.srv.Violations(); len(v) > 0 {
		t.Errorf("the fake saw violations: %q", v)
	}
	if w.srv.OutageHits() == 0 || w.count(`SELECT count(*) FROM outbox WHERE attempts > 1`) == 0 {
		t.Errorf("the faults were not exercised: %d requests during the outage", w.srv.OutageHits())
	}
	t.Logf("gateway %+v; %d REST requests answered 502", w.srv.Gateway(), w.srv.OutageHits())
}
