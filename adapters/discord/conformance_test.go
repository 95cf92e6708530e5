package discord

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/channeltest"
	"github.com/silas-gateway/silas/adapters/discord/discordtest"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/commands/catalog"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// The conformance suite needs PostgreSQL; other tests never ask for it.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestConformance runs the channel conformance suite against the adapter,
// the real discordgo session and the fake Discord (discordtest: REST API
// and gateway), through the real engine.
func TestConformance(t *testing.T) {
	t.Parallel()
	channeltest.Run(t, func(t *testing.T, o channeltest.Options) (channeltest.Platform, string) {
		return newConformancePlatform(t, o), ""
	})
}

// conformanceLimits are Discord's limits with a shorter window (5 messages
// per channel per second instead of per 5 s) so scenarios take seconds; the
// fake announces them in X-RateLimit-* headers and enforces them.
var conformanceLimits = discordtest.Limits{PerChannel: 5, Window: time.Second, GlobalPerSecond: 50}

// conformancePlatform is channeltest.Platform over discordtest: a DM with
// the approver, or a guild channel both people write in (Options.Shared),
// where they address the bot by mentioning it.
type conformancePlatform struct {
	srv     *discordtest.Server
	channel string
	guild   bool
	people  [2]discordtest.User

	mu     sync.Mutex
	cardOf map[string]cards.ID // message id → card, learned from its buttons
}

var (
	_ channeltest.Platform       = (*conformancePlatform)(nil)
	_ channeltest.NativeCommands = (*conformancePlatform)(nil)
)

// Registered is the slash commands the adapter registered with the fake.
func (p *conformancePlatform) Registered(testing.TB) []string {
	return append([]string{}, p.srv.CommandNames()...)
}

// Command invokes the slash command with arg as its first option, typed
// as the catalog declares it (an integer option carries a number).
func (p *conformancePlatform) Command(t testing.TB, r channeltest.Role, name, arg string) {
	c, ok := catalog.Lookup(name)
	if !ok {
		t.Fatalf("no command %q in the catalog", name)
	}
	var opts []map[string]any
	if arg != "" && len(c.Args) > 0 {
		o := map[string]any{"name": c.Args[0].Name, "type": 3, "value": arg}
		if c.Args[0].Integer {
			n, err := strconv.Atoi(arg)
			if err != nil {
				t.Fatalf("/%s takes a number, not %q", name, arg)
			}
			o["type"], o["value"] = 4, n
		}
		opts = append(opts, o)
	}
	// Discord delivers an interaction only to a connected app and forgets
	// it after 3 s (the person sees "the application did not respond"),
	// unlike a message, which the catch-up fetches: wait for the session
	// as Started does.
	p.Started(t, nil)
	p.srv.DispatchInteraction(p.srv.Interaction(2, p.people[r], p.channel, map[string]any{"id": "1", "name": name, "type": 1, "options": opts}, nil))
}

func newConformancePlatform(t *testing.T, o channeltest.Options) *conformancePlatform {
	p := &conformancePlatform{
		srv:    discordtest.NewServerWithLimits(t, conformanceLimits),
		people: [2]discordtest.User{{ID: "1300000000000000001", Username: "olive"}, {ID: "1300000000000000002", Username: "sam"}},
		cardOf: map[string]cards.ID{},
	}
	p.channel = p.srv.DM(p.people[channeltest.Approver].ID)
	if o.Shared {
		p.channel, p.guild = "1500000000000000002", true
		p.srv.GuildChannel("1500000000000000001", p.channel)
	}
	return p
}

func (p *conformancePlatform) Identity(r channeltest.Role) core.IdentityID {
	return identity(p.people[r].ID)
}

// Deafen implements channeltest.Deafener: the gateway stops delivering.
func (p *conformancePlatform) Deafen(_ testing.TB, deaf bool) { p.srv.Deafen(deaf) }

