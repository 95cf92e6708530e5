// Package whatsapp is the WhatsApp channel: Silas is a linked device
// (go.mau.fi/whatsmeow) of a dedicated number or of the owner's own.
// WhatsApp gives unofficial clients no buttons, so a card is its text plus
// a poll (whatsapp.cards: poll) or numbered text answered by a reply
// quoting it (numbered); "approve <card id>" works in both. Votes and
// replies become the same core.Tap a button would, and the core validates
// them exactly like one.
//
// Nothing lost, nothing doubled: whatsmeow acknowledges a message to the
// server only after the handler returned true (SynchronousAck), and the
// handler returns true only once core.Inbox.Deliver stored the turn;
// messages WhatsApp delivers after a reconnect (the offline batch between
// OfflineSyncPreview and OfflineSyncCompleted) are ordinary turns;
// redeliveries are no-ops through the event id; history sync is never a
// turn. A reply is never sent while a message on the same Signal session
// is being decrypted (sessionlock.go): the phone would drop the next reply
// as a reused counter. Disconnects are retried with backoff; a logout, a
// replaced stream, a ban, an outdated client are reported to the owner
// (Config.Notify) and kept for `silas doctor` instead of being retried
// forever.
//
// The adapter never decides trust: it reports who sent what, where, and
// that it came through the end-to-end session (core.Evidence).
package whatsapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/lease"
)

// Adapter is the WhatsApp channel.
type Adapter struct {
	cfg  Config
	cli  Client
	log  *slog.Logger
	lim  *kit.Limiter[string]
	recs *records

	splits *kit.Splits

	// pollsSending counts polls being sent: a poll's record is stored once
	// its send returns, and a vote on it may arrive before that.
	pollsSending atomic.Int32

	mu      sync.Mutex
	inbox   core.Inbox
	running bool
	// sent are ids of messages this device sent recently: an echo of one
	// is never a turn.
	sent      map[string]time.Time
	sentSwept time.Time // last prune of sent (rememberSent)
	// status is the link state as doctor shows it.
	status Status
	// kick wakes the reconnect loop.
	kick chan struct{}
	// force asks the reconnect loop to drop the current connection first:
	// a keepalive went unanswered or the server sent a stream error, so
	// the socket may look open but carries nothing.
	force bool
	// offered: Config.Link was offered (once per process).
	offered bool
	// held is the current holding of the device lease (lease.go); nil
	// without leases, or while another instance holds it.
	held *lease.Held
	// inbound is the inbound liveness (Health).
	inbound kit.Liveness
	// sendsHere runs when the device connects while held (OnSendsHere).
	sendsHere func()
	// problemMu orders a Connected's clearing of the problem against
	// fatal's recording of one (both read, then write, status and state).
	problemMu sync.Mutex
}

var (
	_ core.Channel            = (*Adapter)(nil)
	_ core.MessageDeleter     = (*Adapter)(nil)
	_ core.TapAnswerer        = (*Adapter)(nil)
	_ core.DirectMessenger    = (*Adapter)(nil)
	_ core.CapabilityReporter = (*Adapter)(nil)
	_ core.HealthReporter     = (*Adapter)(nil)
)

// Status is the link state.
type Status struct {
	Connected bool
	// Problem is a fatal condition in plain words ("" when none).
	Problem string
	At      time.Time
}

// New builds the adapter; it makes no network request.
func New(cfg Config) (*Adapter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	a := &Adapter{cfg: cfg, cli: cfg.Client, log: cfg.Logger.With(slog.String("channel", string(cfg.Name))),
		recs: newRecords(cfg.State, cfg.Name), splits: kit.NewSplits(cfg.Now),
		sent: map[string]time.Time{}, kick: make(chan struct{}, 1)}
	a.lim = kit.NewLimiter[string](cfg.Limits, cfg.Clock, func(chat string) bool {
		j, err := types.ParseJID(chat)
		return err == nil && j.Server == types.GroupServer
	})
	a.cli.AddEventHandler(a.handle)
	return a, nil
}

// Name implements core.Channel.
func (a *Adapter) Name() core.ChannelName { return a.cfg.Name }

var _ core.Paced = (*Adapter)(nil)

// ConversationPace is the minimum time between two messages to one chat
// (core.Paced): another instance takes a conversation's lane over from
// this one only after it (core/outbox/lanes.go).
func (a *Adapter) ConversationPace() time.Duration { return a.lim.PerChatInterval() }

