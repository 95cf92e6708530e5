package discord

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
	"github.com/silas-gateway/silas/internal/lazyre"
)

// Receiving modes (Config.Mode).
const (
	// ModeGateway keeps the bot's gateway websocket open: messages (DMs,
	// mentions, replies) and interactions (slash commands, button taps)
	// arrive over it. No public address is needed.
	ModeGateway = "gateway"
	// ModeHTTP has Discord POST interactions to /discord/interactions on
	// http.listen (the application's Interactions Endpoint URL). No
	// gateway connection: only slash commands and taps reach Silas.
	ModeHTTP = "http"
)

// DefaultBaseURL is Discord's REST API.
const DefaultBaseURL = "https://discord.com/api/v10"

// InteractionsPath is where http mode serves the interactions endpoint.
const InteractionsPath = "/discord/interactions"

// Evidence methods reported on turns (core.Evidence.Method).
const (
	MethodGateway = "discord-gateway"
	MethodHTTP    = "discord-interaction-signature"
)

// Config configures the adapter: the discord: section of the configuration
// file (docs/discord.md), decoded straight into it, plus the wiring serve
// adds and test knobs (yaml:"-"). The YAML key of each field is given in
// its comment; zero values take the defaults named there.
type Config struct {
	// Enabled runs the channel under `silas serve` (discord.token and
	// discord.application_id are then required). YAML discord.enabled.
	Enabled bool `yaml:"enabled"`
	// Name is the channel name; conversations are "<name>:<channel id>".
	// Default "discord". Identities are always "discord:<user id>".
	Name core.ChannelName `yaml:"-"`
	// Token is the bot token, or "file:/path". Required. YAML discord.token.
	Token string `yaml:"token"`
	// ApplicationID is the application's snowflake. Required. YAML
	// discord.application_id.
	ApplicationID string `yaml:"application_id"`
	// PublicKey is the application's Ed25519 public key in hex, or
	// "file:/path". Required in http mode. YAML discord.public_key.
	PublicKey string `yaml:"public_key"`
	// Mode is "gateway" (default) or "http". YAML discord.mode.
	Mode string `yaml:"mode"`
	// BaseURL is the REST API (default https://discord.com/api/v10). The
	// gateway URL is read from its GET /gateway/bot. YAML discord.base_url.
	BaseURL string `yaml:"base_url"`
	// Guilds allow guilds ("<guild id>") or single channels ("<guild
	// id>/<channel id>"); empty allows every guild the bot is in. YAML
	// discord.guilds.
	Guilds []string `yaml:"guilds"`
	// DMPolicy is what direct messages from unknown senders get: pairing
	// (default), allowlist, open or disabled. The core applies it. YAML
	// discord.dm_policy.
	DMPolicy string `yaml:"dm_policy"`

	// State keeps the catch-up cursors and the gateway session durably
	// (core/store implements it). Without it they live in memory only.
	State core.StateStore `yaml:"-"`
	// Leases, when set, holds the gateway session under the lease
	// "discord/<name>" (lease.go): only its holder connects, and the
	// cursors and session it stores are fenced by its epoch. LeaseTTL is
	// the lease's lifetime (lease.DefaultTTL); Instance names this process
	// as its holder (serve: lease.InstanceID(); default a fresh id).
	Leases   lease.StateStore `yaml:"-"`
	LeaseTTL time.Duration    `yaml:"-"`
	Instance string           `yaml:"-"`
	// HTTPClient replaces the HTTP client's transport (tests).
	HTTPClient *http.Client `yaml:"-"`
	// HTTPTimeout bounds every REST request (default 20s).
	HTTPTimeout time.Duration `yaml:"-"`
	Logger      *slog.Logger  `yaml:"-"`
	// Now is the clock (tests inject one); default time.Now.
	Now func() time.Time `yaml:"-"`
	// TimestampWindow is how old (or how far ahead) an interaction's
	// X-Signature-Timestamp may be (default 5 minutes).
	TimestampWindow time.Duration `yaml:"-"`
	// ZombieAfter is how long the gateway may go without a heartbeat ACK
	// before the connection is replaced (default 50s).
	ZombieAfter time.Duration `yaml:"-"`
	// ReconnectMin and ReconnectMax bound the gateway's reconnect backoff
	// (defaults 1s and 2 minutes; tests scale them down).
	ReconnectMin, ReconnectMax time.Duration `yaml:"-"`
}

var (
	snowflakeRe = lazyre.New(`^[0-9]{1,20}$`)
	// tokenRe is deliberately loose (printable ASCII, no spaces): real
	// tokens are three dot-separated base64url parts, which doctor checks
	// (realTokenRe), but a self-hosted or test API may issue others.
	tokenRe     = lazyre.New(`^[!-~]{8,512}$`)
	realTokenRe = lazyre.New(`^[A-Za-z0-9_-]{10,100}\.[A-Za-z0-9_-]{3,20}\.[A-Za-z0-9_-]{10,200}$`)
)