func (p *conformancePlatform) NewChannel(t testing.TB, state core.StateStore, log *slog.Logger) core.Channel {
	a, err := New(Config{Token: discordtest.Token, ApplicationID: discordtest.AppID, BaseURL: p.srv.BaseURL, State: state, Logger: log,
		HTTPTimeout: 5 * time.Second, ReconnectMin: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Started waits for the gateway session: a message sent before the first
// READY to a conversation Silas never saw could not be caught up (Discord
// lists no new DMs), as on the real platform.
func (p *conformancePlatform) Started(t testing.TB, _ core.Channel) {
	deadline := time.Now().Add(30 * time.Second)
	for !p.srv.Connected() {
		if time.Now().After(deadline) {
			t.Fatalf("no gateway session after 30s: %+v", p.srv.Gateway())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Say writes as a person would: in a DM as is, in a guild channel with a
// mention of the bot (guild messages that do not address it are not
// Silas's).
func (p *conformancePlatform) Say(_ testing.TB, r channeltest.Role, text string) {
	if p.guild {
		p.srv.SendMessage(p.people[r], p.channel, "<@"+discordtest.BotID+"> "+text, true)
		return
	}
	p.srv.SendMessage(p.people[r], p.channel, text, false)
}

// Reply quotes m with the ping on (Discord's default), which in a guild is
// what addresses the bot.
func (p *conformancePlatform) Reply(_ testing.TB, r channeltest.Role, m channeltest.Message, text string) bool {
	p.srv.SendReply(p.people[r], p.channel, text, true, m.ID)
	return true
}

func (p *conformancePlatform) Tap(t testing.TB, r channeltest.Role, m channeltest.Message, choice string) {
	id, err := customID(m.Card, choice)
	if err != nil {
		t.Fatal(err)
	}
	p.srv.Tap(p.people[r], discordtest.Message{ID: m.ID, ChannelID: p.channel}, id)
}

func (p *conformancePlatform) Chat(testing.TB) []channeltest.Message {
	var out []channeltest.Message
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.srv.BotMessages(p.channel) {
		cm := channeltest.Message{ID: m.ID, Text: shownText(m), Edits: m.Edits}
		if len(m.Embeds) > 0 {
			// Content and embeds have limits of their own, which the
			// fake enforces field by field (Violations).
			cm.MaxLen = MaxMessageLen + MaxEmbedTotal
		}
		for _, row := range m.Components {
			cs, _ := row["components"].([]any)
			for _, c := range cs {
				b, _ := c.(map[string]any)
				btn := channeltest.Button{}
				btn.Label, _ = b["label"].(string)
				btn.URL, _ = b["url"].(string)
				cid, _ := b["custom_id"].(string)
				if card, choice, ok := parseCustomID(cid); ok {
					btn.Choice = choice
					p.cardOf[m.ID] = card
				}
				cm.Buttons = append(cm.Buttons, btn)
			}
		}
		cm.Card = p.cardOf[m.ID]
		if cm.Card != "" {
			cm.Status = shownStatus(cm.Text, len(cm.Choices()) > 0)
		}
		out = append(out, cm)
	}
	return out
}

// shownText is what a person reads: the content and the embeds' titles and
// descriptions, markdown escapes removed.
func shownText(m discordtest.Message) string {
	parts := []string{}
	if m.Content != "" {
		parts = append(parts, m.Content)
	}
	for _, e := range m.Embeds {
		for _, k := range []string{"title", "description"} {
			if v, _ := e[k].(string); v != "" {
				parts = append(parts, v)
			}
		}
	}
	return unescapeMarkdown(strings.Join(parts, "\n"))
}

func unescapeMarkdown(s string) string {
	var b strings.Builder
	esc := false
	for _, r := range s {
		if !esc && r == '\\' {
			esc = true
			continue
		}
		if esc && !strings.ContainsRune(markdownSpecial, r) {
			b.WriteRune('\\')
		}
		esc = false
		b.WriteRune(r)
	}
	return b.String()
}

// shownStatus reads a card's status from its status line; an open card
// without one is pending.
func shownStatus(text string, open bool) cards.Status {
	if s, ok := cards.StatusIn(text); ok {
		return s
	}
	if open {
		return cards.StatusPending
	}
	return ""
}

// Told: the ephemeral answers (interaction responses with flags 64 and
// follow-ups) to r's interactions, which only r sees, and the bot's text
// messages in the chat (typed taps are answered there).
// TapAnswers counts the notices r was shown through interactions: an
// ephemeral response or follow-up each (a type-7 response shows the card,
// its notice is the follow-up).
func (p *conformancePlatform) TapAnswers(_ testing.TB, r channeltest.Role) (int, bool) {
	n := 0
	for _, c := range append(p.srv.Callbacks(), p.srv.FollowUps()...) {
		if c.User == p.people[r].ID && c.Ephemeral() {
			n++
		}
	}
	return n, true
}

func (p *conformancePlatform) Told(t testing.TB, r channeltest.Role) []string {
	var out []string
	who := p.people[r].ID
	for _, c := range append(p.srv.Callbacks(), p.srv.FollowUps()...) {
		if c.User == who && c.Ephemeral() {
			if s, _ := c.Data["content"].(string); s != "" {
				out = append(out, unescapeMarkdown(s))
			}
		}
	}
	for _, m := range p.Chat(t) {
		if m.Card == "" {
			out = append(out, m.Text)
		}
	}
	return out
}

// RateLimit answers the next n message creates with 429 and a retry_after
// of 300 ms (Discord's are often fractions of a second).
func (p *conformancePlatform) RateLimit(_ testing.TB, n int) bool {
	p.srv.Inject429("POST /channels/{id}/messages", n, 300*time.Millisecond)
	return true
}

// Violations: the fake's (limits, allowed_mentions, custom_id length, late
// interaction answers) and interactions never answered.
func (p *conformancePlatform) Violations() []string {
	v := p.srv.Violations()
	for _, ix := range p.srv.Unanswered(3 * time.Second) {
		v = append(v, fmt.Sprintf("interaction %s was never answered", ix))
	}
	return v
}

func (p *conformancePlatform) MaxTextLen() int { return MaxMessageLen }