// Capabilities implements core.CapabilityReporter: edits (within the
// window; later a reply quoting the card), no buttons — the outbox hands
// every card with its plain text (OutMessage.CardText), which is what a
// card message shows.
func (a *Adapter) Capabilities() core.Capabilities {
	return core.Capabilities{EditInPlace: true, MaxTextLen: MaxMessageLen}
}

// DirectConversation implements core.DirectMessenger.
func (a *Adapter) DirectConversation(id core.IdentityID) (core.ConversationID, bool) {
	p, user, ok := cutIdentity(id)
	if !ok || p != "whatsapp" || !digitsRe.MatchString(user) {
		return "", false
	}
	return conversation(a.cfg.Name, types.NewJID(user, types.DefaultUserServer)), true
}

// Status returns the link state.
func (a *Adapter) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

// Run implements core.Channel: connect, keep connected, deliver.
func (a *Adapter) Run(ctx context.Context, in core.Inbox) error {
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		return errors.New("whatsapp: Run is already running")
	}
	a.running, a.inbox = true, in
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.running, a.inbox = false, nil
		a.mu.Unlock()
		a.cli.Disconnect()
	}()
	a.log.Info("whatsapp channel running", slog.String("cards", a.cfg.Cards))
	a.runLeased(ctx)
	return nil
}

// connect connects and keeps the device connected until ctx ends.
func (a *Adapter) connect(ctx context.Context) {
	a.wake()
	b := kit.Backoff{Min: a.cfg.ReconnectMin, Max: a.cfg.ReconnectMax}
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		}
		if a.takeForce() {
			a.cli.Disconnect()
		}
		for !a.cli.IsConnected() && a.Status().Problem == "" {
			if !a.stillHolding(ctx) {
				return
			}
			err := a.cli.Connect(ctx)
			if err == nil {
				break
			}
			if errors.Is(err, ErrNotLinked) {
				if link := a.cfg.Link; link != nil && !a.offered {
					a.offered = true // Config.Link, once per process
					a.log.Info("whatsapp: no device is linked; offering to link one")
					if err = link(ctx); err == nil {
						continue
					}
					if ctx.Err() != nil {
						return
					}
					a.log.Warn("whatsapp: linking did not complete", slog.Any("err", err))
				}
				a.fatal(ctx, "No WhatsApp device is linked (never linked, or WhatsApp logged it out). Run `silas whatsapp link`, then restart `silas serve`.")
				break
			}
			d := b.Next()
			a.log.Warn("whatsapp: connect failed; retrying", slog.Any("err", err), slog.Duration("in", d))
			if kit.SleepCtx(ctx, d) != nil {
				return
			}
		}
		if a.cli.IsConnected() {
			b.Reset()
		}
	}
}

func (a *Adapter) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *Adapter) currentInbox() core.Inbox {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inbox
}

