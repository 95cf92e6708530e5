package slack

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/channeltest"
	"github.com/silas-gateway/silas/adapters/slack/slacktest"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// The conformance suite needs PostgreSQL; other tests never ask for it.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestConformance runs the channel conformance suite against the adapter
// and the fake Slack (slacktest: Web API and Socket Mode), through the
// real engine.
func TestConformance(t *testing.T) {
	t.Parallel()
	channeltest.Run(t, func(t *testing.T, o channeltest.Options) (channeltest.Platform, string) {
		return newConformancePlatform(t, o), ""
	})
}

// The suite's per-channel spacing: Slack's shape (one call per channel at
// a time, spaced), shorter so that scenarios take seconds. The fake
// records a call closer than this minus 100ms as a breach.
const conformanceInterval = 250 * time.Millisecond

// conformancePlatform is channeltest.Platform over slacktest: the app's DM
// with the approver, or a channel with both people (Options.Shared) where
// they address the bot by mentioning it.
type conformancePlatform struct {
	srv     *slacktest.Server
	channel string
	shared  bool
	people  [2]string

	mu      sync.Mutex
	cardOf  map[string]cards.ID // ts → card, learned from its buttons
	threads map[string]string   // ts → thread_ts
	taps    int
}

var (
	_ channeltest.Platform       = (*conformancePlatform)(nil)
	_ channeltest.NativeCommands = (*conformancePlatform)(nil)
)

// Registered: Slack's app has the one /silas command (docs/slack.md); its
// text names Silas's command.
func (p *conformancePlatform) Registered(testing.TB) []string { return nil }

// Command is "/silas <name> <arg>", as a person types it.
func (p *conformancePlatform) Command(_ testing.TB, r channeltest.Role, name, arg string) {
	p.srv.Command(p.channel, p.people[r], strings.TrimSpace(name+" "+arg))
}

func newConformancePlatform(t *testing.T, o channeltest.Options) *conformancePlatform {
	p := &conformancePlatform{
		srv:     slacktest.NewServer(t, slacktest.Options{PerChannelInterval: conformanceInterval, PingEvery: 500 * time.Millisecond}),
		people:  [2]string{"U0OLIVE", "U0SAM"},
		channel: "D0OLIVE",
		cardOf:  map[string]cards.ID{},
		threads: map[string]string{},
	}
	if o.Shared {
		p.channel, p.shared = "C0CONF", true
	}
	return p
}

func (p *conformancePlatform) Identity(r channeltest.Role) core.IdentityID {
	return identity(p.people[r])
}

// Deafen implements channeltest.Deafener: Slack stops sending on the open
// socket.
func (p *conformancePlatform) Deafen(_ testing.TB, deaf bool) { p.srv.Deafen(deaf) }