// Defaults are the discord: section's defaults before the file is read;
// withDefaults fills in the others (mode, base_url).
func Defaults() Config { return Config{DMPolicy: kit.DMPairing} }

// Check validates the keys that need no secret (every configuration load
// runs it, enabled or not), naming the key as discord.<key>; Validate
// checks the rest.
func (c *Config) Check() error {
	if err := kit.CheckDMPolicy("discord.dm_policy", c.DMPolicy); err != nil {
		return err
	}
	if !c.Enabled {
		return nil
	}
	if strings.TrimSpace(c.Token) == "" {
		return errors.New("discord.token: required when discord.enabled is true (the bot token from the developer portal, or file:/path)")
	}
	if strings.TrimSpace(c.ApplicationID) == "" {
		return errors.New("discord.application_id: required when discord.enabled is true (General Information → Application ID in the developer portal)")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "discord"
	}
	if c.Mode == "" {
		c.Mode = ModeGateway
	}
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	if c.HTTPTimeout == 0 {
		c.HTTPTimeout = 20 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.TimestampWindow == 0 {
		c.TimestampWindow = 5 * time.Minute
	}
	if c.ZombieAfter == 0 {
		c.ZombieAfter = 50 * time.Second
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = time.Second
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = 2 * time.Minute
	}
	c.ReconnectMax = max(c.ReconnectMax, c.ReconnectMin)
	return c
}

// Validate checks the configuration (after defaults) and names the bad key
// as discord.<key>. It reads "file:" secrets but never puts a secret value
// in an error.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolved is a validated configuration with its secrets read.
type resolved struct {
	Config
	token  string
	pubKey ed25519.PublicKey
	// guilds and channels are the allowlist; both empty allows all.
	guilds   map[string]bool
	channels map[string]bool
}

func (c Config) resolve() (resolved, error) {
	c = c.withDefaults()
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("discord.%s: %s", key, fmt.Sprintf(format, a...))
	}
	r := resolved{Config: c, guilds: map[string]bool{}, channels: map[string]bool{}}
	var err error
	if r.token, err = kit.ReadSecret("discord.token", c.Token); err != nil {
		return r, err
	}
	r.token = strings.TrimPrefix(strings.TrimSpace(r.token), "Bot ")
	switch {
	case r.token == "":
		return r, bad("token", "is required (the bot token from the developer portal, or file:/path)")
	case !tokenRe.MatchString(r.token):
		// Never echo the value: it may be a real token with a typo.
		return r, bad("token", "does not look like a bot token (8-512 printable characters without spaces; Bot → Reset Token in the developer portal)")
	}
	if !snowflakeRe.MatchString(c.ApplicationID) {
		return r, bad("application_id", "%q is not an application id (digits; General Information → Application ID)", c.ApplicationID)
	}
	if err := kit.CheckBaseURL("discord.base_url", c.BaseURL, DefaultBaseURL); err != nil {
		return r, err
	}
	for _, g := range c.Guilds {
		gid, ch, hasCh := strings.Cut(strings.TrimSpace(g), "/")
		if !snowflakeRe.MatchString(gid) || (hasCh && !snowflakeRe.MatchString(ch)) {
			return r, bad("guilds", "%q is neither a guild id nor <guild id>/<channel id>", g)
		}
		if hasCh {
			r.channels[ch] = true
		} else {
			r.guilds[gid] = true
		}
	}
	switch c.Mode {
	case ModeGateway, ModeHTTP:
	default:
		return r, bad("mode", "%q is neither gateway nor http", c.Mode)
	}
	if c.Mode == ModeHTTP || c.PublicKey != "" {
		pk, err := kit.ReadSecret("discord.public_key", c.PublicKey)
		if err != nil {
			return r, err
		}
		raw, err := hex.DecodeString(strings.TrimSpace(pk))
		if err != nil || len(raw) != ed25519.PublicKeySize {
			return r, bad("public_key", "must be the application's public key: 64 hex digits (General Information → Public Key)")
		}
		r.pubKey = raw
	}
	if c.TimestampWindow < time.Second {
		return r, bad("timestamp_window", "%s is below 1s", c.TimestampWindow)
	}
	return r, nil
}

// allowedGuildChannel reports whether the bot answers in a guild channel.
func (r resolved) allowedGuildChannel(guild, channel string) bool {
	if len(r.guilds) == 0 && len(r.channels) == 0 {
		return true
	}
	return r.guilds[guild] || r.channels[channel]
}