// handle is the whatsmeow event handler. It returns false — leaving the
// message unacknowledged, so WhatsApp redelivers it — only when the turn
// could not be stored.
func (a *Adapter) handle(evt any) bool {
	ctx := context.Background()
	switch e := evt.(type) {
	case *events.Message:
		a.inbound.Heard(a.cfg.Now(), "connected")
		return a.onMessage(ctx, e)
	case *events.Connected:
		a.onConnected(ctx)
	case *events.OfflineSyncPreview:
		a.log.Info("whatsapp: delivering what arrived while offline", slog.Int("messages", e.Messages))
	case *events.OfflineSyncCompleted:
		a.log.Info("whatsapp: offline messages delivered", slog.Int("count", e.Count))
	case *events.Disconnected:
		a.setConnected(false)
		a.log.Warn("whatsapp: disconnected; reconnecting")
		a.wake()
	case *events.KeepAliveTimeout:
		// whatsmeow itself only gives up after minutes of failed pings;
		// an unanswered ping usually means a dead connection (NAT
		// timeout, a server that stopped reading), and a new one is
		// cheap, so reconnect at once.
		a.log.Warn("whatsapp: keepalive not answered; reconnecting", slog.Int("errors", e.ErrorCount))
		a.forceReconnect()
	case *events.StreamError:
		// 408, 428, 503 …: the server ends the stream; reconnect even
		// if the socket has not closed yet.
		a.log.Warn("whatsapp: stream error; reconnecting", slog.String("code", e.Code))
		a.forceReconnect()
	case *events.ConnectFailure:
		a.setConnected(false)
		if e.Reason.IsLoggedOut() || e.Reason == events.ConnectFailureBadUserAgent || e.Reason == events.ConnectFailureClientUnknown {
			a.fatal(ctx, fmt.Sprintf("WhatsApp refused the linked device (%d %s). Link it again with `silas whatsapp link`.", int(e.Reason), e.Message))
			return true
		}
		a.log.Warn("whatsapp: connect failure; retrying", slog.Int("reason", int(e.Reason)), slog.String("message", e.Message))
		a.wake()
	case *events.LoggedOut:
		a.fatal(ctx, "WhatsApp logged Silas's linked device out (removed from Linked devices on the phone, or the phone was offline for weeks). Link it again with `silas whatsapp link`.")
	case *events.StreamReplaced:
		if a.leased() && !a.holdingLive() {
			// The instance that took the lease over connected: expected.
			a.setConnected(false)
			a.log.Info("whatsapp: another instance holds the device now; this one is disconnected")
			return true
		}
		a.fatal(ctx, "Another program connected with Silas's WhatsApp device keys, so WhatsApp closed this connection. Make sure only one `silas serve` runs, then restart it.")
	case *events.TemporaryBan:
		a.fatal(ctx, fmt.Sprintf("WhatsApp temporarily banned the number (%s). Wait until it expires, then restart `silas serve`; send less (whatsapp.limits) to avoid a permanent ban.", e.String()))
	case *events.ClientOutdated:
		a.fatal(ctx, "WhatsApp says Silas's WhatsApp library is outdated. Update Silas, then restart it.")
	}
	return true
}

// onConnected records a connection, clearing a problem recorded by an
// earlier process (the owner linked again and restarted). whatsmeow
// dispatches Connected from a goroutine of its own, after the post-login
// IQs, so it can arrive after a fatal event of the same connection (a
// logout's stream error fails those IQs at once; LoggedOut is dispatched
// beside it). Once this process recorded a problem it connects no more
// (connect), so a Connected after it is that older connection's: the
// problem stands.
func (a *Adapter) onConnected(ctx context.Context) {
	a.problemMu.Lock()
	defer a.problemMu.Unlock()
	if p := a.Status().Problem; p != "" {
		a.log.Info("whatsapp: a connection from before the problem reported connected late; the problem stands", slog.String("problem", p))
		return
	}
	a.inbound.Heard(a.cfg.Now(), "connected")
	a.setStatus(Status{Connected: true})
	if a.cfg.State != nil {
		if err := a.setState(ctx, "problem", ""); err != nil {
			a.stateWriteFailed("could not clear the recorded problem", err)
		}
	}
	a.log.Info("whatsapp: connected")
	a.connectedHere()
}

func (a *Adapter) forceReconnect() {
	a.mu.Lock()
	a.status.Connected, a.status.At, a.force = false, a.cfg.Now(), true
	a.mu.Unlock()
	a.wake()
}

func (a *Adapter) takeForce() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.force
	a.force = false
	return f
}

func (a *Adapter) setConnected(c bool) {
	a.mu.Lock()
	a.status.Connected = c
	a.status.At = a.cfg.Now()
	a.mu.Unlock()
}

func (a *Adapter) setStatus(s Status) {
	s.At = a.cfg.Now()
	a.mu.Lock()
	a.status = s
	a.mu.Unlock()
}

// fatal records a condition reconnecting cannot fix and tells the owner
// — once: while a problem is recorded (until the next successful
// connection clears it), restarts that hit it again do not repeat the
// notice.
func (a *Adapter) fatal(ctx context.Context, text string) {
	a.log.Error("whatsapp: "+text, slog.String("event", "fatal"))
	told := false
	a.problemMu.Lock()
	if a.cfg.State != nil {
		prev, ok, err := a.cfg.State.GetState(ctx, a.cfg.Name, "problem")
		told = err == nil && ok && prev != ""
		if err := a.setState(ctx, "problem", text); err != nil {
			a.stateWriteFailed("could not record the problem", err)
		}
	}
	a.setStatus(Status{Problem: text})
	a.problemMu.Unlock()
	if a.cfg.Notify != nil && !told {
		a.cfg.Notify(ctx, "WhatsApp: "+text)
	}
}

