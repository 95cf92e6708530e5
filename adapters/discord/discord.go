// Package discord is the Discord channel: people talk to Silas in direct
// messages and in guild channels (slash commands, mentions, replies to the
// bot) and decide cards with buttons. It is built on
// github.com/bwmarrin/discordgo for the REST API and the gateway websocket
// and implements core.Channel plus the optional core.TapAnswerer,
// core.MessageDeleter, core.DirectMessenger and
// core.CapabilityReporter.
//
// Receiving: the gateway (default) or, in http mode, Discord POSTing
// interactions to /discord/interactions, each checked against the
// application's Ed25519 key and a 5-minute timestamp window before it is
// parsed. A gateway message is handed to core.Inbox.Deliver first and only
// then counted as seen (the conversation's catch-up cursor moves); after
// every READY or accepted RESUME, and at process start, the adapter fetches
// what each known conversation received since its cursor
// (GET /channels/{id}/messages?after=), so messages sent while the socket
// was down or the process was stopped are delivered, once (the event id is
// the message id) and in order.
//
// The adapter never decides trust: it reports who sent what, where, and how
// it was authenticated (core.Evidence).
//
// See docs/discord.md for setup and configuration.
package discord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
)

// Adapter is the Discord channel.
type Adapter struct {
	cfg  resolved
	log  *slog.Logger
	now  func() time.Time
	rest *discordgo.Session // REST only; the gateway has its own sessions
	lim  *kit.Limiter[string]

	mu      sync.Mutex
	inbox   core.Inbox
	botID   string
	moved   kit.Moves                    // edits of a gone message go to its replacement (its own lock)
	shown   map[core.MessageRef][32]byte // what each of our messages shows now
	splits  *kit.Splits
	ixs     *interactions
	convs   *conversations
	running bool

	// queue carries gateway messages and catch-up requests to the one
	// worker that delivers them, in order.
	queue chan work
	// instance names this process as the gateway lease's holder; hold is
	// the current holding (lease.go).
	instance string
	hold     holding
	// answerBy is when an unanswered interaction is acknowledged with a
	// deferred response. Discord allows 3 s including the network; a busy
	// host's timers can fire half a second late, so a full second is kept.
	answerBy time.Duration
	// inbound is the inbound liveness (Health): gateway events and
	// heartbeat ACKs, with the ACK latency as the platform probe.
	inbound kit.Liveness
}

var (
	_ core.Channel            = (*Adapter)(nil)
	_ core.TapAnswerer        = (*Adapter)(nil)
	_ core.MessageDeleter     = (*Adapter)(nil)
	_ core.DirectMessenger    = (*Adapter)(nil)
	_ core.CapabilityReporter = (*Adapter)(nil)
	_ core.HealthReporter     = (*Adapter)(nil)
	_ http.Handler            = (*Adapter)(nil)
)

// New builds the adapter. It validates cfg and makes no network request.
func New(cfg Config) (*Adapter, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	a := &Adapter{
		cfg: r, now: r.Now,
		log:      r.Logger.With(slog.String("channel", string(r.Name))),
		shown:    map[core.MessageRef][32]byte{},
		splits:   kit.NewSplits(r.Now),
		queue:    make(chan work, 4096),
		answerBy: 2 * time.Second,
		instance: instanceOf(cfg),
	}
	a.ixs = newInteractions()
	a.convs = newConversations(r.State, r.Name)
	a.rest, err = a.newSession()
	if err != nil {
		return nil, err
	}
	// Discord: 5 messages per 5 s per channel, 50 requests per second
	// overall. The limiter keeps one message in flight per channel and the
	// global pace; discordgo's per-route buckets (shared by every session)
	// follow the X-RateLimit headers on top, and a 429 pauses the channel.
	a.lim = kit.NewLimiter[string](kit.Limits{PerChatInterval: 200 * time.Millisecond, GlobalPerSecond: 45}, kit.RealClock{}, nil)
	return a, nil
}

// newSession builds a discordgo session that talks to cfg.BaseURL.
//
// discordgo builds its endpoint URLs from package-level variables
// (discordgo.EndpointAPI and the ones derived from it at init), so
// assigning EndpointAPI later changes nothing, and changing them would
// change every session in the process. Instead each session's HTTP client
// has a transport (rebase) that rewrites the "https://discord.com/api/v9/"
// prefix to base_url. The gateway URL is read from base_url's
// GET /gateway/bot (discordgo's Open asks GET /gateway; rebase sends
// that to /gateway/bot, whose answer has the same "url" field and is the
// endpoint bots are meant to use).
func (a *Adapter) newSession() (*discordgo.Session, error) {
	s, err := discordgo.New("Bot " + a.cfg.token)
	if err != nil {
		return nil, fmt.Errorf("discord: %w", err)
	}
	var inner http.RoundTripper = http.DefaultTransport
	if a.cfg.HTTPClient != nil && a.cfg.HTTPClient.Transport != nil {
		inner = a.cfg.HTTPClient.Transport
	}
	s.Client = &http.Client{Timeout: a.cfg.HTTPTimeout, Transport: rebase{base: a.cfg.BaseURL, next: inner}}
	// A 429 is the outbox's to wait out (core.RateLimitedError), not a
	// sleep inside a request.
	s.ShouldRetryOnRateLimit = false
	s.MaxRestRetries = 0
	s.ShouldReconnectOnError = false // the adapter's supervisor reconnects
	s.SyncEvents = true              // handlers run in order on the reader
	s.StateEnabled = false
	s.LogLevel = discordgo.LogError
	s.Identify.Intents = Intents
	if a.rest != nil {
		// One set of route buckets for every session.
		s.Ratelimiter = a.rest.Ratelimiter
	}
	return s, nil
}

