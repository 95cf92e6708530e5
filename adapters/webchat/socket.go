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

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/commands/catalog"
	"github.com/silas-gateway/silas/internal/httpserve"
)

// Timings of a connection.
const (
	pingEvery    = 30 * time.Second
	writeTimeout = 10 * time.Second
	// queueSlack is how many frames beyond the replay a client may fall
	// behind before it is disconnected.
	queueSlack = 512
)

// outFrame is one entry of a client's send queue: a frame to write, and/or
// an instruction to close the connection once everything before it (and the
// frame itself) has been written.
type outFrame struct {
	b      []byte
	close  bool
	code   websocket.StatusCode
	reason string
}

// client is one connected browser. Frames to it go through a buffered
// queue so a slow browser never blocks the outbox; one that falls too far
// behind is disconnected and catches up from the replay when it returns.
type client struct {
	conn    *websocket.Conn
	session [32]byte // hash of the session token the socket was opened with
	out     chan outFrame
	once    sync.Once
	closed  chan struct{}

	mu sync.Mutex
	// holding is set while one of this client's frames is being delivered
	// to the core: frames pushed meanwhile wait in held until the frame's
	// ack has been queued, so an ack always precedes what its frame caused
	// (the engine may process the turn and send the reply before Deliver
	// has even returned to us).
	holding bool
	held    [][]byte
	ending  bool // a final frame or close is queued; drop further frames
}

// push queues a frame without blocking.
func (c *client) push(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ending {
		return
	}
	if c.holding {
		if len(c.held) >= cap(c.out) {
			c.tooSlowLocked()
			return
		}
		c.held = append(c.held, b)
		return
	}
	c.enqueueLocked(b)
}

func (c *client) enqueueLocked(b []byte) {
	select {
	case c.out <- outFrame{b: b}:
	default:
		c.tooSlowLocked()
	}
}

// tooSlowLocked drops a client whose queue is full. No close handshake:
// its close frame would only queue behind the data it is not reading. The
// page reconnects and catches up from the replay.
func (c *client) tooSlowLocked() {
	c.ending = true
	c.held = nil
	go c.abort()
}

// hold starts holding frames back (see client.holding).
func (c *client) hold() {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
}

// release queues first (the ack or error of the delivered frame, or hello
// and the replay), then every frame held back meanwhile, in order, and
// stops holding.
func (c *client) release(first ...[]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = false
	held := c.held
	c.held = nil
	if c.ending {
		return
	}
	for _, b := range first {
		if c.ending {
			return
		}
		c.enqueueLocked(b)
	}
	for _, b := range held {
		if c.ending {
			return
		}
		c.enqueueLocked(b)
	}
}

// finish queues a last frame and then a close with code; frames pushed
// afterwards are dropped.
func (c *client) finish(last []byte, code websocket.StatusCode, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ending {
		return
	}
	c.ending = true
	c.held = nil
	select {
	case c.out <- outFrame{b: last, close: true, code: code, reason: reason}:
	default:
		go c.close(code, reason)
	}
}

func (c *client) close(code websocket.StatusCode, reason string) {
	c.once.Do(func() {
		close(c.closed)
		c.conn.Close(code, reason) //nolint:errcheck // best effort
	})
}

// abort closes the connection at once, without a close handshake.
func (c *client) abort() {
	c.once.Do(func() {
		close(c.closed)
		c.conn.CloseNow() //nolint:errcheck // best effort
	})
}

// endSession tells the browser its session is over and closes the socket
// with 1008 (protocol §3.3, code unauthorized).
func (a *Adapter) endSession(c *client) {
	b, _ := json.Marshal(errorFrame{Type: "error", Code: "unauthorized", Message: "your session has ended; sign in again"})
	c.finish(b, websocket.StatusPolicyViolation, "session ended")
}

func (a *Adapter) serveWS(w http.ResponseWriter, r *http.Request) {
	session, expires, ok := a.authorize(w, r)
	if !ok {
		return
	}
	a.mu.Lock()
	in, runCtx := a.inbox, a.ctx
	a.mu.Unlock()
	if in == nil {
		httpError(w, http.StatusServiceUnavailable, "web chat is starting or stopping; retry shortly")
		return
	}
	// Accept enforces that Origin matches Host (403 otherwise): another
	// site cannot open this socket with the user's cookie.
	// The server's read and write timeouts must not end the socket: it
	// has its own (writeTimeout per frame, pings).
	if err := httpserve.ClearDeadlines(w); err != nil {
		a.log.Warn("websocket: cannot clear the connection deadlines", slog.Any("err", err))
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		a.log.Warn("websocket upgrade refused", slog.Any("err", err))
		return
	}
	// Exactly the protocol's limit: a larger frame closes with 1009.
	conn.SetReadLimit(MaxFrameBytes)
	c := &client{conn: conn, session: session, out: make(chan outFrame, a.cfg.History+a.queueSlack), closed: make(chan struct{})}

	// The client is registered holding its frames before the transcript is
	// read, and hello and the replay are queued before what was held: so
	// no message falls between the replay and the live stream and no live
	// frame overtakes the replay. (A live frame held meanwhile may repeat
	// what the replay shows, or show an older state that a newer stored
	// edit, still to be delivered, then replaces; the page applies frames
	// by message_id, so it converges on the stored state.)
	c.hold()
	a.mu.Lock()
	a.clients[c] = struct{}{}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.clients, c)
		a.mu.Unlock()
		c.close(websocket.StatusNormalClosure, "")
	}()
	replay, err := a.replay(r.Context())
	if err != nil {
		// Better no chat than a chat missing its history: the page
		// reconnects with backoff.
		a.log.Error("websocket: could not read the conversation's history", slog.Any("err", err))
		c.close(websocket.StatusInternalError, "history unavailable; retry")
		return
	}
	hello, _ := json.Marshal(helloFrame{Type: "hello", Identity: string(a.cfg.Identity), Conversation: string(a.conv)})
	c.release(append([][]byte{hello}, replay...)...)

	// The session may end while the socket is open.
	expiry := time.AfterFunc(expires.Sub(a.now()), func() { a.endSession(c) })
	defer expiry.Stop()

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
		typ, data, err := conn.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == -1 && !errors.Is(err, context.Canceled) {
				a.log.Debug("websocket read ended", slog.Any("err", err))
			}
			return
		}
		if typ != websocket.MessageText {
			a.sendFrame(c, errorFrame{Type: "error", Code: "bad_frame", Message: "frames must be JSON text frames"})
			continue
		}
		a.handleFrame(ctx, in, c, data)
	}
}

