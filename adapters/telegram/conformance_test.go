package telegram

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/channeltest"
	"github.com/silas-gateway/silas/adapters/telegram/telegramtest"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// The conformance suite needs PostgreSQL; other tests never ask for it.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestConformance runs the channel conformance suite against the adapter
// and the fake Bot API (telegramtest), through the real engine.
func TestConformance(t *testing.T) {
	channeltest.Run(t, func(t *testing.T, o channeltest.Options) (channeltest.Platform, string) {
		return newConformancePlatform(t, o), ""
	})
}

// The platform's limits in the suite: Telegram's shape, a shorter per-chat
// interval so scenarios take seconds. The fake enforces what the adapter
// is configured to keep.
var conformanceLimits = Limits{PerChatInterval: 100 * time.Millisecond, GroupPerMinute: 20, GlobalPerSecond: 30}

// conformancePlatform is channeltest.Platform over telegramtest: a private
// chat with the approver, or a group with both people (Options.Shared).
type conformancePlatform struct {
	srv    *telegramtest.Server
	chat   telegramtest.Chat
	people [2]telegramtest.User

	mu      sync.Mutex
	cardOf  map[int]cards.ID // message id → card, learned from its buttons
	queries map[string]channeltest.Role
}

var (
	_ channeltest.Platform       = (*conformancePlatform)(nil)
	_ channeltest.NativeCommands = (*conformancePlatform)(nil)
)

// Registered is the bot's command menu as the adapter set it.
func (p *conformancePlatform) Registered(testing.TB) []string {
	return append([]string{}, p.srv.Commands()...)
}

// Command: a Telegram command is the text "/name arg" (picked from the
// menu or typed).
func (p *conformancePlatform) Command(t testing.TB, r channeltest.Role, name, arg string) {
	p.Say(t, r, strings.TrimSpace("/"+name+" "+arg))
}

func newConformancePlatform(t *testing.T, o channeltest.Options) *conformancePlatform {
	p := &conformancePlatform{
		srv: telegramtest.NewServer(t, telegramtest.Options{Limits: telegramtest.Limits{
			PerChat: conformanceLimits.PerChatInterval, GroupPerMinute: conformanceLimits.GroupPerMinute,
			GlobalPerSecond: conformanceLimits.GlobalPerSecond, Slack: 20 * time.Millisecond}}),
		people:  [2]telegramtest.User{{ID: 1001, FirstName: "Olive"}, {ID: 2002, FirstName: "Sam"}},
		cardOf:  map[int]cards.ID{},
		queries: map[string]channeltest.Role{},
	}
	p.chat = telegramtest.Private(p.people[channeltest.Approver])
	if o.Shared {
		p.chat = telegramtest.Group(-1001234, "Conformance")
	}
	return p
}

func (p *conformancePlatform) Identity(r channeltest.Role) core.IdentityID {
	return identity(p.people[r].ID)
}

func (p *conformancePlatform) NewChannel(t testing.TB, state core.StateStore, log *slog.Logger) core.Channel {
	a, err := New(Config{Token: p.srv.Token, BaseURL: p.srv.URL, BotUsername: p.srv.BotUsername, State: state, Logger: log,
		PollTimeout: time.Second, HTTPTimeout: 5 * time.Second, Limits: conformanceLimits})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (p *conformancePlatform) Started(testing.TB, core.Channel) {}

// Deafen implements channeltest.Deafener: getUpdates stops returning.
func (p *conformancePlatform) Deafen(_ testing.TB, deaf bool) { p.srv.Deafen(deaf) }

// Say writes as a person would in the chat: in a group, addressed to the
// bot (a /command@bot, or an @mention), since group messages that do not
// address it are not Silas's.
func (p *conformancePlatform) Say(_ testing.TB, r channeltest.Role, text string) {
	if p.chat.Type != "private" {
		if cmd, rest, ok := strings.Cut(text, " "); strings.HasPrefix(text, "/") && ok {
			text = cmd + "@" + p.srv.BotUsername + " " + rest
		} else if strings.HasPrefix(text, "/") {
			text += "@" + p.srv.BotUsername
		} else {
			text = "@" + p.srv.BotUsername + " " + text
		}
	}
	p.srv.SendMessage(telegramtest.Msg{Chat: p.chat, From: p.people[r], Text: text})
}

func (p *conformancePlatform) Reply(t testing.TB, r channeltest.Role, m channeltest.Message, text string) bool {
	p.srv.SendMessage(telegramtest.Msg{Chat: p.chat, From: p.people[r], Text: text, ReplyTo: p.msgID(t, m)})
	return true
}

func (p *conformancePlatform) Tap(t testing.TB, r channeltest.Role, m channeltest.Message, choice string) {
	data, err := callbackData(m.Card, choice)
	if err != nil {
		t.Fatal(err)
	}
	_, q := p.srv.Tap(p.chat, p.people[r], p.msgID(t, m), data)
	p.mu.Lock()
	p.queries[q] = r
	p.mu.Unlock()
}

func (p *conformancePlatform) msgID(t testing.TB, m channeltest.Message) int {
	id, err := strconv.Atoi(m.ID)
	if err != nil {
		t.Fatalf("message id %q", m.ID)
	}
	return id
}

func (p *conformancePlatform) Chat(testing.TB) []channeltest.Message {
	var out []channeltest.Message
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.srv.Messages(p.chat.ID) {
		if m.Deleted {
			continue
		}
		cm := channeltest.Message{ID: strconv.Itoa(m.ID), Text: m.Text, Edits: m.Edits}
		for _, row := range m.Keyboard {
			for _, b := range row {
				btn := channeltest.Button{Label: b.Text, URL: b.URL}
				if card, choice, ok := parseCallbackData(b.CallbackData); ok {
					btn.Choice = choice
					p.cardOf[m.ID] = card
				}
				cm.Buttons = append(cm.Buttons, btn)
			}
		}
		cm.Card = p.cardOf[m.ID]
		if cm.Card != "" {
			cm.Status = shownStatus(m.Text, len(cm.Choices()) > 0)
		}
		out = append(out, cm)
	}
	return out
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

// Told: the toasts answering r's taps, and the bot's text messages in the
// chat (typed taps are answered there; everyone in the chat sees them).
// TapAnswers counts answerCallbackQuery calls for r's taps, also those the
// fake refused (a query answered already).
func (p *conformancePlatform) TapAnswers(_ testing.TB, r channeltest.Role) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.srv.Calls("answerCallbackQuery") {
		if who, ok := p.queries[c.Params["callback_query_id"]]; ok && who == r {
			n++
		}
	}
	return n, true
}

func (p *conformancePlatform) Told(t testing.TB, r channeltest.Role) []string {
	var out []string
	p.mu.Lock()
	for _, a := range p.srv.Answers() {
		if who, ok := p.queries[a.QueryID]; ok && who == r && a.Text != "" {
			out = append(out, a.Text)
		}
	}
	p.mu.Unlock()
	for _, m := range p.Chat(t) {
		if m.Card == "" {
			out = append(out, m.Text)
		}
	}
	return out
}

// RateLimit answers the next n sends with 429, retry_after 1 s (Telegram's
// smallest).
func (p *conformancePlatform) RateLimit(_ testing.TB, n int) bool {
	p.srv.Inject("sendMessage", telegramtest.Fault{Status: 429, Description: "Too Many Requests: retry after 1", RetryAfter: 1, Times: n})
	return true
}

func (p *conformancePlatform) Violations() []string { return p.srv.Violations() }

func (p *conformancePlatform) MaxTextLen() int { return MaxMessageLen }
