// Package telegram is the Telegram channel: people talk to Silas in private
// chats and groups and decide cards with inline buttons. It is built on
// github.com/go-telegram/bot for Bot API calls and implements core.Channel
// plus the optional core.TapAnswerer, core.DirectMessenger,
// core.MessageDeleter and core.CapabilityReporter.
//
// Receiving: long polling (default) or a webhook. An update is acknowledged
// to Telegram — the webhook answers 200, or the polling offset moves past
// it — only after core.Inbox.Deliver returned, i.e. after the turn is
// stored durably; a redelivered update has the same event id
// ("u<update_id>") and is a no-op. The SDK's own polling loop and webhook
// handler cannot give that guarantee (its poller confirms updates before
// handlers run and keeps the offset in memory; its handler answers 200
// even for a wrong secret), so this package has its own getUpdates loop
// and its own http.Handler.
//
// The adapter never decides trust: it reports who sent what, in which kind
// of chat, authenticated how (core.Evidence). It must never deliver a
// webhook request whose secret token does not match, and never render user
// text as markup.
//
// See docs/telegram.md for setup and configuration.
package telegram

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/commands/catalog"
)

// Adapter is the Telegram channel.
type Adapter struct {
	cfg     resolved
	log     *slog.Logger
	now     func() time.Time
	bot     *bot.Bot
	botID   int64
	poller  *http.Client // getUpdates: PollTimeout + HTTPTimeout
	lim     *kit.Limiter[int64]
	method  string // evidence method of this adapter's mode
	secretH [32]byte

	mu       sync.Mutex
	inbox    core.Inbox
	username string
	moved    kit.Moves         // edits of a gone message go to its replacement (its own lock)
	memState map[string]string // offset when no StateStore is configured
	// offsetAtSaved is when the poll loop last stored offset_at (only the
	// poll goroutine reads or writes it; one poll loop runs at a time).
	offsetAtSaved time.Time
	// instance names this process as a lease holder (unique per start).
	instance string
	// groupSends are each group's send times of the last minute, as stored
	// (grouplimit.go); a group is in the map once seeded.
	groupSends map[int64][]time.Time
	// hookTries counts failed webhook deliveries per update_id.
	hookTries map[int64]int

	// splits is the progress of texts sent in several parts.
	splits *kit.Splits
	// live is the inbound liveness (Health): getUpdates round trips in
	// polling mode.
	live kit.Liveness
}

var (
	_ core.Channel            = (*Adapter)(nil)
	_ core.TapAnswerer        = (*Adapter)(nil)
	_ core.HealthReporter     = (*Adapter)(nil)
	_ core.HealthProber       = (*Adapter)(nil)
	_ core.DirectMessenger    = (*Adapter)(nil)
	_ core.MessageDeleter     = (*Adapter)(nil)
	_ core.CapabilityReporter = (*Adapter)(nil)
	_ http.Handler            = (*Adapter)(nil)
)

// New builds the adapter. It validates cfg and makes no network request;
// Run learns the bot's username (getMe) when cfg.BotUsername is empty.
func New(cfg Config) (*Adapter, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	a := &Adapter{
		cfg: r, now: r.Now,
		log:        r.Logger.With(slog.String("channel", string(r.Name))),
		username:   r.BotUsername,
		splits:     kit.NewSplits(r.Now),
		memState:   map[string]string{},
		instance:   cmp.Or(r.Instance, core.NewID()),
		groupSends: map[int64][]time.Time{},
		method:     MethodPolling,
	}
	if r.Mode == ModeWebhook {
		a.method = MethodWebhook
		a.secretH = sha256.Sum256([]byte(r.secret))
	}
	a.botID, _ = strconv.ParseInt(r.token[:strings.IndexByte(r.token, ':')], 10, 64)
	var transport http.RoundTripper
	if r.HTTPClient != nil {
		transport = r.HTTPClient.Transport
	}
	// The SDK's requests go through sizedBodies (transport.go); getUpdates
	// (call) sends a body of known length already.
	client := &http.Client{Timeout: r.HTTPTimeout, Transport: sizedBodies{next: cmp.Or(transport, http.DefaultTransport)}}
	a.poller = &http.Client{Timeout: r.PollTimeout + r.HTTPTimeout, Transport: transport}
	// The limiter sleeps: it keeps to a clock of its own (the wall clock
	// outside tests).
	a.lim = kit.NewLimiter(kit.Limits(r.Limits), r.LimitClock, isGroup)
	a.bot, err = bot.New(r.token,
		bot.WithServerURL(r.BaseURL),
		bot.WithSkipGetMe(),
		bot.WithHTTPClient(r.PollTimeout, client),
		bot.WithDefaultHandler(func(context.Context, *bot.Bot, *models.Update) {}),
		bot.WithErrorsHandler(func(err error) { a.log.Warn("telegram sdk", slog.Any("err", kit.RedactURL(err))) }),
	)
	if err != nil {
		return nil, fmt.Errorf("telegram: %w", err)
	}
	return a, nil
}

