package whatsapp

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
)

// Card modes (Config.Cards).
const (
	// CardsPoll shows a card as its text followed by a WhatsApp poll whose
	// options are the card's choices; a vote is a tap.
	CardsPoll = "poll"
	// CardsNumbered shows a card as text with numbered choices, answered
	// by replying "1", "2", … quoting it.
	CardsNumbered = "numbered"
)

// MethodE2E is the evidence method of every turn: the message came through
// the linked device's end-to-end encrypted session, which authenticates
// its sender device.
const MethodE2E = "whatsapp-e2e"

// MaxMessageLen is the longest text of one message Silas sends (WhatsApp
// accepts 65,536 characters); longer texts are split.
const MaxMessageLen = 65536

// maxPollName is WhatsApp's limit of a poll's question; maxPollOption of
// one option (longer ones are refused by the phone apps).
const (
	maxPollName   = 255
	maxPollOption = 100
)

// Config configures the adapter. YAML keys are whatsapp.<key>
// (internal/config/whatsapp.go); zero values take the defaults named here.
type Config struct {
	// Name is the channel name; conversations are "<name>:<chat JID>".
	// Default "whatsapp". Identities are always "whatsapp:<phone digits>".
	Name core.ChannelName
	// Client is the port to WhatsApp (NewClient over a linked device).
	// Required.
	Client Client
	// Cards is poll (default) or numbered. YAML whatsapp.cards.
	Cards string
	// EditWindow: a card's new state is an edit while the card is younger
	// than this, a reply quoting it afterwards. Default 15m; 0 is only
	// reached through NeverEdit. YAML whatsapp.edit_window.
	EditWindow time.Duration
	// NeverEdit always replies instead of editing (edit_window: 0s).
	NeverEdit bool
	// Typing shows "typing…" before each text Silas sends. YAML
	// whatsapp.typing.
	Typing bool
	// Limits pace outbound messages. Defaults: 2s per chat, 10 per minute
	// per group, 1 per second overall (conservative: WhatsApp bans
	// numbers that send like bots). YAML whatsapp.limits.*.
	Limits kit.Limits
	// Clock drives the limiter (tests); default the wall clock.
	Clock kit.Clock
	// State keeps which message shows which card (so a reply quoting a
	// card and a poll vote are understood after a restart) and the link
	// state doctor shows. core/store implements it. Without it they live
	// in memory only.
	State core.StateStore
	// Notify tells the owner, through another channel, that WhatsApp
	// needs them (logged out, replaced, banned, outdated). May be nil.
	Notify func(ctx context.Context, text string)
	// Link, when set, is offered once when no device is linked (the
	// first `silas serve` with WhatsApp enabled): it shows QR codes and
	// returns nil once the phone confirmed, and the channel then connects
	// with the new device. Without it, or when it fails, the missing link
	// is reported like a logout.
	Link   func(ctx context.Context) error
	Logger *slog.Logger
	// Now is the clock of the edit window; default time.Now.
	Now func() time.Time
	// ReconnectMin and ReconnectMax bound the reconnect backoff (defaults
	// 2s and 5m).
	ReconnectMin, ReconnectMax time.Duration
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "whatsapp"
	}
	if c.Cards == "" {
		c.Cards = CardsPoll
	}
	if c.EditWindow == 0 {
		c.EditWindow = 15 * time.Minute
	}
	if c.Limits.PerChatInterval == 0 {
		c.Limits.PerChatInterval = 2 * time.Second
	}
	if c.Limits.GroupPerMinute == 0 {
		c.Limits.GroupPerMinute = 10
	}
	if c.Limits.GlobalPerSecond == 0 {
		c.Limits.GlobalPerSecond = 1
	}
	if c.Clock == nil {
		c.Clock = kit.RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = 2 * time.Second
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = 5 * time.Minute
	}
	return c
}

// Validate checks the configuration after defaults, naming the key as
// whatsapp.<key>.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("whatsapp.%s: %s", key, fmt.Sprintf(format, a...))
	}
	switch c.Cards {
	case CardsPoll, CardsNumbered:
	default:
		return bad("cards", "%q is neither poll nor numbered", c.Cards)
	}
	if c.EditWindow < 0 || c.EditWindow > 20*time.Minute {
		return bad("edit_window", "%s must be between 0s and 20m (WhatsApp refuses later edits)", c.EditWindow)
	}
	if c.Limits.PerChatInterval < 0 || c.Limits.GroupPerMinute < 0 || c.Limits.GlobalPerSecond < 0 {
		return bad("limits", "must not be negative")
	}
	if c.Client == nil {
		return fmt.Errorf("whatsapp: no client (link a device with `silas whatsapp link`)")
	}
	return nil
}
