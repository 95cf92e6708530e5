package discord

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
)

// The gateway: a supervisor opens a discordgo session and replaces it when
// it drops. discordgo's own reconnect loop is off (it cannot be stopped
// from outside and never forgets a session): the supervisor reconnects with
// backoff, reuses the session (so discordgo sends RESUME with its session
// id and sequence) after an unclean drop, and starts a new session (so a
// fresh IDENTIFY) after a clean close, which Discord treats as the end of
// the session. When Discord refuses a RESUME (op 9, invalid session)
// discordgo identifies again on the same socket.
//
// A zombie connection (heartbeats sent, no ACK) is closed after
// ZombieAfter at most, or sooner once the heartbeat interval is known
// (one interval and a half, at most 10 s more): discordgo's own check
// waits five intervals (over three minutes on Discord).
//
// Handlers run on discordgo's reader (SyncEvents) and only queue: the
// worker delivers messages in order, one at a time, and runs the catch-up
// each READY and RESUMED queue, so gateway events that arrive meanwhile
// wait behind it and duplicates of what it fetched are skipped by the
// cursor (or are no-ops at the core's intake).

// work is one unit for the worker: a message or a catch-up.
type work struct {
	msg     *discordgo.Message
	guild   string // from the gateway event; "" for DMs
	catchUp bool
}

func (a *Adapter) enqueue(ctx context.Context, w work) {
	select {
	case a.queue <- w:
	case <-ctx.Done():
	}
}

// runGateway keeps a session connected until ctx ends; shutdown is the
// process's context (its end, unlike the loss of the lease, ends the
// session with a clean close).
func (a *Adapter) runGateway(ctx, shutdown context.Context) {
	b := kit.Backoff{Min: a.cfg.ReconnectMin, Max: a.cfg.ReconnectMax}
	var s *gwSession
	for ctx.Err() == nil {
		if s == nil {
			var err error
			if s, err = a.gatewaySession(ctx); err != nil {
				a.log.Error("discord: cannot build a gateway session", slog.Any("err", err))
				return
			}
		}
		gs := s.gs
		// discordgo emits a Disconnect on every Close, also the Close after
		// a failed Open, when nothing was connected: such a signal is stale
		// and must not end the connection about to open (it would be
		// dropped at once, and the next Open would find it still open).
		select {
		case <-s.down:
		default:
		}
		err := gs.Open()
		if err != nil {
			a.log.Warn("discord: gateway connection failed; retrying", slog.Any("err", kit.RedactURL(mapError("gateway", err))))
			_ = gs.Close()
			if errors.Is(err, discordgo.ErrWSAlreadyOpen) {
				s = nil
			}
			if kit.SleepCtx(ctx, b.Next()) != nil {
				return
			}
			continue
		}
		connected := time.Now()
		clean := a.watch(ctx, s)
		if ctx.Err() != nil {
			// At shutdown a clean close: Discord ends the session (we do
			// not resume across a restart; the catch-up covers it). After
			// the lease was lost, 4000 (the guard rewrites discordgo's
			// 1000): see lease.go.
			s.guard.clean.Store(shutdown.Err() != nil)
			_ = gs.Close()
			return
		}
		if clean {
			s = nil // RESUME is pointless after a 1000/1001 close
		}
		if time.Since(connected) > time.Minute {
			b.Reset()
		}
		a.log.Info("discord: gateway disconnected; reconnecting")
		if kit.SleepCtx(ctx, b.Next()) != nil {
			return
		}
	}
}

// gwSession is a discordgo session with its disconnect signal.
type gwSession struct {
	gs    *discordgo.Session
	down  chan struct{} // receives on every Disconnect
	guard closeGuard
}

func (a *Adapter) gatewaySession(ctx context.Context) (*gatewayConn, error) {
	s, err := a.newSession()
	if err != nil {
		return nil, err
	}
	g := &gatewayConn{gs: s, down: make(chan struct{}, 1)}
	s.Dialer = g.guard.dialer()
	s.AddHandler(func(_ *discordgo.Session, r *discordgo.Ready) {
		if r.User != nil {
			a.setMe(r.User.ID)
		}
		a.log.Info("discord gateway ready", slog.String("session", shortID(r.SessionID)))
		a.saveSession(ctx, r.SessionID)
		a.enqueue(ctx, work{catchUp: true})
	})
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Resumed) {
		a.log.Info("discord gateway resumed")
		a.enqueue(ctx, work{catchUp: true})
	})
	s.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) {
		if m.Message != nil {
			a.enqueue(ctx, work{msg: m.Message, guild: m.GuildID})
		}
	})
	s.AddHandler(func(_ *discordgo.Session, i *discordgo.InteractionCreate) {
		if i.Interaction != nil {
			go a.handleInteraction(ctx, i.Interaction, nil)
		}
	})
	// A gateway event is a sign of life (core.HealthReporter) once the
	// socket it came on had a heartbeat answered (watch).
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Event) {
		if g.guard.acked.Load() {
			a.inbound.Heard(a.now(), "gateway connected")
		}
	})
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Disconnect) {
		a.inbound.Lost("reconnecting")
		select {
		case g.down <- struct{}{}:
		default:
		}
	})
	return g, nil
}

