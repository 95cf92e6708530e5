package telegram

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/lazyre"
)

// Receiving modes (Config.Mode).
const (
	// ModePolling long-polls getUpdates. It needs no public address.
	ModePolling = "polling"
	// ModeWebhook has Telegram POST updates to Config.WebhookURL (HTTPS).
	ModeWebhook = "webhook"
)

// DefaultBaseURL is Telegram's own Bot API server.
const DefaultBaseURL = "https://api.telegram.org"

// Evidence methods reported on turns (core.Evidence.Method).
const (
	MethodPolling = "telegram-polling"
	MethodWebhook = "telegram-webhook-secret"
)

// Limits are the outbound rate limits the adapter keeps on its own, so that
// Telegram rarely has to answer 429. Zero values take the defaults, which
// are Telegram's documented limits.
type Limits struct {
	// PerChatInterval is the minimum time between two messages (sends and
	// edits) in one chat. YAML telegram.limits.per_chat_interval; default 1s.
	PerChatInterval time.Duration `yaml:"per_chat_interval"`
	// GroupPerMinute caps messages to one group per minute. YAML
	// telegram.limits.group_per_minute; default 20.
	GroupPerMinute int `yaml:"group_per_minute"`
	// GlobalPerSecond caps messages across all chats per second. YAML
	// telegram.limits.global_per_second; default 30.
	GlobalPerSecond int `yaml:"global_per_second"`
}

// Config configures the adapter: the telegram: section of the
// configuration file (docs/telegram.md), decoded straight into it, plus
// the wiring serve adds (yaml:"-"). The YAML key of each field is given in
// its comment; zero values take the defaults named there.
type Config struct {
	// Enabled runs the channel under `silas serve` (telegram.token is then
	// required). YAML telegram.enabled.
	Enabled bool `yaml:"enabled"`
	// Name is the channel name; conversations are "<name>:<chat id>".
	// Default "telegram". Identities are always "telegram:<user id>".
	Name core.ChannelName `yaml:"-"`
	// Token is the bot token from @BotFather, or "file:/path" to read it from
	// a file. Required. YAML telegram.token (env SILAS_TELEGRAM_TOKEN).
	Token string `yaml:"token"`
	// Mode is "polling" (default) or "webhook". YAML telegram.mode.
	Mode string `yaml:"mode"`
	// WebhookURL is the public HTTPS URL Telegram posts updates to (webhook
	// mode). Telegram accepts ports 443, 80, 88 and 8443 only. Serve the
	// adapter (it is an http.Handler) at this URL's path. YAML
	// telegram.webhook_url.
	WebhookURL string `yaml:"webhook_url"`
	// WebhookSecret is the secret_token Telegram sends back in
	// X-Telegram-Bot-Api-Secret-Token: 24-256 characters of A-Z a-z 0-9 _ -,
	// or "file:/path". Required in webhook mode. YAML telegram.webhook_secret.
	WebhookSecret string `yaml:"webhook_secret"`
	// WebhookMaxConnections bounds Telegram's concurrent webhook requests
	// (1-100, default 40). YAML telegram.webhook_max_connections.
	WebhookMaxConnections int `yaml:"webhook_max_connections"`
	// BaseURL is the Bot API server (default https://api.telegram.org; set it
	// for a self-hosted telegram-bot-api server). YAML telegram.base_url.
	BaseURL string `yaml:"base_url"`
	// BotUsername is the bot's @username, used to tell whether a group
	// message addresses Silas. Empty: learned with getMe at start. YAML
	// telegram.bot_username.
	BotUsername string `yaml:"bot_username"`
	// AllowedUpdates are the update types requested from Telegram (default
	// message, callback_query; both are required). YAML
	// telegram.allowed_updates.
	AllowedUpdates []string `yaml:"allowed_updates"`
	// PollTimeout is the long-polling timeout of getUpdates (1s-50s, default
	// 30s). YAML telegram.poll_timeout.
	PollTimeout time.Duration `yaml:"poll_timeout"`
	// HTTPTimeout bounds every Bot API request other than the long poll
	// (1s-5m, default 30s). YAML telegram.http_timeout.
	HTTPTimeout time.Duration `yaml:"http_timeout"`
	// DMPolicy is what direct messages from unknown senders get: pairing
	// (default), allowlist, open or disabled. The core applies it. YAML
	// telegram.dm_policy.
	DMPolicy string `yaml:"dm_policy"`
	// Limits are the outbound rate limits. YAML telegram.limits.*.
	Limits Limits `yaml:"limits"`

	// State keeps the polling offset durably (core/store implements it).
	// Without it the offset lives in memory only and a restart relies on
	// the core's idempotent intake.
	State core.StateStore `yaml:"-"`
	// Leases, when set, puts polling under the lease "telegram/<name>"
	// (lease.go): only its holder polls, and the offset is written fenced
	// by its epoch. LeaseTTL is the lease's lifetime (lease.DefaultTTL).
	Leases   LeaseStore    `yaml:"-"`
	LeaseTTL time.Duration `yaml:"-"`
	// Instance names this process as the lease's holder (serve:
	// lease.InstanceID(); default a fresh id per adapter).
	Instance string `yaml:"-"`
	// HTTPClient replaces the HTTP client (tests); its Timeout is ignored in
	// favour of HTTPTimeout and PollTimeout.
	HTTPClient *http.Client `yaml:"-"`
	Logger     *slog.Logger `yaml:"-"`
	// Now is the clock (tests inject one); default time.Now.
	Now func() time.Time `yaml:"-"`
	// LimitClock is the outbound limiter's clock, on which it measures
	// intervals and sleeps (tests run it faster than real time); default
	// the wall clock.
	LimitClock kit.Clock `yaml:"-"`
}

