package webchat

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/silas-gateway/silas/adapters/channeltest"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// TestConformance runs the channel conformance suite against the web chat;
// its "platform" is a WebSocket client behaving as the page does (it
// resends frames not acknowledged, after a reconnect too).
func TestConformance(t *testing.T) {
	t.Parallel()
	channeltest.Run(t, func(t *testing.T, o channeltest.Options) (channeltest.Platform, string) {
		switch {
		case o.Shared:
			return nil, "the web chat has one person per conversation: nobody else can tap a card there"
		}
		return newConformanceClient(t), ""
	})
}

// conformanceClient is channeltest.Platform over the web chat: a logged-in
// WebSocket client keeping the transcript as the page shows it.
type conformanceClient struct {
	t testing.TB

	mu      sync.Mutex
	srv     *httptest.Server
	conn    *websocket.Conn
	next    int
	pending []pendingFrame // sent, not acknowledged yet, in order
	order   []string
	msgs    map[string]*shown
	told    []string // refusals answered to this client's taps (tap_result)
	answers int      // tap_result frames received
}

type pendingFrame struct {
	id string
	b  []byte
}

type shown struct {
	text  string
	card  *cards.Card
	edits int
}

var _ channeltest.Platform = (*conformanceClient)(nil)

func newConformanceClient(t *testing.T) *conformanceClient {
	c := &conformanceClient{t: t, msgs: map[string]*shown{}}
	t.Cleanup(func() {
		c.mu.Lock()
		srv, conn := c.srv, c.conn
		c.mu.Unlock()
		if conn != nil {
			conn.CloseNow()
		}
		if srv != nil {
			srv.Close()
		}
	})
	return c
}

func (c *conformanceClient) Identity(r channeltest.Role) core.IdentityID {
	if r == channeltest.Approver {
		return "webchat:local"
	}
	return "webchat:other"
}