// Name implements core.Channel.
func (a *Adapter) Name() core.ChannelName { return a.cfg.Name }

var _ core.Paced = (*Adapter)(nil)

// ConversationPace is the minimum time between two messages to one chat
// (core.Paced): another instance takes a conversation's lane over from
// this one only after it (core/outbox/lanes.go).
func (a *Adapter) ConversationPace() time.Duration { return a.lim.PerChatInterval() }

// Mode is "polling" or "webhook".
func (a *Adapter) Mode() string { return a.cfg.Mode }

// DirectConversation implements core.DirectMessenger: the private chat with
// a Telegram user has the user's id as its chat id. The user must have
// started the bot before the bot can write to them.
func (a *Adapter) DirectConversation(id core.IdentityID) (core.ConversationID, bool) {
	p, rest, ok := strings.Cut(string(id), ":")
	if !ok || p != "telegram" {
		return "", false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 10) != rest {
		return "", false
	}
	return conversation(a.cfg.Name, n), true
}

// Run implements core.Channel: it receives updates until ctx ends and hands
// each to in.Deliver before acknowledging it to Telegram. Transient failures
// (network, Telegram 5xx, a Deliver error) are retried with backoff; Run
// returns nil when ctx ends.
func (a *Adapter) Run(ctx context.Context, in core.Inbox) error {
	a.mu.Lock()
	if a.inbox != nil {
		a.mu.Unlock()
		return errors.New("telegram: Run is already running")
	}
	a.inbox = in
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.inbox = nil
		a.mu.Unlock()
	}()
	if err := a.learnUsername(ctx); err != nil {
		return nil // ctx ended
	}
	a.log.Info("telegram channel running", slog.String("mode", a.cfg.Mode), slog.String("bot", "@"+a.botUsername()))
	menu := make(chan struct{})
	go func() {
		defer close(menu)
		a.setCommandMenu(ctx)
	}()
	defer func() { <-menu }()
	if a.cfg.Mode == ModeWebhook {
		a.setWebhook(ctx)
		<-ctx.Done()
		return nil
	}
	a.pollLeased(ctx, in)
	return nil
}

// setCommandMenu offers the command catalog (core/commands/catalog) in
// Telegram's command menu, once per start. It is best effort: typed
// commands work without the menu, so a failure is logged, not retried, and
// never holds up receiving.
func (a *Adapter) setCommandMenu(ctx context.Context) {
	var cmds []models.BotCommand
	for _, c := range catalog.Menu() {
		cmds = append(cmds, models.BotCommand{Command: c.Name, Description: c.Description})
	}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.HTTPTimeout)
	defer cancel()
	if _, err := a.bot.SetMyCommands(cctx, &bot.SetMyCommandsParams{Commands: cmds}); err != nil && ctx.Err() == nil {
		a.log.Warn("telegram: could not set the command menu (setMyCommands); typed commands work without it", slog.String("err", shortErr(err)))
	}
}

func (a *Adapter) botUsername() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.username
}

func (a *Adapter) me() botInfo {
	return botInfo{id: a.botID, username: a.botUsername()}
}

