// Package slack is the Slack channel: people talk to Silas in direct
// messages, by mentioning it in channels and threads, and with the /silas
// slash command, and decide cards with Block Kit buttons. It is built on
// github.com/slack-go/slack for Web API calls and payload types and
// implements core.Channel plus the optional core.TapAnswerer,
// core.TapCardAnswerer, core.MessageDeleter, core.DirectMessenger and
// core.CapabilityReporter.
//
// Receiving: Socket Mode (default) or signed HTTP requests. An event is
// acknowledged to Slack — the Socket Mode envelope acked, the HTTP request
// answered 2xx — only after core.Inbox.Deliver returned, i.e. after the
// turn is stored durably; a redelivered event has the same event id and is
// a no-op. Socket Mode keeps exactly one live connection: the previous
// socket is closed before a new one opens (Slack hands each event to any
// one open connection, so a leaked socket silently eats events), and a
// socket that stays silent past the ping timeout is replaced.
//
// The adapter never decides trust: it reports who sent what, where,
// authenticated how (core.Evidence). It must never deliver an HTTP request
// whose signature does not verify on the raw body, never deliver an event
// from another workspace, and never render user text as markup.
//
// See docs/slack.md for setup and configuration.
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slack-go/slack"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
)

// Adapter is the Slack channel.
type Adapter struct {
	cfg    resolved
	log    *slog.Logger
	now    func() time.Time
	api    *slack.Client
	appAPI *slack.Client // apps.connections.open with the app token
	lim    *kit.Limiter[string]
	// Method tiers: chat.update/chat.delete (Tier 3) and
	// chat.postEphemeral (Tier 4), per minute, workspace-wide.
	updTier *kit.Limiter[string]
	ephTier *kit.Limiter[string]
	method  string

	mu      sync.Mutex
	inbox   core.Inbox
	me      botInfo
	ready   chan struct{} // closed once auth.test answered
	threads threadSet
	moved   kit.Moves // edits of a gone message go to its replacement (its own lock)
	// dms maps a user id to the id of the app's DM with them, so that
	// limits and pauses apply to one key per real channel.
	dms map[string]string

	splits *kit.Splits

	// live counts open Socket Mode connections (never above one).
	live atomic.Int32
	// reported is num_connections from the last hello: the app's open
	// connections as Slack counts them, other processes' included.
	reported atomic.Int32
	// inbound is the inbound liveness (Health): in Socket Mode what Slack
	// sent on its own — hello, envelopes, its pings — never the pongs to
	// our own pings, which a socket Slack stopped feeding still answers.
	inbound kit.Liveness
}

var (
	_ core.Channel            = (*Adapter)(nil)
	_ core.TapAnswerer        = (*Adapter)(nil)
	_ core.MessageDeleter     = (*Adapter)(nil)
	_ core.DirectMessenger    = (*Adapter)(nil)
	_ core.CapabilityReporter = (*Adapter)(nil)
	_ core.HealthReporter     = (*Adapter)(nil)
)

// New builds the adapter. It validates cfg and makes no network request;
// Run learns the bot's identity and workspace with auth.test.
func New(cfg Config) (*Adapter, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	a := &Adapter{
		cfg: r, now: r.Now, log: r.Logger.With(slog.String("channel", string(r.Name))),
		ready: make(chan struct{}), threads: threadSet{m: map[string]time.Time{}}, dms: map[string]string{},
		splits: kit.NewSplits(r.Now), method: MethodSocket,
	}
	if r.Mode == ModeHTTP {
		a.method = MethodSignature
	}
	var transport http.RoundTripper
	if r.HTTPClient != nil {
		transport = r.HTTPClient.Transport
	}
	client := &http.Client{Timeout: r.HTTPTimeout, Transport: transport}
	a.api = slack.New(r.botToken, slack.OptionAPIURL(r.BaseURL), slack.OptionHTTPClient(client))
	if r.appToken != "" {
		a.appAPI = slack.New(r.botToken, slack.OptionAPIURL(r.BaseURL), slack.OptionHTTPClient(client), slack.OptionAppLevelToken(r.appToken))
	}
	// The limiters wait on Clock (the wall clock outside tests).
	a.lim = kit.NewLimiter[string](kit.Limits{PerChatInterval: r.Limits.PerChannelInterval, GlobalPerSecond: r.Limits.GlobalPerSecond}, r.Clock, nil)
	always := func(string) bool { return true }
	a.updTier = kit.NewLimiter(kit.Limits{GroupPerMinute: r.Limits.UpdatePerMinute}, r.Clock, always)
	a.ephTier = kit.NewLimiter(kit.Limits{GroupPerMinute: r.Limits.EphemeralPerMinute}, r.Clock, always)
	return a, nil
}

// Name implements core.Channel.
func (a *Adapter) Name() core.ChannelName { return a.cfg.Name }

var _ core.Paced = (*Adapter)(nil)