type gatewayConn = gwSession

// watch waits until the connection drops, ctx ends or the connection turns
// zombie. It reports whether the close was clean (1000/1001 from our
// side), which ends the session.
//
// It also reports the channel's liveness (Health): the heartbeat round
// trip, from the moment a heartbeat left on the socket (the guard sees it)
// to discordgo's LastHeartbeatAck, read under the session's lock. An ACK
// older than the last heartbeat sent answers nothing yet; the
// LastHeartbeatAck discordgo stamps on Hello answers no heartbeat of the
// new socket (the guard's record starts empty on each), so a gateway that
// accepts sockets but never ACKs goes deaf however often it is replaced.
func (a *Adapter) watch(ctx context.Context, g *gwSession) (clean bool) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var counted, countedAck time.Time // the last heartbeat seen answered, and its ACK
	var interval time.Duration
	for {
		select {
		case <-ctx.Done():
			return true
		case <-g.down:
			return false
		case <-tick.C:
		}
		g.gs.RLock()
		ack := g.gs.LastHeartbeatAck
		g.gs.RUnlock()
		if sent := g.guard.heartbeatSent(); !sent.IsZero() && !sent.Equal(counted) && !ack.Before(sent) {
			// The heartbeat sent last is answered: the gateway still
			// listens and speaks. Consecutive answers are one heartbeat
			// interval apart.
			if !countedAck.IsZero() {
				interval = ack.Sub(countedAck)
			}
			counted, countedAck = sent, ack
			g.guard.acked.Store(true)
			a.inbound.Heard(ack, "gateway connected")
			a.inbound.Probe("heartbeat round trip " + ack.Sub(sent).Round(time.Millisecond).String())
		}
		limit := zombieLimit(a.cfg.ZombieAfter, interval)
		if since := time.Since(ack); since > limit {
			a.log.Warn("discord: no heartbeat ACK; replacing the zombie connection", slog.Duration("since_ack", since))
			a.inbound.Probe("no heartbeat ACK for " + since.Round(time.Second).String() + "; connection replaced")
			// Not 1000/1001: the session stays resumable.
			_ = g.gs.CloseWithCode(4000)
			select {
			case <-g.down:
			default:
			}
			return false
		}
	}
}

// zombieLimit is how long after the last heartbeat ACK a connection is
// replaced: one interval and a half (at most 10 s more than the interval)
// once the interval is known, never more than zombieAfter. With Discord's
// 41.25 s interval that is 50 s.
func zombieLimit(zombieAfter, interval time.Duration) time.Duration {
	if interval <= 0 {
		return zombieAfter
	}
	return min(zombieAfter, interval+min(interval/2, 10*time.Second))
}

func shortID(s string) string {
	if len(s) > 8 {
		return s[:8] + "…"
	}
	return s
}

// saveSession keeps the gateway session id in the state store, for
// `silas doctor` and the logs; discordgo resumes from its own memory.
func (a *Adapter) saveSession(ctx context.Context, id string) {
	if a.cfg.State == nil || id == "" {
		return
	}
	if err := a.convs.set(ctx, "gateway_session", id); err != nil {
		a.stateWriteFailed(a.log, "gateway session", err)
	}
}

// worker delivers queued messages in order and runs catch-ups.
func (a *Adapter) worker(ctx context.Context, in core.Inbox) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-a.queue:
			if w.catchUp {
				a.catchUp(ctx, in)
				continue
			}
			rec, known := a.convs.get(w.msg.ChannelID)
			guild := w.guild
			if guild == "" && known {
				guild = rec.Guild
			}
			a.handleMessage(ctx, in, w.msg, guild)
		}
	}
}