func (c *conformanceClient) NewChannel(t testing.TB, state core.StateStore, log *slog.Logger) core.Channel {
	cfg := Config{State: state, Logger: log}
	if out, ok := state.(OutputSource); ok {
		cfg.Outputs = out
	}
	// The conversation a browser is shown comes from the core's storage,
	// as in silas serve: a card's final state reached while nobody was
	// connected is there on the next connect.
	if h, ok := state.(HistoryReader); ok {
		cfg.Transcript = h
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Started serves the new adapter, signs in with a fresh login secret (the
// gateway prints one at every start), connects and resends every frame the
// previous gateway did not acknowledge.
func (c *conformanceClient) Started(t testing.TB, ch core.Channel) {
	a := ch.(*Adapter)
	srv := httptest.NewServer(a)
	c.mu.Lock()
	old := c.srv
	c.srv = srv
	c.mu.Unlock()
	if old != nil {
		old.Close()
	}
	// Run may not have registered the inbox yet: /ws answers 503 then.
	var conn *websocket.Conn
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if conn, err = c.dial(srv, a); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("web chat: cannot connect: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.mu.Lock()
	c.conn = conn
	resend := append([]pendingFrame(nil), c.pending...)
	c.mu.Unlock()
	go c.read(conn)
	for _, f := range resend {
		c.write(conn, f.b)
	}
}

func (c *conformanceClient) dial(srv *httptest.Server, a *Adapter) (*websocket.Conn, error) {
	body := strings.NewReader(`{"secret":"` + a.NewLoginSecret(time.Minute) + `"}`)
	resp, err := srv.Client().Post(srv.URL+"/login", "application/json", body)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	var token string
	for _, ck := range resp.Cookies() {
		if ck.Name == cookieName {
			token = ck.Value
		}
	}
	if token == "" {
		return nil, fmt.Errorf("login answered %d without a session", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Cookie": {cookieName + "=" + token}, "Origin": {srv.URL}},
	})
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(MaxFrameBytes)
	return conn, nil
}

// read applies server frames to the transcript until the connection ends.
func (c *conformanceClient) read(conn *websocket.Conn) {
	for {
		_, b, err := conn.Read(context.Background())
		if err != nil {
			return
		}
		var f struct {
			Type      string      `json:"type"`
			ID        string      `json:"id"`
			Code      string      `json:"code"`
			MessageID string      `json:"message_id"`
			Text      string      `json:"text"`
			Card      *cards.Card `json:"card"`
			Refused   bool        `json:"refused"`
			Message   string      `json:"message"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			c.t.Errorf("web chat: a server frame is not JSON: %q", b)
			return
		}
		c.mu.Lock()
		switch f.Type {
		case "ack":
			c.dropLocked(f.ID)
		case "error":
			// "internal" (the gateway could not store it, e.g. while
			// stopping) is retried at the next connect, as the page does;
			// anything else is an answer.
			if f.Code != "internal" {
				c.dropLocked(f.ID)
				c.t.Errorf("web chat: frame %s refused: %s", f.ID, b)
			}
		case "tap_result":
			c.answers++
			// A refusal is told to the tapper only, correlated by the
			// frame id this client sent.
			if f.Refused && f.Message != "" {
				c.told = append(c.told, f.Message)
			}
		case "message", "update":
			m, ok := c.msgs[f.MessageID]
			if !ok {
				m = &shown{}
				c.msgs[f.MessageID] = m
				c.order = append(c.order, f.MessageID)
			} else if f.Type == "update" {
				m.edits++
			}
			m.text, m.card = f.Text, f.Card
		}
		c.mu.Unlock()
	}
}

func (c *conformanceClient) dropLocked(id string) {
	for i, p := range c.pending {
		if p.id == id {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			return
		}
	}
}

func (c *conformanceClient) write(conn *websocket.Conn, b []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A failed write is resent after the next connect.
	_ = conn.Write(ctx, websocket.MessageText, b)
}

// send queues a client frame and writes it if connected.
func (c *conformanceClient) send(prefix string, frame map[string]any) {
	c.mu.Lock()
	c.next++
	id := fmt.Sprintf("%s-%d", prefix, c.next)
	frame["id"] = id
	b, _ := json.Marshal(frame)
	c.pending = append(c.pending, pendingFrame{id: id, b: b})
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		c.write(conn, b)
	}
}

func (c *conformanceClient) Say(_ testing.TB, _ channeltest.Role, text string) {
	c.send("m", map[string]any{"type": "message", "text": text})
}

// Reply: the web chat has no quoting.
func (c *conformanceClient) Reply(testing.TB, channeltest.Role, channeltest.Message, string) bool {
	return false
}

func (c *conformanceClient) Tap(_ testing.TB, _ channeltest.Role, m channeltest.Message, choice string) {
	c.send("t", map[string]any{"type": "tap", "card_id": string(m.Card), "choice": choice})
}

func (c *conformanceClient) Chat(testing.TB) []channeltest.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]channeltest.Message, 0, len(c.order))
	for _, id := range c.order {
		s := c.msgs[id]
		m := channeltest.Message{ID: id, Text: s.text, Edits: s.edits}
		if cd := s.card; cd != nil {
			m.Card, m.Status, m.Text = cd.ID, cd.Status, strings.TrimSpace(s.text+"\n"+cd.PlainText())
			if cd.Open() {
				for _, ch := range cd.Choices {
					m.Buttons = append(m.Buttons, channeltest.Button{Label: ch.Label, Choice: ch.ID})
				}
			}
			if cd.Link != nil && (cd.Status == "" || cd.Status.Open()) {
				m.Buttons = append(m.Buttons, channeltest.Button{Label: cd.Link.Label, URL: cd.Link.URL})
			}
		}
		out = append(out, m)
	}
	return out
}

// Told: refusals come as tap_result answers to the tap's frame (typed
// taps too), other notices as messages.
// TapAnswers counts the tap_result frames (one client: every tap is the
// Approver's).
func (c *conformanceClient) TapAnswers(testing.TB, channeltest.Role) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answers, true
}

func (c *conformanceClient) Told(t testing.TB, _ channeltest.Role) []string {
	c.mu.Lock()
	out := append([]string(nil), c.told...)
	c.mu.Unlock()
	for _, m := range c.Chat(t) {
		if m.Card == "" {
			out = append(out, m.Text)
		}
	}
	return out
}

// RateLimit: the web chat has no platform rate limit.
func (c *conformanceClient) RateLimit(testing.TB, int) bool { return false }

func (c *conformanceClient) Violations() []string { return nil }

// MaxTextLen: frames shorten what does not fit MaxFrameBytes; there is no
// per-message text limit.
func (c *conformanceClient) MaxTextLen() int { return 0 }
