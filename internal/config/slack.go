package config

import (
	"fmt"
	"strings"
	"time"
)

// Slack configures the Slack channel (docs/slack.md). cmd/silas maps it
// onto adapters/slack.Config, whose field docs give each key's range; zero
// values take the adapter's defaults, and the adapter's own validation runs
// at serve and `silas config check`.
type Slack struct {
	// Enabled runs the channel (slack.bot_token is then required).
	Enabled bool `yaml:"enabled"`
	// Mode is socket (default: Socket Mode, no public address needed) or
	// http (Slack POSTs to /slack/events, /slack/interactions and
	// /slack/commands on http.listen).
	Mode string `yaml:"mode"`
	// BotToken is the Bot User OAuth Token (xoxb-…), or file:/path.
	BotToken string `yaml:"bot_token"`
	// AppToken is the app-level token (xapp-…, connections:write) for
	// socket mode, or file:/path.
	AppToken string `yaml:"app_token"`
	// SigningSecret verifies http-mode requests, or file:/path.
	SigningSecret string `yaml:"signing_secret"`
	// BaseURL is the Web API (default https://slack.com/api/).
	BaseURL string `yaml:"base_url"`
	// TeamID pins the workspace (T…); "" learns it from the bot token.
	TeamID string `yaml:"team_id"`
	// HTTPTimeout bounds every Web API request.
	HTTPTimeout Duration `yaml:"http_timeout"`
	// PingInterval and PingTimeout: a Socket Mode connection silent for
	// their sum is replaced.
	PingInterval Duration `yaml:"ping_interval"`
	PingTimeout  Duration `yaml:"ping_timeout"`
	// DMPolicy is what direct messages from unknown senders get: pairing,
	// allowlist, open or disabled.
	DMPolicy string `yaml:"dm_policy"`
	// Limits are the outbound rate limits.
	Limits struct {
		PerChannelInterval Duration `yaml:"per_channel_interval"`
		GlobalPerSecond    int      `yaml:"global_per_second"`
		UpdatePerMinute    int      `yaml:"update_per_minute"`
		EphemeralPerMinute int      `yaml:"ephemeral_per_minute"`
	} `yaml:"limits"`
}

// slackDefaults sets the defaults validation must see (the adapter fills
// in the others).
func slackDefaults(c *Config) {
	c.Slack.DMPolicy = "pairing"
	// A written 0s must be refused, not read as "use the default".
	c.Slack.Limits.PerChannelInterval = Duration{time.Second}
}

// validateSlack checks the slack.* keys config can check without reading
// secrets; the adapter's Validate checks the rest.
func (c *Config) validateSlack() error {
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, a...))
	}
	s := c.Slack
	switch s.DMPolicy {
	case "pairing", "allowlist", "open", "disabled":
	default:
		return bad("slack.dm_policy", "%q is not pairing, allowlist, open or disabled", s.DMPolicy)
	}
	switch s.Mode {
	case "", "socket", "http":
	default:
		return bad("slack.mode", "%q is neither socket nor http", s.Mode)
	}
	if d := s.Limits.PerChannelInterval.Duration; d <= 0 {
		return bad("slack.limits.per_channel_interval", "%s must be positive (Slack allows about one message per second per channel; default 1s)", d)
	}
	if !s.Enabled {
		return nil
	}
	if strings.TrimSpace(s.BotToken) == "" {
		return bad("slack.bot_token", "required when slack.enabled is true (the Bot User OAuth Token xoxb-…, or file:/path)")
	}
	if s.Mode == "http" {
		if strings.TrimSpace(s.SigningSecret) == "" {
			return bad("slack.signing_secret", "required when slack.mode is http (Basic Information → Signing Secret, or file:/path)")
		}
	} else if strings.TrimSpace(s.AppToken) == "" {
		return bad("slack.app_token", "required in socket mode (an app-level token xapp-… with connections:write, or file:/path)")
	}
	return nil
}