// ConversationPace is the minimum time between two messages to one channel
// (core.Paced): another instance takes a conversation's lane over from
// this one only after it (core/outbox/lanes.go).
func (a *Adapter) ConversationPace() time.Duration { return a.lim.PerChatInterval() }

// Mode is "socket" or "http".
func (a *Adapter) Mode() string { return a.cfg.Mode }

// LiveConnections is the number of open Socket Mode connections (0 or 1).
func (a *Adapter) LiveConnections() int { return int(a.live.Load()) }

// ReportedConnections is the number of the app's open Socket Mode
// connections Slack reported in the last hello (other processes' included;
// above 1 they receive some of the events). 0 before the first hello.
func (a *Adapter) ReportedConnections() int { return int(a.reported.Load()) }

// RegisterMetrics registers the adapter's gauges with reg:
// silas_slack_socket_connections (this process's open Socket Mode
// connections: 1 when receiving, 0 while reconnecting or in http mode) and
// silas_slack_reported_connections (the app's connections as Slack counts
// them in hello; above 1 another process shares the app token).
func (a *Adapter) RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "silas_slack_socket_connections",
			Help: "Open Socket Mode connections of this process (1 when receiving; 0 while reconnecting, or in http mode)."},
			func() float64 { return float64(a.LiveConnections()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "silas_slack_reported_connections",
			Help: "The app's open Socket Mode connections as Slack reported them in the last hello; above 1 another process uses the same app token."},
			func() float64 { return float64(a.ReportedConnections()) }),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("slack: registering metrics: %w", err)
		}
	}
	return nil
}

// Capabilities implements core.CapabilityReporter.
func (a *Adapter) Capabilities() core.Capabilities {
	return core.Capabilities{EditInPlace: true, Buttons: true, MaxTextLen: MaxMessageLen}
}

// DirectConversation implements core.DirectMessenger: chat.postMessage to a
// user id posts in the app's direct message with that user.
func (a *Adapter) DirectConversation(id core.IdentityID) (core.ConversationID, bool) {
	p, rest, ok := strings.Cut(string(id), ":")
	if !ok || p != "slack" || !idRe.MatchString(rest) || !strings.HasPrefix(rest, "U") && !strings.HasPrefix(rest, "W") {
		return "", false
	}
	return conversation(a.cfg.Name, rest, ""), true
}

func (a *Adapter) bot() botInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.me
}

// Run implements core.Channel: it learns who the bot is (auth.test), then
// receives over Socket Mode until ctx ends, or (http mode) serves the
// handlers Handler returns. Run returns nil when ctx ends.
func (a *Adapter) Run(ctx context.Context, in core.Inbox) error {
	a.mu.Lock()
	if a.inbox != nil {
		a.mu.Unlock()
		return errors.New("slack: Run is already running")
	}
	a.inbox = in
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.inbox = nil
		a.mu.Unlock()
	}()
	if err := a.learnIdentity(ctx); err != nil {
		return nil // ctx ended
	}
	a.loadThreads(ctx)
	me := a.bot()
	a.log.Info("slack channel running", slog.String("mode", a.cfg.Mode), slog.String("team", me.teamID), slog.String("bot_user", me.userID))
	if a.cfg.Mode == ModeHTTP {
		<-ctx.Done()
		return nil
	}
	a.runSocketLeased(ctx, in)
	return nil
}