// Defaults are the telegram: section's defaults before the file is read.
// Most keys stay zero and take withDefaults' values; these two are set here
// because Check must tell a written value from "not set" (a written 0s
// interval is refused, not read as the default).
func Defaults() Config {
	return Config{DMPolicy: kit.DMPairing, Limits: Limits{PerChatInterval: defaultPerChat}}
}

// Check validates the keys that need no secret (every configuration load
// runs it, enabled or not), naming the key as telegram.<key>; Validate
// checks the rest.
func (c *Config) Check() error {
	if err := kit.CheckDMPolicy("telegram.dm_policy", c.DMPolicy); err != nil {
		return err
	}
	if d := c.Limits.PerChatInterval; d <= 0 {
		// withDefaults treats 0 as "use the 1s default"; a written 0 must
		// not silently mean 1s, and Telegram itself allows about one
		// message per second per chat, so no pause is not offered.
		return fmt.Errorf("telegram.limits.per_chat_interval: %s must be positive (Telegram allows about one message per second per chat; default 1s)", d)
	}
	if c.Enabled && strings.TrimSpace(c.Token) == "" {
		return errors.New("telegram.token: required when telegram.enabled is true (the token from @BotFather, or file:/path)")
	}
	return nil
}

// Defaults.
const (
	defaultPollTimeout    = 30 * time.Second
	defaultHTTPTimeout    = 30 * time.Second
	defaultMaxConnections = 40
	defaultPerChat        = time.Second
	defaultGroupPerMinute = 20
	defaultGlobalPerSec   = 30
)

// DefaultAllowedUpdates are the update types Silas handles.
var DefaultAllowedUpdates = []string{"message", "callback_query"}

// knownUpdates are the allowed_updates values Telegram documents.
var knownUpdates = []string{
	"message", "edited_message", "channel_post", "edited_channel_post", "business_connection", "business_message",
	"edited_business_message", "deleted_business_messages", "message_reaction", "message_reaction_count", "inline_query",
	"chosen_inline_result", "callback_query", "shipping_query", "pre_checkout_query", "purchased_paid_media", "poll",
	"poll_answer", "my_chat_member", "chat_member", "chat_join_request", "chat_boost", "removed_chat_boost",
}

var (
	tokenRe    = lazyre.New(`^[0-9]{1,20}:[A-Za-z0-9_-]{10,200}$`)
	secretRe   = lazyre.New(`^[A-Za-z0-9_-]{24,256}$`)
	usernameRe = lazyre.New(`^[A-Za-z][A-Za-z0-9_]{3,31}$`)
)

// webhookPorts are the ports Telegram's own servers deliver webhooks to.
var webhookPorts = []string{"443", "80", "88", "8443"}

// withDefaults returns c with zero values replaced by defaults.
func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "telegram"
	}
	if c.Mode == "" {
		c.Mode = ModePolling
	}
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	c.BotUsername = strings.TrimPrefix(c.BotUsername, "@")
	if len(c.AllowedUpdates) == 0 {
		c.AllowedUpdates = slices.Clone(DefaultAllowedUpdates)
	}
	if c.WebhookMaxConnections == 0 {
		c.WebhookMaxConnections = defaultMaxConnections
	}
	if c.PollTimeout == 0 {
		c.PollTimeout = defaultPollTimeout
	}
	if c.HTTPTimeout == 0 {
		c.HTTPTimeout = defaultHTTPTimeout
	}
	if c.Limits.PerChatInterval == 0 {
		c.Limits.PerChatInterval = defaultPerChat
	}
	if c.Limits.GroupPerMinute == 0 {
		c.Limits.GroupPerMinute = defaultGroupPerMinute
	}
	if c.Limits.GlobalPerSecond == 0 {
		c.Limits.GlobalPerSecond = defaultGlobalPerSec
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.LimitClock == nil {
		c.LimitClock = kit.RealClock{}
	}
	return c
}