func (a *Adapter) writeLoop(ctx context.Context, c *client) {
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.closed:
			return
		case f := <-c.out:
			if f.b != nil {
				wctx, cancel := context.WithTimeout(ctx, writeTimeout)
				err := c.conn.Write(wctx, websocket.MessageText, f.b)
				cancel()
				if err != nil {
					c.close(websocket.StatusGoingAway, "write failed")
					return
				}
			}
			if f.close {
				c.close(f.code, f.reason)
				return
			}
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, writeTimeout)
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

// frameTurn is the turn of a parsed client frame.
func (a *Adapter) frameTurn(f ClientFrame) core.Turn {
	t := core.Turn{
		Channel: a.cfg.Name, Conversation: a.conv, Sender: a.cfg.Identity, SenderName: "you",
		Evidence: core.Evidence{Authenticated: true, Method: "webchat-session"}, At: a.now(),
	}
	switch f.Type {
	case "message":
		t.EventID, t.Text = "m:"+f.ID, f.Text
		// The text fallback: "approve <id>" typed is the Tap the button
		// sends, validated by the core exactly like one. Otherwise commands
		// typed without the slash ("stop") read as the one command catalog
		// reads them (catalog.Short: "run …" stays the agent's).
		if tap, ok := kit.ParseTextTap(f.Text, nil); ok {
			t.Text, t.Tap = "", &tap
		} else {
			t.Text = catalog.Short(f.Text)
			// A reply to one of the bot's messages: its message_id is the
			// ref the outbox recorded when it delivered it.
			t.ReplyTo = core.MessageRef(f.ReplyTo)
		}
	case "tap":
		t.EventID = "t:" + f.ID
		t.Tap = &core.Tap{Card: cards.ID(f.CardID), Choice: f.Choice}
	}
	return t
}

func (a *Adapter) handleFrame(ctx context.Context, in core.Inbox, c *client, data []byte) {
	// Every frame reads the session (one primary-key read; a revoke or a
	// logout on any instance counts from the next frame on).
	if _, ok, err := a.sess.session(ctx, c.session, a.now()); err != nil {
		a.log.Error("web chat: could not read the session", slog.Any("err", err))
		a.sendFrame(c, errorFrame{Type: "error", Code: "internal", Message: "the gateway could not check the session; retry"})
		return
	} else if !ok {
		a.endSession(c)
		return
	}
	if !a.frameLim.Allow(string(c.session[:]), a.now()) {
		a.sendFrame(c, errorFrame{Type: "error", Code: "rate_limited", Message: "too many frames; slow down and resend"})
		return
	}
	f, err := ParseFrame(data)
	if err != nil {
		var fe *FrameError
		errors.As(err, &fe)
		a.log.Info("bad web chat frame", slog.String("code", fe.Code), slog.Int("bytes", len(data)))
		a.sendFrame(c, errorFrame{Type: "error", ID: fe.ID, Code: fe.Code, Message: fe.Message})
		return
	}
	if f.Type == "get_card" {
		// A read, not a turn: answered at once, nothing is stored.
		c.push(a.cardState(ctx, f))
		return
	}
	t := a.frameTurn(f)
	// Hold this client's frames from before Deliver until its answer is
	// queued: the engine processes the turn and its outbox calls Send
	// asynchronously, possibly before Deliver returns here.
	c.hold()
	res, err := in.Deliver(ctx, t)
	var answer any = ackFrame{Type: "ack", ID: f.ID, Duplicate: res.Duplicate}
	if err != nil {
		code, msg := "internal", "the gateway could not store this; retry"
		var rej *core.RejectedError
		if errors.As(err, &rej) {
			code, msg = "rejected", rej.Reason
		}
		a.log.Warn("deliver failed", slog.String("frame", f.ID), slog.Any("err", err))
		answer = errorFrame{Type: "error", ID: f.ID, Code: code, Message: msg}
	}
	b, _ := json.Marshal(answer)
	c.release(b)
}
