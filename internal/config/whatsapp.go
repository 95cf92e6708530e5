package config

import (
	"fmt"
	"time"
)

// WhatsApp configures the WhatsApp channel (docs/whatsapp.md): a linked
// device (whatsmeow) of the owner's own or of a dedicated number. cmd/silas
// maps it onto adapters/whatsapp.Config, whose validation runs too. The
// device's keys live in PostgreSQL (schema whatsmeow), never in a file.
type WhatsApp struct {
	// Enabled runs the channel; `silas whatsapp link` must have linked a
	// device first.
	Enabled bool `yaml:"enabled"`
	// Cards is how approval cards look: poll (default: a WhatsApp poll
	// whose options are the card's choices) or numbered (a text card
	// answered by replying 1, 2, … quoting it). Either way "approve <card
	// id>" / "decline <card id>" work too.
	Cards string `yaml:"cards"`
	// DMPolicy is what direct messages from unknown senders get: pairing,
	// allowlist, open or disabled.
	DMPolicy string `yaml:"dm_policy"`
	// EditWindow is how long after sending a card its result is shown as an
	// edit; later, as a reply quoting it (WhatsApp allows edits for about
	// 15-20 minutes). Default 15m, at most 20m.
	EditWindow Duration `yaml:"edit_window"`
	// Typing shows "typing…" in the chat while a reply is sent.
	Typing bool `yaml:"typing"`
	// Limits are the outbound pacing. The defaults are deliberately
	// conservative: WhatsApp bans numbers that send like bots.
	Limits struct {
		// PerChatInterval is the least time between two messages (sends,
		// edits, polls) in one chat. Default 2s.
		PerChatInterval Duration `yaml:"per_chat_interval"`
		// GroupPerMinute caps messages to one group per minute. Default 10.
		GroupPerMinute int `yaml:"group_per_minute"`
		// GlobalPerSecond caps messages across all chats per second.
		// Default 1.
		GlobalPerSecond int `yaml:"global_per_second"`
	} `yaml:"limits"`
}

// whatsappDefaults sets the whatsapp.* defaults; a written zero must be
// refused by validation, not read as "use the default".
func whatsappDefaults(c *Config) {
	c.WhatsApp.Cards = "poll"
	c.WhatsApp.DMPolicy = "pairing"
	c.WhatsApp.EditWindow = Duration{15 * time.Minute}
	c.WhatsApp.Limits.PerChatInterval = Duration{2 * time.Second}
	c.WhatsApp.Limits.GroupPerMinute = 10
	c.WhatsApp.Limits.GlobalPerSecond = 1
}

// validateWhatsApp checks the whatsapp.* keys, naming the bad one.
func (c *Config) validateWhatsApp() error {
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, a...))
	}
	w := c.WhatsApp
	switch w.Cards {
	case "poll", "numbered":
	default:
		return bad("whatsapp.cards", "%q is neither poll nor numbered", w.Cards)
	}
	switch w.DMPolicy {
	case "pairing", "allowlist", "open", "disabled":
	default:
		return bad("whatsapp.dm_policy", "%q is not pairing, allowlist, open or disabled", w.DMPolicy)
	}
	if d := w.EditWindow.Duration; d < 0 || d > 20*time.Minute {
		return bad("whatsapp.edit_window", "%s must be between 0s (never edit: always reply) and 20m (WhatsApp refuses later edits)", d)
	}
	if d := w.Limits.PerChatInterval.Duration; d < 500*time.Millisecond {
		return bad("whatsapp.limits.per_chat_interval", "%s is below 500ms: WhatsApp bans numbers that send like bots (default 2s)", d)
	}
	if n := w.Limits.GroupPerMinute; n < 1 || n > 60 {
		return bad("whatsapp.limits.group_per_minute", "%d must be between 1 and 60 (default 10)", n)
	}
	if n := w.Limits.GlobalPerSecond; n < 1 || n > 10 {
		return bad("whatsapp.limits.global_per_second", "%d must be between 1 and 10 (default 1)", n)
	}
	return nil
}
