package webchat

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// client is one connected browser. Frames to it go through a buffered
// queue so a slow browser never blocks the outbox; one that falls too far
// behind is disconnected and catches up from the replay when it returns.
type client struct {
	conn   *websocket.Conn
	out    chan []byte
	once   sync.Once
	closed chan struct{}
}

func (c *client) push(b []byte) {
	select {
	case c.out <- b:
	default:
		go c.close(websocket.StatusPolicyViolation, "too slow: reconnect to catch up")
	}
}

func (c *client) close(code websocket.StatusCode, reason string) {
	c.once.Do(func() {
		close(c.closed)
		c.conn.Close(code, reason) //nolint:errcheck // best effort
	})
}

func (a *Adapter) serveWS(w http.ResponseWriter, r *http.Request) {
	if !a.authorized(r) {
		httpError(w, http.StatusUnauthorized, "not logged in")
		return
	}
	a.mu.Lock()
	in, runCtx := a.inbox, a.ctx
	a.mu.Unlock()
	if in == nil {
		httpError(w, http.StatusServiceUnavailable, "web chat is starting or stopping; retry shortly")
		return
	}
	// Accept enforces that Origin matches Host: another site cannot open
	// this socket with the user's cookie.
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		a.log.Warn("websocket upgrade refused", slog.Any("err", err))
		return
	}
	conn.SetReadLimit(MaxFrameBytes + 1024)
	c := &client{conn: conn, out: make(chan []byte, 512), closed: make(chan struct{})}

	// Register and snapshot the replay under one lock, so no message falls
	// between the replay and the live stream.
	a.mu.Lock()
	hello, _ := json.Marshal(helloFrame{Type: "hello", Identity: string(a.cfg.Identity), Conversation: string(a.conv)})
	c.out <- hello
	for _, e := range a.history {
		f := e.frame
		f.Type, f.Replay = "message", true
		b, _ := json.Marshal(f)
		select {
		case c.out <- b:
		default:
		}
	}
	a.clients[c] = struct{}{}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.clients, c)
		a.mu.Unlock()
		c.close(websocket.StatusNormalClosure, "")
	}()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-runCtx.Done():
			c.close(websocket.StatusGoingAway, "gateway shutting down")
		case <-ctx.Done():
		}
	}()
	go a.writeLoop(ctx, c)
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == -1 && !errors.Is(err, context.Canceled) {
				a.log.Debug("websocket read ended", slog.Any("err", err))
			}
			return
		}
		a.handleFrame(ctx, in, c, data)
	}
}

func (a *Adapter) writeLoop(ctx context.Context, c *client) {
	ping := time.NewTicker(30 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.closed:
			return
		case b := <-c.out:
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.conn.Write(wctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				c.close(websocket.StatusGoingAway, "write failed")
				return
			}
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.conn.Ping(pctx)
			cancel()
			if err != nil {
				c.close(websocket.StatusGoingAway, "ping failed")
				return
			}
		}
	}
}

func (a *Adapter) sendFrame(c *client, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	c.push(b)
}

func (a *Adapter) handleFrame(ctx context.Context, in core.Inbox, c *client, data []byte) {
	f, err := ParseFrame(data)
	if err != nil {
		var fe *FrameError
		errors.As(err, &fe)
		a.log.Info("bad web chat frame", slog.String("code", fe.Code), slog.Int("bytes", len(data)))
		a.sendFrame(c, errorFrame{Type: "error", ID: fe.ID, Code: fe.Code, Message: fe.Message})
		return
	}
	t := core.Turn{
		Channel: a.cfg.Name, Conversation: a.conv, Sender: a.cfg.Identity, SenderName: "you",
		Evidence: core.Evidence{Authenticated: true, Method: "webchat-session"}, At: a.now(),
	}
	switch f.Type {
	case "message":
		t.EventID, t.Text = "m:"+f.ID, f.Text
	case "tap":
		t.EventID = "t:" + f.ID
		t.Tap = &core.Tap{Card: cards.ID(f.CardID), Choice: f.Choice}
	}
	res, err := in.Deliver(ctx, t)
	if err != nil {
		code, msg := "internal", "the gateway could not store this; retry"
		var rej *core.RejectedError
		if errors.As(err, &rej) {
			code, msg = "rejected", rej.Reason
		}
		a.log.Warn("deliver failed", slog.String("frame", f.ID), slog.Any("err", err))
		a.sendFrame(c, errorFrame{Type: "error", ID: f.ID, Code: code, Message: msg})
		return
	}
	a.sendFrame(c, ackFrame{Type: "ack", ID: f.ID, Duplicate: res.Duplicate})
}
