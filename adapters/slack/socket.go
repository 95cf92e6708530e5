package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/websocket"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
)

// Socket Mode (https://docs.slack.dev/apis/events-api/using-socket-mode).
//
// One loop, one connection at a time: apps.connections.open returns a
// WebSocket URL (followed as given, ws:// included), the adapter dials it,
// reads envelopes one by one — each acknowledged ({"envelope_id": …}) only
// after Deliver stored its turn — and when the connection ends for any
// reason it is closed (close handshake, then the TCP connection) before the
// next apps.connections.open. Slack hands each event to any one of an app's
// open connections, so a socket left open by a reconnect would silently eat
// events; this loop cannot leak one.
//
//   - hello: num_connections is logged; above 1 another process is using
//     the same app token, which is warned about.
//   - disconnect: refresh_requested and warning (Slack is about to close
//     the connection) → reconnect now; link_disabled (Socket Mode turned
//     off for the app) → log an error and try again after a minute.
//   - silence: the adapter pings every ping_interval; a connection that has
//     received nothing — no pong, no ping, no envelope — for ping_interval
//     + ping_timeout is half-open and is replaced.
//   - an envelope that was not acknowledged (Deliver failed, the process
//     died) is redelivered by Slack and deduplicated by the core.

// socketBackoffMin is the first wait after a failed connection.
var socketBackoffMin = 500 * time.Millisecond

// envelope is one Socket Mode message.
type envelope struct {
	Type           string          `json:"type"`
	EnvelopeID     string          `json:"envelope_id"`
	Payload        json.RawMessage `json:"payload"`
	Reason         string          `json:"reason"`
	NumConnections int             `json:"num_connections"`
	RetryAttempt   int             `json:"retry_attempt"`
}

func (a *Adapter) runSocket(ctx context.Context, in core.Inbox) {
	b := kit.Backoff{Min: socketBackoffMin, Max: 30 * time.Second}
	for ctx.Err() == nil {
		url, err := a.openConnection(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := b.Next()
			if d, ok := kit.RetryAfterOf(err); ok && d > wait {
				wait = d
			}
			lvl := slog.LevelWarn
			if isAuthError(err) {
				lvl = slog.LevelError
			}
			a.log.Log(ctx, lvl, "slack: apps.connections.open failed; retrying", slog.Any("err", err), slog.Duration("wait", wait))
			_ = kit.SleepCtx(ctx, wait)
			continue
		}
		reason, err := a.serveConn(ctx, in, url)
		switch {
		case ctx.Err() != nil:
			return
		case reason == "link_disabled":
			a.log.Error("slack: Socket Mode is disabled for this app (disconnect: link_disabled); turn it on in the app settings or set slack.mode: http. Retrying in a minute.")
			_ = kit.SleepCtx(ctx, time.Minute)
		case reason != "":
			a.log.Info("slack: Socket Mode connection ended; reconnecting", slog.String("reason", reason))
			b.Reset()
		default:
			wait := b.Next()
			a.log.Warn("slack: Socket Mode connection lost; reconnecting", slog.Any("err", err), slog.Duration("wait", wait))
			_ = kit.SleepCtx(ctx, wait)
		}
	}
}

// openConnection calls apps.connections.open with the app token.
func (a *Adapter) openConnection(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, a.cfg.HTTPTimeout)
	defer cancel()
	_, url, err := a.appAPI.StartSocketModeContext(cctx)
	if err != nil {
		return "", mapError("apps.connections.open", err)
	}
	if url == "" {
		return "", errors.New("slack: apps.connections.open returned no URL")
	}
	return url, nil
}

