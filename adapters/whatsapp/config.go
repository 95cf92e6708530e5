package whatsapp

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
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

// Config configures the adapter: the whatsapp: section of the
// configuration file (docs/whatsapp.md), decoded straight into it, plus
// the wiring serve adds (yaml:"-"). The device's keys live in PostgreSQL
// (schema whatsmeow), never in a file. Zero values take the defaults
// named here.
type Config struct {
	// Enabled runs the channel under `silas serve`; `silas whatsapp link`
	// must have linked a device first (serve offers it in a terminal).
	// YAML whatsapp.enabled.
	Enabled bool `yaml:"enabled"`
	// Name is the channel name; conversations are "<name>:<chat JID>".
	// Default "whatsapp". Identities are always "whatsapp:<phone digits>".
	Name core.ChannelName `yaml:"-"`
	// Client is the port to WhatsApp (NewClient over a linked device).
	// Required.
	Client Client `yaml:"-"`
	// Cards is how approval cards look: poll (default: a WhatsApp poll
	// whose options are the card's choices) or numbered (a text card
	// answered by replying 1, 2, … quoting it). Either way "approve <card
	// id>" / "decline <card id>" work too. YAML whatsapp.cards.
	Cards string `yaml:"cards"`
	// EditWindow: a card's new state is an edit while the card is younger
	// than this, a reply quoting it afterwards. Default 15m; 0 is only
	// reached through NeverEdit (WhatsApp allows edits for about 15-20
	// minutes; at most 20m). YAML whatsapp.edit_window.
	EditWindow time.Duration `yaml:"edit_window"`
	// NeverEdit always replies instead of editing (edit_window: 0s; the
	// spec's build sets it from the decoded 0).
	NeverEdit bool `yaml:"-"`
	// Typing shows "typing…" before each text Silas sends. YAML
	// whatsapp.typing.
	Typing bool `yaml:"typing"`
	// DMPolicy is what direct messages from unknown senders get: pairing
	// (default), allowlist, open or disabled. The core applies it. YAML
	// whatsapp.dm_policy.
	DMPolicy string `yaml:"dm_policy"`
	// Limits pace outbound messages. Defaults: 2s per chat, 10 per minute
	// per group, 1 per second overall (conservative: WhatsApp bans
	// numbers that send like bots). YAML whatsapp.limits.*.
	Limits kit.Limits `yaml:"limits"`
	// Clock drives the limiter (tests); default the wall clock.
	Clock kit.Clock `yaml:"-"`
	// State keeps which message shows which card (so a reply quoting a
	// card and a poll vote are understood after a restart) and the link
	// state doctor shows. core/store implements it. Without it they live
	// in memory only.
	State core.StateStore `yaml:"-"`
	// Leases, when set, holds the device's connection under the lease
	// "whatsapp/<name>" (lease.go): only its holder connects, and the
	// link state it records is fenced by its epoch. LeaseTTL is the
	// lease's lifetime (lease.DefaultTTL); Instance names this process as
	// its holder (serve: lease.InstanceID(); default a fresh id).
	Leases   lease.StateStore `yaml:"-"`
	LeaseTTL time.Duration    `yaml:"-"`
	Instance string           `yaml:"-"`
	// Notify tells the owner, through another channel, that WhatsApp
	// needs them (logged out, replaced, banned, outdated). May be nil.
	Notify func(ctx context.Context, text string) `yaml:"-"`
	// Link, when set, is offered once when no device is linked (the
	// first `silas serve` with WhatsApp enabled): it shows QR codes and
	// returns nil once the phone confirmed, and the channel then connects
	// with the new device. Without it, or when it fails, the missing link
	// is reported like a logout.
	Link   func(ctx context.Context) error `yaml:"-"`
	Logger *slog.Logger                    `yaml:"-"`
	// Now is the clock of the edit window; default time.Now.
	Now func() time.Time `yaml:"-"`
	// ReconnectMin and ReconnectMax bound the reconnect backoff (defaults
	// 2s and 5m).
	ReconnectMin, ReconnectMax time.Duration `yaml:"-"`
}

// Defaults are the whatsapp: section's defaults before the file is read:
// all of them, since Check must refuse a written zero rather than read it
// as "use the default" (edit_window: 0s means never edit).
func Defaults() Config {
	return Config{Cards: CardsPoll, DMPolicy: kit.DMPairing, EditWindow: 15 * time.Minute,
		Limits: kit.Limits{PerChatInterval: 2 * time.Second, GroupPerMinute: 10, GlobalPerSecond: 1}}
}

// checkCards checks whatsapp.cards.
func checkCards(v string) error {
	if v != CardsPoll && v != CardsNumbered {
		return fmt.Errorf("whatsapp.cards: %q is neither poll nor numbered", v)
	}
	return nil
}

// Check validates the whatsapp.* keys (every configuration load runs it,
// enabled or not), naming the bad one.
func (c *Config) Check() error {
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("whatsapp.%s: %s", key, fmt.Sprintf(format, a...))
	}
	if err := checkCards(c.Cards); err != nil {
		return err
	}
	if err := kit.CheckDMPolicy("whatsapp.dm_policy", c.DMPolicy); err != nil {
		return err
	}
	if d := c.EditWindow; d < 0 || d > 20*time.Minute {
		return bad("edit_window", "%s must be between 0s (never edit: always reply) and 20m (WhatsApp refuses later edits)", d)
	}
	if d := c.Limits.PerChatInterval; d < 500*time.Millisecond {
		return bad("limits.per_chat_interval", "%s is below 500ms: WhatsApp bans numbers that send like bots (default 2s)", d)
	}
	if n := c.Limits.GroupPerMinute; n < 1 || n > 60 {
		return bad("limits.group_per_minute", "%d must be between 1 and 60 (default 10)", n)
	}
	if n := c.Limits.GlobalPerSecond; n < 1 || n > 10 {
		return bad("limits.global_per_second", "%d must be between 1 and 10 (default 1)", n)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "whatsapp"
	}
	if c.Instance == "" {
		c.Instance = core.NewID()
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
	if err := checkCards(c.Cards); err != nil {
		return err
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