// Validate checks the configuration (after defaults) and names the bad key
// as telegram.<key>. It reads "file:" secrets to check them but never puts
// a secret value in an error.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolved is a validated configuration with its secrets read.
type resolved struct {
	Config
	token  string
	secret string
}

func (c Config) resolve() (resolved, error) {
	c = c.withDefaults()
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("telegram.%s: %s", key, fmt.Sprintf(format, a...))
	}
	r := resolved{Config: c}
	var err error
	if r.token, err = kit.ReadSecret("telegram.token", c.Token); err != nil {
		return r, err
	}
	switch {
	case r.token == "":
		return r, bad("token", "is required (the bot token from @BotFather, or file:/path)")
	case !tokenRe.MatchString(r.token):
		// Never echo the value: it may be a real token with a typo.
		return r, bad("token", "does not look like a bot token (<digits>:<letters, digits, _ and ->)")
	}
	if err := kit.CheckBaseURL("telegram.base_url", c.BaseURL, DefaultBaseURL); err != nil {
		return r, err
	}
	if c.BotUsername != "" && !usernameRe.MatchString(c.BotUsername) {
		return r, bad("bot_username", "%q is not a Telegram bot username (5-32 letters, digits and _)", c.BotUsername)
	}
	for _, u := range c.AllowedUpdates {
		if !slices.Contains(knownUpdates, u) {
			return r, bad("allowed_updates", "unknown update type %q", u)
		}
	}
	for _, need := range DefaultAllowedUpdates {
		if !slices.Contains(c.AllowedUpdates, need) {
			return r, bad("allowed_updates", "must include %q (messages and button taps are how people talk to Silas)", need)
		}
	}
	if c.PollTimeout < time.Second || c.PollTimeout > 50*time.Second {
		return r, bad("poll_timeout", "%s is outside 1s-50s", c.PollTimeout)
	}
	if c.HTTPTimeout < time.Second || c.HTTPTimeout > 5*time.Minute {
		return r, bad("http_timeout", "%s is outside 1s-5m", c.HTTPTimeout)
	}
	if c.Limits.PerChatInterval < 0 || c.Limits.PerChatInterval > time.Minute {
		return r, bad("limits.per_chat_interval", "%s is outside 0-1m", c.Limits.PerChatInterval)
	}
	if c.Limits.GroupPerMinute < 1 || c.Limits.GroupPerMinute > 10000 {
		return r, bad("limits.group_per_minute", "%d is outside 1-10000", c.Limits.GroupPerMinute)
	}
	if c.Limits.GlobalPerSecond < 1 || c.Limits.GlobalPerSecond > 10000 {
		return r, bad("limits.global_per_second", "%d is outside 1-10000", c.Limits.GlobalPerSecond)
	}
	switch c.Mode {
	case ModePolling:
	case ModeWebhook:
		if c.WebhookURL == "" {
			return r, bad("webhook_url", "is required in webhook mode (the public HTTPS URL Telegram posts to)")
		}
		u, err := url.Parse(c.WebhookURL)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			return r, bad("webhook_url", "%q is not an absolute URL", c.WebhookURL)
		}
		if c.BaseURL == DefaultBaseURL {
			// Telegram's own servers only deliver to HTTPS on a few ports; a
			// self-hosted Bot API server (base_url) may allow more.
			if u.Scheme != "https" {
				return r, bad("webhook_url", "must be https:// (Telegram delivers webhooks over TLS only)")
			}
			if p := u.Port(); p != "" && !slices.Contains(webhookPorts, p) {
				return r, bad("webhook_url", "port %s is not one Telegram delivers to (443, 80, 88 or 8443)", p)
			}
			if ip := net.ParseIP(u.Hostname()); u.Hostname() == "localhost" || (ip != nil && (ip.IsLoopback() || ip.IsPrivate())) {
				return r, bad("webhook_url", "%s is not reachable from Telegram's servers", u.Hostname())
			}
		}
		if r.secret, err = kit.ReadSecret("telegram.webhook_secret", c.WebhookSecret); err != nil {
			return r, err
		}
		if !secretRe.MatchString(r.secret) {
			return r, bad("webhook_secret", "must be 24-256 characters of A-Z a-z 0-9 _ - (for example `openssl rand -hex 32`)")
		}
		if c.WebhookMaxConnections < 1 || c.WebhookMaxConnections > 100 {
			return r, bad("webhook_max_connections", "%d is outside 1-100", c.WebhookMaxConnections)
		}
	default:
		return r, bad("mode", "%q is neither polling nor webhook", c.Mode)
	}
	return r, nil
}