func (a *Adapter) rememberSent(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.cfg.Now()
	a.sent[id] = now
	// Pruned on write rather than by a timer: the map only grows here.
	if now.Sub(a.sentSwept) > time.Minute {
		a.sweepSentLocked(now)
		a.sentSwept = now
	}
}

func (a *Adapter) wasSent(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.sent[id]
	return ok
}

// sweepSentLocked forgets sent ids older than an hour; called with a.mu held.
func (a *Adapter) sweepSentLocked(now time.Time) {
	for id, at := range a.sent {
		if now.Sub(at) > time.Hour {
			delete(a.sent, id)
		}
	}
}

func (a *Adapter) me() self {
	pn, lid := a.cli.Own()
	return self{pn: pn.ToNonAD(), lid: lid.ToNonAD()}
}

func (a *Adapter) lids(ctx context.Context) lidMap {
	return func(lid types.JID) types.JID {
		pn, err := a.cli.PNForLID(ctx, lid)
		if err != nil {
			a.log.Debug("whatsapp: LID lookup failed", slog.Any("err", err))
			return types.JID{}
		}
		return pn
	}
}

// onMessage converts and delivers one message (or vote).
func (a *Adapter) onMessage(ctx context.Context, e *events.Message) bool {
	if e.Info.IsFromMe && a.wasSent(e.Info.ID) {
		return true
	}
	if e.Message.GetPollUpdateMessage() != nil {
		return a.onVote(ctx, e)
	}
	in := messageToTurn(e, a.me(), a.lids(ctx), a.cfg.Name)
	if in.act != actDeliver {
		a.log.Debug("whatsapp: message ignored", slog.String("reason", in.reason), slog.String("id", e.Info.ID))
		return true
	}
	t := in.turn
	if tap, ok := a.textTap(ctx, in.typed, in.quoted); ok {
		t.Tap, t.Text = &tap, ""
	}
	return a.deliver(ctx, t)
}

func (a *Adapter) deliver(ctx context.Context, t core.Turn) bool {
	in := a.currentInbox()
	if in == nil {
		// Not running: leave it unacknowledged for the next start.
		return false
	}
	if !a.holdingLive() {
		// The lease is gone: the holder's connection gets it again.
		a.log.Info("whatsapp: message left unacknowledged (another instance holds the device now)", slog.String("event_id", t.EventID))
		return false
	}
	res, err := in.Deliver(ctx, t)
	var rej *core.RejectedError
	switch {
	case errors.As(err, &rej):
		// Stored nowhere and never will be: acknowledge, or WhatsApp
		// redelivers a message the core refuses forever.
		a.log.Warn("whatsapp: turn rejected", slog.String("reason", rej.Reason), slog.String("event_id", t.EventID))
		return true
	case err != nil:
		a.log.Error("whatsapp: could not store the turn; WhatsApp will deliver it again", slog.Any("err", err), slog.String("event_id", t.EventID))
		return false
	}
	if res.Duplicate {
		a.log.Debug("whatsapp: redelivered message (no-op)", slog.String("event_id", t.EventID))
	}
	return true
}

func cutIdentity(id core.IdentityID) (string, string, bool) {
	s := string(id)
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return s[:i], s[i+1:], i > 0 && i < len(s)-1
		}
	}
	return "", "", false
}

// Health reports the inbound liveness (core.HealthReporter). WhatsApp
// sends nothing on a quiet connection, so besides the events it delivers
// the sign of life is the connection's own: whatsmeow's keepalive pings,
// whose failure (KeepAliveTimeout) or a stream error drops the link state
// here, and a self-check that the socket is open and logged in. A device
// another instance holds (lease) is not judged.
func (a *Adapter) Health() core.ChannelHealth {
	if a.leased() && !a.holdingLive() {
		return core.ChannelHealth{State: "standby: another instance holds the device"}
	}
	st := a.Status()
	switch {
	case st.Problem != "":
		a.inbound.Lost(st.Problem)
	case st.Connected && a.cli.IsConnected():
		a.inbound.Heard(a.cfg.Now(), "connected; keepalive answered")
	default:
		a.inbound.Lost("reconnecting")
	}
	return a.inbound.Health()
}