// handleMessage delivers one message (retrying until stored or ctx ends)
// and then moves its conversation's cursor. A message at or before the
// cursor was handled already.
func (a *Adapter) handleMessage(ctx context.Context, in core.Inbox, m *discordgo.Message, guild string) {
	if m == nil || m.ChannelID == "" {
		return
	}
	if rec, ok := a.convs.get(m.ChannelID); ok && !snowflakeLess(rec.Last, m.ID) {
		return
	}
	w := where{guild: guild, allowed: guild == "" || a.cfg.allowedGuildChannel(guild, m.ChannelID)}
	r := messageToTurn(m, w, a.me(), a.cfg.Name, MethodGateway)
	log := a.log.With(slog.String("message", m.ID))
	track := r.act == actDeliver || guild == "" || w.allowed
	switch r.act {
	case actDeliver:
		b := kit.Backoff{Min: 200 * time.Millisecond, Max: 30 * time.Second}
		for {
			res, err := in.Deliver(ctx, r.turn)
			var rej *core.RejectedError
			if errors.As(err, &rej) {
				log.Warn("discord turn rejected by the core", slog.String("reason", rej.Reason))
				break
			}
			if err == nil {
				if res.Duplicate {
					log.Debug("discord message was delivered before")
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			log.Warn("discord: could not store a message; retrying", slog.Any("err", err))
			if kit.SleepCtx(ctx, b.Next()) != nil {
				return
			}
		}
	case actMalformed:
		log.Warn("discord message malformed; dropped", slog.String("reason", r.reason))
	default:
		log.Debug("discord message ignored", slog.String("reason", r.reason))
	}
	if !track || !snowflakeRe.MatchString(m.ID) || !snowflakeRe.MatchString(m.ChannelID) {
		return
	}
	user := ""
	if m.Author != nil && guild == "" && (m.Author.ID != a.me()) {
		user = m.Author.ID
	}
	// The message was handled (its turn is stored): record that even when
	// shutdown began meanwhile, or the next start would not know this
	// conversation and could miss what arrives in it while we are down.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := a.convs.advance(sctx, m.ChannelID, guild, user, m.ID, a.now()); err != nil {
		a.stateWriteFailed(log, "catch-up cursor", err)
	}
}

// catchUp fetches, for each recently active conversation, the messages
// after its cursor and handles them oldest first. Pages of 100, bounded;
// a 429 is waited out; a channel the bot can no longer read is skipped.
func (a *Adapter) catchUp(ctx context.Context, in core.Inbox) {
	convs := a.convs.recent(a.now())
	if len(convs) == 0 {
		return
	}
	total := 0
	for _, ch := range convs {
		for page := 0; page < maxCatchUpPages; page++ {
			rec, _ := a.convs.get(ch)
			msgs, err := a.fetchAfter(ctx, ch, rec.Last)
			if err != nil {
				if ctx.Err() == nil {
					a.log.Warn("discord: catch-up of a conversation failed", slog.String("conversation", ch), slog.Any("err", err))
				}
				break
			}
			slices.SortFunc(msgs, func(x, y *discordgo.Message) int {
				switch {
				case snowflakeLess(x.ID, y.ID):
					return -1
				case snowflakeLess(y.ID, x.ID):
					return 1
				}
				return 0
			})
			for _, m := range msgs {
				if m == nil {
					continue
				}
				if m.ChannelID == "" {
					m.ChannelID = ch
				}
				if m.ChannelID != ch {
					continue
				}
				a.handleMessage(ctx, in, m, rec.Guild)
				total++
			}
			if len(msgs) < 100 {
				break
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
	if total > 0 {
		a.log.Info("discord catch-up done", slog.Int("conversations", len(convs)), slog.Int("messages", total))
	}
}

// fetchAfter is GET /channels/{id}/messages?after=&limit=100, waiting out
// 429s (a few times).
func (a *Adapter) fetchAfter(ctx context.Context, channel, after string) ([]*discordgo.Message, error) {
	for try := 0; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, a.cfg.HTTPTimeout)
		msgs, err := a.rest.ChannelMessages(channel, 100, "", after, "", discordgo.WithContext(cctx))
		cancel()
		if err == nil {
			return msgs, nil
		}
		err = mapError("catch-up", err)
		d, limited := kit.RetryAfterOf(err)
		if !limited && !kit.Retryable(err) || try >= 5 {
			return nil, err
		}
		if !limited {
			d = time.Duration(try+1) * time.Second
		}
		if kit.SleepCtx(ctx, d) != nil {
			return nil, ctx.Err()
		}
	}
}

// Health reports the inbound liveness (core.HealthReporter).
func (a *Adapter) Health() core.ChannelHealth { return a.inbound.Health() }