// serveConn runs one connection until it ends. It returns the disconnect
// reason Slack gave ("" with an error otherwise). The connection is closed
// when it returns.
func (a *Adapter) serveConn(ctx context.Context, in core.Inbox, url string) (string, error) {
	d := websocket.Dialer{HandshakeTimeout: a.cfg.HTTPTimeout, Proxy: http.ProxyFromEnvironment}
	dctx, cancel := context.WithTimeout(ctx, a.cfg.HTTPTimeout)
	conn, resp, err := d.DialContext(dctx, url, nil)
	cancel()
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return "", fmt.Errorf("slack: dialing the Socket Mode URL: %w", err)
	}
	a.live.Add(1)
	connCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() {
		stop()
		<-done
		a.closeConn(conn)
		a.live.Add(-1)
	}()
	window := a.cfg.PingInterval + a.cfg.PingTimeout
	alive := func() { _ = conn.SetReadDeadline(time.Now().Add(window)) }
	conn.SetPongHandler(func(string) error { alive(); return nil })
	conn.SetPingHandler(func(data string) error {
		alive()
		a.inbound.Heard(a.now(), "socket open")
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		if err != nil && !errors.Is(err, websocket.ErrCloseSent) {
			return err
		}
		return nil
	})
	conn.SetReadLimit(4 << 20)
	// Pinger; on ctx end it unblocks the reader by closing the socket.
	go func() {
		defer close(done)
		t := time.NewTicker(a.cfg.PingInterval)
		defer t.Stop()
		for {
			select {
			case <-connCtx.Done():
				_ = conn.SetReadDeadline(time.Now()) // unblock ReadMessage
				return
			case <-t.C:
				_ = conn.WriteControl(websocket.PingMessage, []byte("silas"), time.Now().Add(time.Second))
			}
		}
	}()
	for {
		alive()
		_, raw, err := conn.ReadMessage()
		if err != nil {
			a.inbound.Lost("reconnecting")
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				return "", fmt.Errorf("slack: nothing received for %s (half-open connection): %w", window, err)
			}
			return "", fmt.Errorf("slack: reading from Socket Mode: %w", err)
		}
		a.inbound.Heard(a.now(), "socket open")
		var env envelope
		if err := json.Unmarshal(raw, &env); err != nil {
			a.log.Warn("slack: undecodable Socket Mode message skipped", slog.Any("err", err))
			continue
		}
		switch env.Type {
		case "hello":
			a.reported.Store(int32(min(env.NumConnections, 1<<20)))
			a.inbound.Probe(connectionsProbe(env.NumConnections))
			lvl := slog.LevelInfo
			if env.NumConnections > 1 {
				lvl = slog.LevelWarn
			}
			a.log.Log(ctx, lvl, "slack: Socket Mode connected", slog.Int("num_connections", env.NumConnections))
			if env.NumConnections > 1 {
				a.log.Warn("slack: Slack reports more than one open Socket Mode connection for this app: another process (an older deployment, a second replica) uses the same app token and receives some of the events",
					slog.Int("num_connections", env.NumConnections))
			}
			continue
		case "disconnect":
			return env.Reason, nil
		}
		if env.EnvelopeID == "" {
			a.log.Debug("slack: Socket Mode message without an envelope id ignored", slog.String("type", env.Type))
			continue
		}
		log := a.log.With(slog.String("envelope_id", env.EnvelopeID), slog.String("type", env.Type))
		if !a.deliverRetrying(ctx, in, a.convertEnvelope(env, log), env.Payload, log) {
			// Not stored: no ack, so Slack delivers it again.
			return "", fmt.Errorf("slack: envelope %s not stored", env.EnvelopeID)
		}
		if ctx.Err() != nil {
			// The lease was lost (or shutdown began) while delivering:
			// not acknowledged, Slack redelivers it to the holder's socket.
			return "", ctx.Err()
		}
		ack, _ := json.Marshal(map[string]string{"envelope_id": env.EnvelopeID})
		_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := conn.WriteMessage(websocket.TextMessage, ack); err != nil {
			return "", fmt.Errorf("slack: acknowledging envelope %s: %w", env.EnvelopeID, err)
		}
	}
}

// convertEnvelope converts one envelope's payload.
func (a *Adapter) convertEnvelope(env envelope, log *slog.Logger) inbound {
	me := a.bot()
	switch env.Type {
	case "events_api":
		p, err := decodeEvents(env.Payload)
		if err != nil {
			return inbound{act: actMalformed, reason: err.Error()}
		}
		return eventToTurn(p, me, a.cfg.Name, a.method, a.threadKnown)
	case "interactive":
		ic, err := decodeInteraction(env.Payload)
		if err != nil {
			return inbound{act: actMalformed, reason: err.Error()}
		}
		return interactionToTurn(ic, me, a.cfg.Name, a.method)
	case "slash_commands":
		var c command
		if err := json.Unmarshal(env.Payload, &c); err != nil {
			return inbound{act: actMalformed, reason: "slash command payload is not JSON"}
		}
		return commandToTurn(&c, me, a.cfg.Name, a.method)
	}
	return inbound{act: actIgnore, reason: "envelope type " + env.Type}
}

// closeConn closes with a close handshake (bounded), then the socket, so
// Slack has counted the connection as gone before the next one opens.
func (a *Adapter) closeConn(conn *websocket.Conn) {
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			break
		}
	}
	_ = conn.Close()
}

// connectionsProbe is the platform probe of Socket Mode: the connections
// Slack's hello counts for the app against our one — more means another
// process shares the app token and receives some of the events.
func connectionsProbe(n int) string {
	if n > 1 {
		return fmt.Sprintf("Slack counts %d connections for this app, ours is 1: another process receives some events", n)
	}
	return fmt.Sprintf("Slack counts %d connection(s) for this app, ours is 1", n)
}

// Health reports the inbound liveness (core.HealthReporter). Over HTTP
// (the Events API) Slack calls us: a quiet workspace and an unreachable
// endpoint look the same from here, so it is not judged deaf.
func (a *Adapter) Health() core.ChannelHealth {
	if a.cfg.Mode == ModeHTTP {
		return core.ChannelHealth{Connected: true, State: "events over HTTP"}
	}
	return a.inbound.Health()
}
