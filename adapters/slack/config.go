package slack

import (
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
	// ModeSocket receives over Socket Mode: an outbound WebSocket the app
	// token opens. It needs no public address.
	ModeSocket = "socket"
	// ModeHTTP has Slack POST events, interactions and slash commands to
	// /slack/events, /slack/interactions and /slack/commands on http.listen.
	ModeHTTP = "http"
)

// DefaultBaseURL is Slack's Web API.
const DefaultBaseURL = "https://slack.com/api/"

// HTTP endpoints of HTTP mode (relative to http.listen's origin).
const (
	PathEvents       = "/slack/events"
	PathInteractions = "/slack/interactions"
	PathCommands     = "/slack/commands"
)

// Evidence methods reported on turns (core.Evidence.Method).
const (
	MethodSocket    = "slack-socket-mode"
	MethodSignature = "slack-signature"
)

// Limits are the outbound rate limits the adapter keeps on its own, so that
// Slack rarely has to answer 429. Zero values take the defaults, which
// follow Slack's documented limits.
type Limits struct {
	// PerChannelInterval is the minimum time between two calls (posts,
	// edits, ephemeral notices, deletes) in one channel. YAML
	// slack.limits.per_channel_interval; default 1s (chat.postMessage
	// allows about one message per second per channel).
	PerChannelInterval time.Duration `yaml:"per_channel_interval"`
	// GlobalPerSecond caps calls across all channels per second. YAML
	// slack.limits.global_per_second; default 20.
	GlobalPerSecond int `yaml:"global_per_second"`
	// UpdatePerMinute caps chat.update and chat.delete calls per minute
	// (Slack's Tier 3: 50+). YAML slack.limits.update_per_minute; default 50.
	UpdatePerMinute int `yaml:"update_per_minute"`
	// EphemeralPerMinute caps chat.postEphemeral calls per minute (Tier 4:
	// 100+). YAML slack.limits.ephemeral_per_minute; default 100.
	EphemeralPerMinute int `yaml:"ephemeral_per_minute"`
}

// Config configures the adapter: the slack: section of the configuration
// file (docs/slack.md), decoded straight into it, plus the wiring serve
// adds (yaml:"-"). The YAML key of each field is given in its comment;
// zero values take the defaults named there.
type Config struct {
	// Enabled runs the channel under `silas serve` (slack.bot_token is then
	// required). YAML slack.enabled.
	Enabled bool `yaml:"enabled"`
	// Name is the channel name; conversations are "<name>:<channel id>" or
	// "<name>:<channel id>:<thread ts>". Default "slack". Identities are
	// always "slack:<user id>".
	Name core.ChannelName `yaml:"-"`
	// Mode is "socket" (default) or "http". YAML slack.mode.
	Mode string `yaml:"mode"`
	// BotToken is the bot user OAuth token (xoxb-…), or "file:/path".
	// Required. YAML slack.bot_token.
	BotToken string `yaml:"bot_token"`
	// AppToken is the app-level token (xapp-…) with connections:write, or
	// "file:/path". Required in socket mode. YAML slack.app_token.
	AppToken string `yaml:"app_token"`
	// SigningSecret verifies HTTP-mode requests, or "file:/path". Required
	// in http mode. YAML slack.signing_secret.
	SigningSecret string `yaml:"signing_secret"`
	// BaseURL is the Web API (default https://slack.com/api/; http:// is
	// accepted for tests and local proxies). YAML slack.base_url.
	BaseURL string `yaml:"base_url"`
	// TeamID pins the workspace (T…); "" learns it with auth.test at start.
	// Events from any other workspace are refused. YAML slack.team_id.
	TeamID string `yaml:"team_id"`
	// HTTPTimeout bounds every Web API request (1s-5m, default 30s). YAML
	// slack.http_timeout.
	HTTPTimeout time.Duration `yaml:"http_timeout"`
	// PingInterval is how often a Socket Mode connection is pinged
	// (100ms-60s, default 20s). YAML slack.ping_interval.
	PingInterval time.Duration `yaml:"ping_interval"`
	// PingTimeout: a Socket Mode connection that has received nothing
	// (pong, ping, event) for PingInterval+PingTimeout is closed and
	// replaced (100ms-60s, default 30s, and PingInterval+PingTimeout at
	// most 60s; with the defaults a half-open socket is replaced within
	// 50s). YAML slack.ping_timeout.
	PingTimeout time.Duration `yaml:"ping_timeout"`
	// DMPolicy is what direct messages from unknown senders get: pairing
	// (default), allowlist, open or disabled. The core applies it. YAML
	// slack.dm_policy.
	DMPolicy string `yaml:"dm_policy"`
	// Limits are the outbound rate limits. YAML slack.limits.*.
	Limits Limits `yaml:"limits"`

	// State keeps the threads the bot started by answering a mention, so
	// that replies there need no mention after a restart either (core/store
	// implements it); nil keeps them in memory only.
	State core.StateStore `yaml:"-"`
	// Leases, when set, holds the Socket Mode connection under the lease
	// "slack/<name>" (lease.go): only its holder opens a socket. LeaseTTL
	// is the lease's lifetime (lease.DefaultTTL); Instance names this
	// process as its holder (serve: lease.InstanceID(); default a fresh
	// id).
	Leases   lease.Store   `yaml:"-"`
	LeaseTTL time.Duration `yaml:"-"`
	Instance string        `yaml:"-"`

	// HTTPClient replaces the HTTP client (tests); its Timeout is ignored in
	// favour of HTTPTimeout.
	HTTPClient *http.Client `yaml:"-"`
	Logger     *slog.Logger `yaml:"-"`
	// Now is the clock (tests inject one); default time.Now.
	Now func() time.Time `yaml:"-"`
	// Clock is the rate limiters' clock, which they wait on; default the
	// wall clock. Tests that run time faster pass the same clock to the
	// fake Slack.
	Clock kit.Clock `yaml:"-"`
}

