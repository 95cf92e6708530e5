package config

import (
	"fmt"
	"strings"
)

// Discord configures the Discord channel (docs/discord.md). cmd/silas maps
// it onto adapters/discord.Config, whose validation runs at serve and
// `silas config check` and names the key (discord.<key>) it refuses.
type Discord struct {
	// Enabled runs the channel (discord.token and discord.application_id
	// are then required).
	Enabled bool `yaml:"enabled"`
	// Mode is gateway (default: the bot's websocket receives messages and
	// interactions) or http (interactions are POSTed to
	// /discord/interactions on http.listen; no gateway connection, so no
	// plain messages).
	Mode string `yaml:"mode"`
	// Token is the bot token from the developer portal, or file:/path.
	Token string `yaml:"token"`
	// ApplicationID is the application's id (a snowflake).
	ApplicationID string `yaml:"application_id"`
	// PublicKey is the application's Ed25519 public key (hex; http mode),
	// or file:/path.
	PublicKey string `yaml:"public_key"`
	// BaseURL is the REST API (default https://discord.com/api/v10); the
	// gateway URL comes from its GET /gateway/bot.
	BaseURL string `yaml:"base_url"`
	// Guilds is the optional allowlist of guilds ("<guild id>") and
	// channels ("<guild id>/<channel id>") the bot answers in; empty: all.
	Guilds []string `yaml:"guilds"`
	// DMPolicy is what direct messages from unknown senders get: pairing,
	// allowlist, open or disabled.
	DMPolicy string `yaml:"dm_policy"`
}

// defaultDiscord sets the discord.* defaults that validation must see; the
// adapter fills in the others (mode, base_url).
func defaultDiscord(c *Config) { c.Discord.DMPolicy = "pairing" }

// validateDiscord checks what does not need the adapter (which validates
// the rest, naming the key, at serve and `config check`).
func validateDiscord(c *Config) error {
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, a...))
	}
	switch c.Discord.DMPolicy {
	case "pairing", "allowlist", "open", "disabled":
	default:
		return bad("discord.dm_policy", "%q is not pairing, allowlist, open or disabled", c.Discord.DMPolicy)
	}
	if !c.Discord.Enabled {
		return nil
	}
	if strings.TrimSpace(c.Discord.Token) == "" {
		return bad("discord.token", "required when discord.enabled is true (the bot token from the developer portal, or file:/path)")
	}
	if strings.TrimSpace(c.Discord.ApplicationID) == "" {
		return bad("discord.application_id", "required when discord.enabled is true (General Information → Application ID in the developer portal)")
	}
	return nil
}