// learnIdentity calls auth.test until it succeeds.
func (a *Adapter) learnIdentity(ctx context.Context) error {
	select {
	case <-a.ready:
		return nil
	default:
	}
	b := kit.Backoff{Min: 500 * time.Millisecond, Max: time.Minute}
	for {
		cctx, cancel := context.WithTimeout(ctx, a.cfg.HTTPTimeout)
		res, err := a.api.AuthTestContext(cctx)
		cancel()
		if err == nil && res.UserID != "" && res.TeamID != "" {
			if a.cfg.TeamID != "" && res.TeamID != a.cfg.TeamID {
				err = fmt.Errorf("the bot token belongs to workspace %s but slack.team_id is %s", res.TeamID, a.cfg.TeamID)
			} else {
				a.mu.Lock()
				a.me = botInfo{userID: res.UserID, botID: res.BotID, teamID: res.TeamID}
				a.mu.Unlock()
				close(a.ready)
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			err = errors.New("auth.test returned no user or team")
		}
		a.log.Error("slack: cannot check the bot token (auth.test); retrying", slog.Any("err", mapError("auth.test", err)))
		if err := kit.SleepCtx(ctx, b.Next()); err != nil {
			return err
		}
	}
}

// deliver hands one converted payload to the core. It returns an error
// only when the payload must not be acknowledged (Deliver failed and may
// succeed on a retry).
func (a *Adapter) deliver(ctx context.Context, in core.Inbox, r inbound, log *slog.Logger) error {
	switch r.act {
	case actIgnore:
		log.Debug("slack payload ignored", slog.String("reason", r.reason))
		return nil
	case actMalformed:
		log.Warn("slack payload malformed; dropped", slog.String("reason", r.reason))
		return nil
	case actForeign:
		log.Warn("slack payload from another workspace refused", slog.String("reason", r.reason))
		return nil
	case actUnknownButton:
		log.Warn("slack tap refused", slog.String("reason", r.reason))
		if r.tap != nil {
			a.ephemeralLater(ctx, *r.tap, "Unknown button.")
		}
		return nil
	}
	t := r.turn
	if t.Tap != nil && r.tap != nil {
		// The core answers the tap once, through what this handle names.
		t.TapHandle = r.tap.encode()
	}
	if t.ChatKind == core.ChatDirect {
		if r.tap != nil {
			a.learnDM(strings.TrimPrefix(string(t.Sender), "slack:"), r.tap.channel)
		} else if c, _, ok := strings.Cut(t.PlatformMessageID, ":"); ok {
			a.learnDM(strings.TrimPrefix(string(t.Sender), "slack:"), c)
		}
	}
	if r.thread != "" && t.ChatKind == core.ChatGroup {
		a.joinThread(ctx, strings.SplitN(strings.TrimPrefix(string(t.Conversation), string(a.cfg.Name)+":"), ":", 2)[0], r.thread)
	}
	res, err := in.Deliver(ctx, t)
	var rej *core.RejectedError
	switch {
	case errors.As(err, &rej):
		log.Warn("slack turn rejected by the core", slog.String("reason", rej.Reason))
		if t.Tap != nil && r.tap != nil {
			a.ephemeralLater(ctx, *r.tap, "Not accepted.")
		}
		return nil
	case err != nil:
		return err
	}
	if res.Duplicate {
		// A redelivered tap is answered by the stored one's answer.
		log.Debug("slack event was delivered before", slog.String("event_id", t.EventID))
	}
	return nil
}

// ephemeralLater answers a tap without holding up the acknowledgement
// (Slack wants it within 3 seconds; the notice may wait for a rate limit).
func (a *Adapter) ephemeralLater(ctx context.Context, h tapHandle, text string) {
	go func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.HTTPTimeout)
		defer cancel()
		_ = a.ephemeral(cctx, h, text)
	}()
}

// deliverRetrying retries a failed Deliver a few times before the payload
// is quarantined (core.Quarantiner) so that one poisoned event cannot block
// the others. false: not stored and not quarantined (do not acknowledge).
func (a *Adapter) deliverRetrying(ctx context.Context, in core.Inbox, r inbound, raw []byte, log *slog.Logger) bool {
	b := kit.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	for attempt := 1; ; attempt++ {
		err := a.deliver(ctx, in, r, log)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		var perm *core.PermanentError
		if errors.As(err, &perm) || attempt >= 5 {
			q, ok := in.(core.Quarantiner)
			if !ok {
				log.Error("slack: event dropped after failed deliveries (the inbox keeps no dead letters)", slog.Any("err", err))
				return true
			}
			if qerr := q.Quarantine(ctx, core.DeadLetter{Channel: a.cfg.Name, EventID: r.turn.EventID, Payload: raw, Error: err.Error(), Attempts: attempt}); qerr != nil {
				log.Error("slack: could not quarantine an event; it will be tried again", slog.Any("err", qerr))
				return false
			}
			return true
		}
		log.Warn("slack: delivering an event to the core failed; retrying", slog.Any("err", err))
		if kit.SleepCtx(ctx, b.Next()) != nil {
			return false
		}
	}
}

// learnDM remembers that channel is the app's DM with user.
func (a *Adapter) learnDM(user, channel string) {
	if !strings.HasPrefix(channel, "D") || user == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.dms) > 100000 {
		a.dms = map[string]string{}
	}
	a.dms[user] = channel
}

// limKey is the limiter's key for a channel: a user id counts as the DM
// channel it posts to.
func (a *Adapter) limKey(channel string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if d, ok := a.dms[channel]; ok {
		return d
	}
	return channel
}

// AnswerTap implements core.TapAnswerer: chat.update shows the card's new
// state on the tapped message, then the notice goes to the tapper only, as
// an ephemeral message (never into the channel). Slack's button spinner
// stops with the acknowledgement, so an empty notice sends nothing. A
// handle that does not decode (not this adapter's) leaves the notice
// unshown: there is nobody to show it to.
func (a *Adapter) AnswerTap(ctx context.Context, ans core.TapAnswer) error {
	if ans.Card != nil {
		if err := a.Update(ctx, ans.Ref, core.OutMessage{Conversation: ans.Conversation, Card: ans.Card}); err != nil {
			return err
		}
	}
	h, ok := decodeTapHandle(ans.Handle)
	if !ok || strings.TrimSpace(ans.Text) == "" {
		return nil
	}
	// The notice is best effort (docs/slack.md): one that cannot be shown
	// within 10 seconds (a long 429 pause of the channel) is dropped rather
	// than retried with the card's edit.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = a.ephemeral(cctx, h, ans.Text) // logged there
	return nil
}

// sweep forgets stale split progress.