const (
	defaultHTTPTimeout  = 30 * time.Second
	defaultPingInterval = 20 * time.Second
	defaultPingTimeout  = 30 * time.Second
	maxSilence          = 60 * time.Second
	defaultPerChannel   = time.Second
	defaultGlobal       = 20
	defaultUpdate       = 50
	defaultEphemeral    = 100
)

var (
	botTokenRe = lazyre.New(`^xoxb-[A-Za-z0-9-]{8,250}$`)
	appTokenRe = lazyre.New(`^xapp-[A-Za-z0-9-]{8,250}$`)
	secretRe   = lazyre.New(`^[A-Za-z0-9]{16,128}$`)
	teamRe     = lazyre.New(`^[TE][A-Z0-9]{2,30}$`)
)

// Defaults are the slack: section's defaults before the file is read. Most
// keys stay zero and take withDefaults' values; these two are set here
// because Check must tell a written value from "not set" (a written 0s
// interval is refused, not read as the default).
func Defaults() Config {
	return Config{DMPolicy: kit.DMPairing, Limits: Limits{PerChannelInterval: defaultPerChannel}}
}

// Check validates the keys that need no secret (every configuration load
// runs it, enabled or not), naming the key as slack.<key>; Validate checks
// the rest.
func (c *Config) Check() error {
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("slack.%s: %s", key, fmt.Sprintf(format, a...))
	}
	if err := kit.CheckDMPolicy("slack.dm_policy", c.DMPolicy); err != nil {
		return err
	}
	switch c.Mode {
	case "", ModeSocket, ModeHTTP:
	default:
		return bad("mode", "%q is neither socket nor http", c.Mode)
	}
	if d := c.Limits.PerChannelInterval; d <= 0 {
		return bad("limits.per_channel_interval", "%s must be positive (Slack allows about one message per second per channel; default 1s)", d)
	}
	if !c.Enabled {
		return nil
	}
	if strings.TrimSpace(c.BotToken) == "" {
		return bad("bot_token", "required when slack.enabled is true (the Bot User OAuth Token xoxb-…, or file:/path)")
	}
	if c.Mode == ModeHTTP {
		if strings.TrimSpace(c.SigningSecret) == "" {
			return bad("signing_secret", "required when slack.mode is http (Basic Information → Signing Secret, or file:/path)")
		}
	} else if strings.TrimSpace(c.AppToken) == "" {
		return bad("app_token", "required in socket mode (an app-level token xapp-… with connections:write, or file:/path)")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "slack"
	}
	if c.Instance == "" {
		c.Instance = core.NewID()
	}
	if c.Mode == "" {
		c.Mode = ModeSocket
	}
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if !strings.HasSuffix(c.BaseURL, "/") {
		// slack-go appends the method name to the URL as is.
		c.BaseURL += "/"
	}
	if c.HTTPTimeout == 0 {
		c.HTTPTimeout = defaultHTTPTimeout
	}
	if c.PingInterval == 0 {
		c.PingInterval = defaultPingInterval
	}
	if c.PingTimeout == 0 {
		c.PingTimeout = defaultPingTimeout
	}
	if c.Limits.PerChannelInterval == 0 {
		c.Limits.PerChannelInterval = defaultPerChannel
	}
	if c.Limits.GlobalPerSecond == 0 {
		c.Limits.GlobalPerSecond = defaultGlobal
	}
	if c.Limits.UpdatePerMinute == 0 {
		c.Limits.UpdatePerMinute = defaultUpdate
	}
	if c.Limits.EphemeralPerMinute == 0 {
		c.Limits.EphemeralPerMinute = defaultEphemeral
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Clock == nil {
		c.Clock = kit.RealClock{}
	}
	return c
}