// Intents are the gateway intents Silas asks for: guild metadata, guild
// messages and direct messages. Message Content is privileged and not
// requested: Discord still includes the content of DMs and of messages
// that mention the bot, which is all Silas reads (docs/discord.md).
const Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages | discordgo.IntentsDirectMessages

// rebase rewrites discordgo's fixed API prefix to the configured base URL,
// and pads the rate-limit reset discordgo reads from each answer
// (padResetAfter).
type rebase struct {
	base string
	next http.RoundTripper
}

func (t rebase) RoundTrip(r *http.Request) (*http.Response, error) {
	u := r.URL.String()
	if rest, ok := strings.CutPrefix(u, discordgo.EndpointAPI); ok {
		if rest == "gateway" {
			rest = "gateway/bot"
		}
		nu, err := r.URL.Parse(t.base + "/" + rest)
		if err != nil {
			return nil, err
		}
		r = r.Clone(r.Context())
		r.URL = nu
		r.Host = nu.Host
	}
	resp, err := t.next.RoundTrip(r)
	if err == nil {
		padResetAfter(resp.Header)
	}
	return resp, err
}

// resetMargin is added to every X-RateLimit-Reset-After before discordgo
// reads it. A bucket that ran out waits exactly until its reset, and
// "exactly" falls short: the header has millisecond precision, and
// discordgo turns it into a duration by truncating the fraction's product
// with 1000 (1.003 s becomes 1.002 s; a third of the values above a
// second lose a millisecond). The next message then reaches Discord up to
// a millisecond before the bucket resets: one over the limit, a 429
// that counts toward the invalid-request limit. discord.js waits 50 ms
// past every reset for the same reason (its REST "offset").
const resetMargin = 50 * time.Millisecond

func padResetAfter(h http.Header) {
	v := h.Get("X-RateLimit-Reset-After")
	if v == "" {
		return
	}
	sec, err := strconv.ParseFloat(v, 64)
	if err != nil || sec < 0 {
		return // discordgo reports a malformed header itself
	}
	h.Set("X-RateLimit-Reset-After", strconv.FormatFloat(sec+resetMargin.Seconds(), 'f', 3, 64))
}

// Name implements core.Channel.
func (a *Adapter) Name() core.ChannelName { return a.cfg.Name }

var _ core.Paced = (*Adapter)(nil)

// ConversationPace is the minimum time between two messages to one channel
// (core.Paced): another instance takes a conversation's lane over from
// this one only after it (core/outbox/lanes.go).
func (a *Adapter) ConversationPace() time.Duration { return a.lim.PerChatInterval() }

// Mode is "gateway" or "http".
func (a *Adapter) Mode() string { return a.cfg.Mode }

// InteractionsPath is where serve mounts the adapter in http mode; "" in
// gateway mode.
func (a *Adapter) InteractionsPath() string {
	if a.cfg.Mode == ModeHTTP {
		return InteractionsPath
	}
	return ""
}

// Capabilities implements core.CapabilityReporter.
func (a *Adapter) Capabilities() core.Capabilities {
	return core.Capabilities{EditInPlace: true, Buttons: true, MaxTextLen: MaxMessageLen}
}

// DirectConversation implements core.DirectMessenger for users whose DM
// channel the adapter has seen (Discord names a DM by its channel id, which
// only a request or an earlier message reveals).
func (a *Adapter) DirectConversation(id core.IdentityID) (core.ConversationID, bool) {
	p, user, ok := strings.Cut(string(id), ":")
	if !ok || p != "discord" || !snowflakeRe.MatchString(user) {
		return "", false
	}
	ch, ok := a.convs.dmOf(user)
	if !ok {
		return "", false
	}
	return conversation(a.cfg.Name, ch), true
}

func (a *Adapter) me() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.botID
}

func (a *Adapter) setMe(id string) {
	a.mu.Lock()
	a.botID = id
	a.mu.Unlock()
}

func (a *Adapter) currentInbox() core.Inbox {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inbox
}

// Run implements core.Channel: it receives events until ctx ends. In
// gateway mode it keeps the websocket connected; in http mode interactions
// arrive through ServeHTTP while Run is running.
func (a *Adapter) Run(ctx context.Context, in core.Inbox) error {
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		return errors.New("discord: Run is already running")
	}
	a.running, a.inbox = true, in
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.running, a.inbox = false, nil
		a.mu.Unlock()
	}()
	if err := a.convs.load(ctx); err != nil {
		a.log.Warn("discord: could not load the conversation records; catch-up starts empty", slog.Any("err", err))
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.registerCommands(ctx)
	}()
	a.log.Info("discord channel running", slog.String("mode", a.cfg.Mode))
	if a.cfg.Mode == ModeHTTP {
		<-ctx.Done()
		return nil
	}
	a.runLeased(ctx, in)
	return nil
}