// learnUsername calls getMe until it succeeds when no username is
// configured; group gating needs it.
func (a *Adapter) learnUsername(ctx context.Context) error {
	if a.botUsername() != "" {
		return nil
	}
	b := kit.Backoff{Min: time.Second, Max: time.Minute}
	for {
		cctx, cancel := context.WithTimeout(ctx, a.cfg.HTTPTimeout)
		me, err := a.bot.GetMe(cctx)
		cancel()
		if err == nil && me.Username != "" {
			a.mu.Lock()
			a.username = me.Username
			a.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			err = errors.New("getMe returned no username")
		}
		a.log.Error("telegram: cannot learn the bot's username (getMe); retrying", slog.Any("err", mapError("getMe", err)))
		if err := kit.SleepCtx(ctx, b.Next()); err != nil {
			return err
		}
	}
}

// handle converts one update and delivers it. It returns an error only when
// the update must not be acknowledged (Deliver failed and may succeed on a
// retry).
func (a *Adapter) handle(ctx context.Context, in core.Inbox, u *models.Update) error {
	r := updateToTurn(u, a.me(), a.cfg.Name, a.method)
	log := a.log.With(slog.Int64("update_id", u.ID))
	switch r.act {
	case actIgnore:
		log.Debug("telegram update ignored", slog.String("reason", r.reason))
		return nil
	case actMalformed:
		log.Warn("telegram update malformed; dropped", slog.String("reason", r.reason))
		return nil
	case actUnknownButton:
		log.Warn("telegram tap refused", slog.String("reason", r.reason))
		a.answer(ctx, r.queryID, "Unknown button")
		return nil
	}
	t := r.turn
	if t.Tap != nil && !r.typed {
		// The core answers the tap once, through this query (AnswerTap).
		t.TapHandle = r.queryID
	}
	res, err := in.Deliver(ctx, t)
	var rej *core.RejectedError
	switch {
	case errors.As(err, &rej):
		// Retrying cannot help: acknowledge and drop.
		log.Warn("telegram turn rejected by the core", slog.String("reason", rej.Reason))
		if t.TapHandle != "" {
			_ = a.answer(ctx, t.TapHandle, "Not accepted.")
		}
		return nil
	case err != nil:
		return err
	}
	if res.Duplicate {
		// A redelivered tap is answered by the stored one's answer.
		log.Debug("telegram update was delivered before", slog.String("event_id", t.EventID))
	}
	return nil
}

// AnswerTap implements core.TapAnswerer: the tapped message shows the
// card's new state (edited in place, as Update does) and then the tap's
// callback query is answered with the notice as a toast — Telegram has no
// single call for both; the edit comes first so the toast never announces
// a state the card does not show yet. A tap typed as text has no query
// (an empty handle): its notice, if any, is a message in its chat. A query
// answered already or too old is not an error (answer).
func (a *Adapter) AnswerTap(ctx context.Context, ans core.TapAnswer) error {
	if ans.Card != nil {
		if err := a.Update(ctx, ans.Ref, core.OutMessage{Conversation: ans.Conversation, Card: ans.Card}); err != nil {
			return err
		}
	}
	if ans.Handle != "" {
		return a.answer(ctx, ans.Handle, ans.Text)
	}
	if strings.TrimSpace(ans.Text) == "" {
		return nil
	}
	chat, err := a.chatOf(ans.Conversation)
	if err != nil {
		return err
	}
	_, err = a.sendRendered(ctx, chat, rendered{html: escapeHTML(ans.Text)})
	return err
}

// Capabilities implements core.CapabilityReporter.
func (a *Adapter) Capabilities() core.Capabilities {
	return core.Capabilities{EditInPlace: true, Buttons: true, MaxTextLen: MaxMessageLen}
}

// answer calls answerCallbackQuery (text up to 200 characters). A query
// Telegram considers too old is not an error: nobody is waiting any more.
func (a *Adapter) answer(ctx context.Context, queryID, text string) error {
	if r := []rune(text); len(r) > 200 {
		text = string(r[:199]) + "…"
	}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.HTTPTimeout)
	defer cancel()
	_, err := a.bot.AnswerCallbackQuery(cctx, &bot.AnswerCallbackQueryParams{CallbackQueryID: queryID, Text: text})
	if err != nil {
		if isQueryTooOld(err) {
			a.log.Debug("telegram: tap answered too late", slog.String("query", queryID))
			return nil
		}
		err = mapError("answerCallbackQuery", err)
		a.log.Warn("telegram: could not answer a tap", slog.Any("err", err))
		return err
	}
	return nil
}