// Validate checks the configuration (after defaults) and names the bad key
// as slack.<key>. It reads "file:" secrets to check them but never puts a
// secret value in an error.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolved is a validated configuration with its secrets read.
type resolved struct {
	Config
	botToken string
	appToken string
	signing  string
}

func (c Config) resolve() (resolved, error) {
	c = c.withDefaults()
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("slack.%s: %s", key, fmt.Sprintf(format, a...))
	}
	r := resolved{Config: c}
	var err error
	if r.botToken, err = kit.ReadSecret("slack.bot_token", c.BotToken); err != nil {
		return r, err
	}
	switch {
	case r.botToken == "":
		return r, bad("bot_token", "is required (the Bot User OAuth Token, xoxb-…, or file:/path)")
	case !botTokenRe.MatchString(r.botToken):
		// Never echo the value: it may be a real token with a typo.
		return r, bad("bot_token", "does not look like a bot token (xoxb-…); an xapp- token belongs in slack.app_token")
	}
	if err := kit.CheckBaseURL("slack.base_url", c.BaseURL, DefaultBaseURL); err != nil {
		return r, err
	}
	if c.TeamID != "" && !teamRe.MatchString(c.TeamID) {
		return r, bad("team_id", "%q is not a Slack workspace id (T… or E…)", c.TeamID)
	}
	if c.HTTPTimeout < time.Second || c.HTTPTimeout > 5*time.Minute {
		return r, bad("http_timeout", "%s is outside 1s-5m", c.HTTPTimeout)
	}
	if c.PingInterval < 100*time.Millisecond || c.PingInterval > time.Minute {
		return r, bad("ping_interval", "%s is outside 100ms-60s", c.PingInterval)
	}
	if c.PingTimeout < 100*time.Millisecond || c.PingTimeout > time.Minute {
		return r, bad("ping_timeout", "%s is outside 100ms-60s", c.PingTimeout)
	}
	if w := c.PingInterval + c.PingTimeout; w > maxSilence {
		// A half-open socket must be replaced within 75 s: silence is
		// noticed after the window, the close and reconnect take seconds.
		return r, bad("ping_timeout", "ping_interval + ping_timeout is %s; at most %s, so that a silent connection is replaced within 75s", w, maxSilence)
	}
	l := c.Limits
	if l.PerChannelInterval < 0 || l.PerChannelInterval > time.Minute {
		return r, bad("limits.per_channel_interval", "%s is outside 0-1m", l.PerChannelInterval)
	}
	if l.GlobalPerSecond < 1 || l.GlobalPerSecond > 10000 {
		return r, bad("limits.global_per_second", "%d is outside 1-10000", l.GlobalPerSecond)
	}
	if l.UpdatePerMinute < 1 || l.UpdatePerMinute > 100000 {
		return r, bad("limits.update_per_minute", "%d is outside 1-100000", l.UpdatePerMinute)
	}
	if l.EphemeralPerMinute < 1 || l.EphemeralPerMinute > 100000 {
		return r, bad("limits.ephemeral_per_minute", "%d is outside 1-100000", l.EphemeralPerMinute)
	}
	switch c.Mode {
	case ModeSocket:
		if r.appToken, err = kit.ReadSecret("slack.app_token", c.AppToken); err != nil {
			return r, err
		}
		switch {
		case r.appToken == "":
			return r, bad("app_token", "is required in socket mode (an app-level token, xapp-…, with connections:write, or file:/path)")
		case !appTokenRe.MatchString(r.appToken):
			return r, bad("app_token", "does not look like an app-level token (xapp-…)")
		}
	case ModeHTTP:
		if r.signing, err = kit.ReadSecret("slack.signing_secret", c.SigningSecret); err != nil {
			return r, err
		}
		switch {
		case r.signing == "":
			return r, bad("signing_secret", "is required in http mode (Basic Information → Signing Secret, or file:/path)")
		case !secretRe.MatchString(r.signing):
			return r, bad("signing_secret", "does not look like a Slack signing secret (16-128 letters and digits)")
		}
	default:
		return r, bad("mode", "%q is neither socket nor http", c.Mode)
	}
	return r, nil
}