func (p *conformancePlatform) NewChannel(t testing.TB, state core.StateStore, log *slog.Logger) core.Channel {
	a, err := New(Config{BotToken: slacktest.BotToken, AppToken: slacktest.AppToken, BaseURL: p.srv.URL, State: state,
		Logger: log, HTTPTimeout: 5 * time.Second, PingInterval: time.Second, PingTimeout: 2 * time.Second,
		Limits: Limits{PerChannelInterval: conformanceInterval}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Started: Socket Mode connects on its own, and the fake hands the new
// connection every event nobody acknowledged.
func (p *conformancePlatform) Started(testing.TB, core.Channel) {}

// Say writes as a person would: in the DM as typed, in the channel with a
// mention of the bot (channel messages that do not address it are not
// Silas's). Slack escapes & < > in event text.
func (p *conformancePlatform) Say(_ testing.TB, r channeltest.Role, text string) {
	text = escape(text)
	if p.shared {
		text = "<@" + slacktest.BotUser + "> " + text
	}
	p.srv.Send(slacktest.Msg{Channel: p.channel, User: p.people[r], Text: text})
}

// Reply: Slack has no quoting of one message in another; the nearest, a
// reply in the message's thread, does not carry the parent's buttons to
// the app, so "1" cannot be read as a choice of that card.
func (p *conformancePlatform) Reply(testing.TB, channeltest.Role, channeltest.Message, string) bool {
	return false
}

func (p *conformancePlatform) Tap(t testing.TB, r channeltest.Role, m channeltest.Message, choice string) {
	v, err := buttonValue(string(m.Card), choice)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.taps++
	trigger := fmt.Sprintf("conf.%d", p.taps)
	thread := p.threads[m.ID]
	p.mu.Unlock()
	p.srv.TapValue(slacktest.Message{Channel: p.channel, TS: m.ID, Thread: thread}, p.people[r], v, trigger)
}

// Chat is the channel as a person sees it: a card's blocks read top to
// bottom (mrkdwn unescaped), its buttons, its status line.
func (p *conformancePlatform) Chat(testing.TB) []channeltest.Message {
	var out []channeltest.Message
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.srv.Messages(p.channel) {
		p.threads[m.TS] = m.Thread
		cm := channeltest.Message{ID: m.TS, Edits: m.Edits}
		if len(m.Blocks) == 0 {
			cm.Text = unescape(m.Text)
		}
		var lines []string
		for _, bl := range m.Blocks {
			switch bl["type"] {
			case "header":
				lines = append(lines, textOf(bl["text"]))
			case "section":
				lines = append(lines, unescape(textOf(bl["text"])))
			case "context":
				els, _ := bl["elements"].([]any)
				for _, e := range els {
					lines = append(lines, unescape(textOf(e)))
				}
			case "actions":
				els, _ := bl["elements"].([]any)
				for _, e := range els {
					em, _ := e.(map[string]any)
					btn := channeltest.Button{Label: textOf(em["text"])}
					btn.URL, _ = em["url"].(string)
					v, _ := em["value"].(string)
					if card, choice, ok := parseButtonValue(v); ok && btn.URL == "" {
						btn.Choice = choice
						p.cardOf[m.TS] = cards.ID(card)
					}
					cm.Buttons = append(cm.Buttons, btn)
				}
			}
		}
		if len(m.Blocks) > 0 {
			cm.Text = strings.Join(lines, "\n")
		}
		cm.Card = p.cardOf[m.TS]
		if cm.Card != "" {
			cm.Status = shownStatus(cm.Text, len(cm.Choices()) > 0)
		}
		out = append(out, cm)
	}
	return out
}

func textOf(v any) string {
	m, _ := v.(map[string]any)
	s, _ := m["text"].(string)
	return s
}

func unescape(s string) string {
	return strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(s)
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

// Told: the ephemeral notices shown to r (Slack answers taps, typed ones
// included, only to the person who tapped).
// TapAnswers counts the ephemeral notices r was shown (every tap of the
// suite's has a notice).
func (p *conformancePlatform) TapAnswers(_ testing.TB, r channeltest.Role) (int, bool) {
	n := 0
	for _, e := range p.srv.Ephemerals() {
		if e.User == p.people[r] {
			n++
		}
	}
	return n, true
}

func (p *conformancePlatform) Told(_ testing.TB, r channeltest.Role) []string {
	var out []string
	for _, e := range p.srv.Ephemerals() {
		if e.User == p.people[r] {
			out = append(out, unescape(e.Text))
		}
	}
	return out
}

// RateLimit answers the next n posts and edits with 429, Retry-After 1 s
// (the header's smallest value).
func (p *conformancePlatform) RateLimit(_ testing.TB, n int) bool {
	p.srv.RateLimitNext(n, 1)
	return true
}

// Violations are the fake's breaches of Slack's limits, and more than one
// Socket Mode connection open at once.
func (p *conformancePlatform) Violations() []string {
	v := p.srv.Violations()
	if n := p.srv.MaxLive(); n > 1 {
		v = append(v, fmt.Sprintf("%d Socket Mode connections open at once", n))
	}
	return v
}

func (p *conformancePlatform) MaxTextLen() int { return MaxMessageLen }
