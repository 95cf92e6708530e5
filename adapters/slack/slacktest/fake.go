// Package slacktest is a fake of the Slack Web API and Socket Mode for
// tests, driven through the real slack-go client. It enforces Slack's
// limits (message and block sizes, about one call per second per channel,
// nothing to a channel before a 429's Retry-After has passed) and records
// every breach in Violations, keeps the messages the bot posted and their
// edits, ephemeral notices and deletions, and plays the user's side: a
// message in a DM or channel (Events API, both `message` and
// `app_mention` for a mention, as Slack does), a button tap (block_actions)
// and a slash command. Events are delivered over Socket Mode to the one
// connected socket (and redelivered on the next connection until
// acknowledged), or, in HTTP mode, POSTed signed to a target by Push.
//
// Faults: RateLimit and RateLimitNext (429 storms), Outage (429s and 503s
// for a while), DropSocket, Refresh (disconnect
// refresh_requested), HalfOpen (the socket stops answering pings and
// sending), ForeignTeam events.
package slacktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Options shape the fake.
type Options struct {
	// Team is the workspace id (default T0TEST).
	Team string
	// PerChannelInterval is the spacing the fake demands between calls to
	// one channel (default 1s; a breach is recorded with 100ms tolerance).
	PerChannelInterval time.Duration
	// SigningSecret signs HTTP-mode requests (Push).
	SigningSecret string
	// OtherConnections are Socket Mode connections of another process
	// using the same app token, counted in hello's num_connections (they
	// receive no events here).
	OtherConnections int
	// PingEvery, when set, has the fake ping each socket this often, as
	// Slack does (a sign of life the adapter's health reports); 0: it only
	// answers the adapter's pings.
	PingEvery time.Duration
	// Now is the fake's clock for its limits, Retry-After and outages
	// (default time.Now); a test running time faster gives the adapter the
	// same clock.
	Now func() time.Time
}

// Bot identity.
const (
	BotUser  = "U0SILAS"
	BotID    = "B0SILAS"
	BotToken = "xoxb-1234-5678-fakebottoken"
	AppToken = "xapp-1-A0SILAS-1234-fakeapptoken"
)

// Message is a message the bot posted, in its latest state.
type Message struct {
	Channel, TS, Thread string
	Text                string
	Blocks              []map[string]any
	Edits               int
	// PostedAt is when chat.postMessage created it (the fake's clock).
	PostedAt time.Time
}

// BlocksText is every text of the blocks, joined (for assertions).
func (m Message) BlocksText() string {
	b, _ := json.Marshal(m.Blocks)
	return string(b)
}

// Buttons returns the action buttons: label → value.
func (m Message) Buttons() [][2]string {
	var out [][2]string
	for _, bl := range m.Blocks {
		if bl["type"] != "actions" {
			continue
		}
		els, _ := bl["elements"].([]any)
		for _, e := range els {
			em, _ := e.(map[string]any)
			txt, _ := em["text"].(map[string]any)
			label, _ := txt["text"].(string)
			v, _ := em["value"].(string)
			out = append(out, [2]string{label, v})
		}
	}
	return out
}

// Ephemeral is a notice shown to one user.
type Ephemeral struct{ Channel, User, Thread, Text string }

// Call is one Web API request.
type Call struct {
	Method, Channel string
	At              time.Time
}

type pendingEnv struct {
	id      string
	typ     string
	payload json.RawMessage
	tries   int
}

// Server is the fake.
type Server struct {
	t    testing.TB
	opts Options
	hs   *httptest.Server
	// URL is the Web API base URL (ends with /), for slack.base_url.
	URL string

	mu         sync.Mutex
	seq        int64
	messages   map[string]*Message // channel:ts
	order      []string
	ephemerals []Ephemeral
	deleted    []string
	calls      []Call
	violations []string
	lastCall   map[string]time.Time
	pausedTill map[string]time.Time
	rlUntil    time.Time
	rlAfter    int
	rlNext     int // the next rlNext posts and edits answer 429
	outUntil   time.Time
	outAfter   int
	outCalls   int
	pending    []*pendingEnv
	conns      map[*websocket.Conn]*connState
	maxLive    int
	opens      int
	target     string
	// deaf: Deafen — no events and no pings, pongs still answered.
	deaf bool
}

type connState struct {
	halfOpen bool
	wmu      sync.Mutex
}

// NewServer starts a fake; it stops with the test.
func NewServer(t testing.TB, o Options) *Server {
	if o.Team == "" {
		o.Team = "T0TEST"
	}
	if o.PerChannelInterval == 0 {
		o.PerChannelInterval = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Server{t: t, opts: o, messages: map[string]*Message{}, lastCall: map[string]time.Time{},
		pausedTill: map[string]time.Time{}, conns: map[*websocket.Conn]*connState{}}
	s.hs = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.hs.URL + "/api/"
	t.Cleanup(func() {
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.hs.Close()
	})
	return s
}

// Team is the fake's workspace id.
func (s *Server) Team() string { return s.opts.Team }

func (s *Server) nextTS() string {
	s.seq++
	return fmt.Sprintf("%d.%06d", 1_700_000_000+s.seq, s.seq)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code string) {
	writeJSON(w, map[string]any{"ok": false, "error": code})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/socket" {
		s.serveSocket(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/response/") {
		s.serveResponseURL(w, r)
		return
	}
	method, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	vals := url.Values{}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		for k, v := range m {
			switch x := v.(type) {
			case string:
				vals.Set(k, x)
			default:
				b, _ := json.Marshal(x)
				vals.Set(k, string(b))
			}
		}
	} else {
		vals, _ = url.ParseQuery(string(body))
	}
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if token == "" {
		token = vals.Get("token")
	}
	if method == "apps.connections.open" {
		if token != AppToken {
			fail(w, "invalid_auth")
			return
		}
		s.mu.Lock()
		s.opens++
		s.mu.Unlock()
		writeJSON(w, map[string]any{"ok": true, "url": "ws" + strings.TrimPrefix(s.hs.URL, "http") + "/socket"})
		return
	}
	if token != BotToken {
		fail(w, "invalid_auth")
		return
	}
	if method == "auth.test" {
		w.Header().Set("X-OAuth-Scopes", "app_mentions:read,chat:write,commands,im:history,im:read,im:write,channels:history,groups:history")
		writeJSON(w, map[string]any{"ok": true, "url": "https://test.slack.com/", "team": "Test", "user": "silas",
			"team_id": s.opts.Team, "user_id": BotUser, "bot_id": BotID})
		return
	}
	channel := vals.Get("channel")
	if strings.HasPrefix(channel, "U") {
		channel = "D" + channel[1:] // the app's DM with that user
	}
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, Call{Method: method, Channel: channel, At: now})
	if until := s.pausedTill[channel]; now.Before(until) {
		s.violations = append(s.violations, fmt.Sprintf("%s to %s %s before Retry-After passed", method, channel, until.Sub(now)))
	}
	if last, ok := s.lastCall[channel]; ok && now.Sub(last) < s.opts.PerChannelInterval-100*time.Millisecond {
		s.violations = append(s.violations, fmt.Sprintf("%s to %s only %s after the previous call", method, channel, now.Sub(last)))
	}
	s.lastCall[channel] = now
	if s.rlNext > 0 && (method == "chat.postMessage" || method == "chat.update") {
		s.rlNext--
		w.Header().Set("Retry-After", strconv.Itoa(s.rlAfter))
		s.pausedTill[channel] = now.Add(time.Duration(s.rlAfter) * time.Second)
		w.WriteHeader(http.StatusTooManyRequests)
		writeJSON(w, map[string]any{"ok": false, "error": "ratelimited"})
		return
	}
	if now.Before(s.outUntil) {
		// An outage: 429 storms and gateway errors, alternately.
		s.outCalls++
		if s.outCalls%2 == 1 {
			w.Header().Set("Retry-After", strconv.Itoa(s.outAfter))
			s.pausedTill[channel] = now.Add(time.Duration(s.outAfter) * time.Second)
			w.WriteHeader(http.StatusTooManyRequests)
			writeJSON(w, map[string]any{"ok": false, "error": "ratelimited"})
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if now.Before(s.rlUntil) {
		w.Header().Set("Retry-After", strconv.Itoa(s.rlAfter))
		s.pausedTill[channel] = now.Add(time.Duration(s.rlAfter) * time.Second)
		w.WriteHeader(http.StatusTooManyRequests)
		writeJSON(w, map[string]any{"ok": false, "error": "ratelimited"})
		return
	}
	switch method {
	case "chat.postMessage", "chat.update":
		text := vals.Get("text")
		var blocks []map[string]any
		if b := vals.Get("blocks"); b != "" {
			if err := json.Unmarshal([]byte(b), &blocks); err != nil {
				fail(w, "invalid_blocks_format")
				return
			}
		}
		if v := CheckLimits(text, blocks); v != "" {
			s.violations = append(s.violations, method+": "+v)
			fail(w, "invalid_blocks")
			return
		}
		if text == "" && len(blocks) == 0 {
			fail(w, "no_text")
			return
		}
		if method == "chat.update" {
			m := s.messages[channel+":"+vals.Get("ts")]
			if m == nil {
				fail(w, "message_not_found")
				return
			}
			m.Text, m.Blocks = text, blocks
			m.Edits++
			writeJSON(w, map[string]any{"ok": true, "channel": channel, "ts": m.TS, "text": text})
			return
		}
		ts := s.nextTS()
		m := &Message{Channel: channel, TS: ts, Thread: vals.Get("thread_ts"), Text: text, Blocks: blocks, PostedAt: now}
		s.messages[channel+":"+ts] = m
		s.order = append(s.order, channel+":"+ts)
		writeJSON(w, map[string]any{"ok": true, "channel": channel, "ts": ts})
	case "chat.postEphemeral":
		s.ephemerals = append(s.ephemerals, Ephemeral{Channel: channel, User: vals.Get("user"), Thread: vals.Get("thread_ts"), Text: vals.Get("text")})
		writeJSON(w, map[string]any{"ok": true, "message_ts": s.nextTS()})
	case "chat.delete":
		k := channel + ":" + vals.Get("ts")
		if _, ok := s.messages[k]; !ok {
			fail(w, "cant_delete_message") // not the bot's own message
			return
		}
		delete(s.messages, k)
		s.deleted = append(s.deleted, k)
		writeJSON(w, map[string]any{"ok": true, "channel": channel, "ts": vals.Get("ts")})
	default:
		fail(w, "unknown_method")
	}
}

func (s *Server) serveResponseURL(w http.ResponseWriter, r *http.Request) {
	var m struct {
		Text         string `json:"text"`
		ResponseType string `json:"response_type"`
	}
	_ = json.NewDecoder(r.Body).Decode(&m)
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/response/"), "/")
	s.mu.Lock()
	if m.ResponseType == "in_channel" {
		s.violations = append(s.violations, "response_url used in_channel")
	}
	if len(parts) == 2 {
		s.ephemerals = append(s.ephemerals, Ephemeral{Channel: parts[0], User: parts[1], Text: m.Text})
	}
	s.mu.Unlock()
	writeJSON(w, map[string]any{"ok": true})
}

// CheckLimits holds a message to Slack's documented limits; "" when it
// keeps them, else what it breaks.
func CheckLimits(text string, blocks []map[string]any) string {
	if n := len([]rune(text)); n > 40000 {
		return fmt.Sprintf("text of %d characters", n)
	}
	if len(blocks) > 50 {
		return fmt.Sprintf("%d blocks", len(blocks))
	}
	for i, b := range blocks {
		switch b["type"] {
		case "header":
			if n := textLen(b["text"]); n > 150 || blankText(b["text"]) {
				return fmt.Sprintf("block %d: header of %d characters", i, n)
			}
		case "section":
			if n := textLen(b["text"]); n > 3000 || blankText(b["text"]) {
				return fmt.Sprintf("block %d: section text of %d characters", i, n)
			}
		case "context":
			els, _ := b["elements"].([]any)
			if len(els) > 10 {
				return fmt.Sprintf("block %d: %d context elements", i, len(els))
			}
			for _, e := range els {
				if n := textLen(e); n > 3000 || blankText(e) {
					return fmt.Sprintf("block %d: context text of %d characters", i, n)
				}
			}
		case "actions":
			els, _ := b["elements"].([]any)
			if len(els) > 25 {
				return fmt.Sprintf("block %d: %d elements", i, len(els))
			}
			for _, e := range els {
				em, _ := e.(map[string]any)
				if n := textLen(em["text"]); n > 75 || blankText(em["text"]) {
					return fmt.Sprintf("block %d: button text of %d characters", i, n)
				}
				if a, _ := em["action_id"].(string); len(a) > 255 {
					return "action_id over 255 characters"
				}
				if v, _ := em["value"].(string); len(v) > 2000 {
					return "button value over 2000 characters"
				}
			}
		}
	}
	return ""
}

func blankText(v any) bool {
	m, _ := v.(map[string]any)
	s, _ := m["text"].(string)
	return strings.TrimSpace(s) == ""
}

func textLen(v any) int {
	m, _ := v.(map[string]any)
	s, _ := m["text"].(string)
	return len([]rune(s))
}

// --- Socket Mode ---

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	st := &connState{}
	s.mu.Lock()
	s.conns[c] = st
	live := s.liveLocked()
	s.mu.Unlock()
	if live > 1 {
		// TCP teardown of the previous socket may lag a moment behind.
		time.Sleep(200 * time.Millisecond)
		s.mu.Lock()
		if l := s.liveLocked(); l > 1 {
			s.violations = append(s.violations, fmt.Sprintf("%d Socket Mode connections open at once", l))
			s.maxLive = max(s.maxLive, l)
		}
		live = s.liveLocked()
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.maxLive = max(s.maxLive, 1)
	s.mu.Unlock()
	c.SetPingHandler(func(data string) error {
		s.mu.Lock()
		half := st.halfOpen
		s.mu.Unlock()
		if half {
			return nil
		}
		st.wmu.Lock()
		defer st.wmu.Unlock()
		return c.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	c.SetCloseHandler(func(code int, text string) error {
		s.mu.Lock()
		delete(s.conns, c) // gone before the close is echoed
		s.mu.Unlock()
		st.wmu.Lock()
		defer st.wmu.Unlock()
		return c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(time.Second))
	})
	s.write(c, st, map[string]any{"type": "hello", "num_connections": live + s.opts.OtherConnections, "connection_info": map[string]any{"app_id": "A0SILAS"}})
	s.flush()
	stopPings := s.pinger(c, st)
	defer stopPings()
	for {
		_, raw, err := c.ReadMessage()
		if err != nil {
			break
		}
		var ack struct {
			EnvelopeID string `json:"envelope_id"`
		}
		if json.Unmarshal(raw, &ack) == nil && ack.EnvelopeID != "" {
			s.mu.Lock()
			for i, p := range s.pending {
				if p.id == ack.EnvelopeID {
					s.pending = append(s.pending[:i], s.pending[i+1:]...)
					break
				}
			}
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

func (s *Server) liveLocked() int { return len(s.conns) }

// pinger pings c every Options.PingEvery while it is neither half-open nor
// deaf; the returned func stops it. A ticker, not a River job: it plays
// Slack's own per-socket ping, a platform heartbeat of this fake.
func (s *Server) pinger(c *websocket.Conn, st *connState) func() {
	if s.opts.PingEvery <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(s.opts.PingEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			s.mu.Lock()
			quiet := st.halfOpen || s.deaf
			s.mu.Unlock()
			if !quiet {
				st.wmu.Lock()
				_ = c.WriteControl(websocket.PingMessage, []byte("slack"), time.Now().Add(time.Second))
				st.wmu.Unlock()
			}
		}
	}()
	return func() { close(done) }
}

// Deafen makes Slack stop delivering events and pings on the open socket
// while it stays open and still answers pings (deaf), or resume and
// deliver what was held (false): issue 28's deaf channel.
func (s *Server) Deafen(deaf bool) {
	s.mu.Lock()
	s.deaf = deaf
	s.mu.Unlock()
	if !deaf {
		s.flush()
	}
}

func (s *Server) write(c *websocket.Conn, st *connState, v any) {
	b, _ := json.Marshal(v)
	st.wmu.Lock()
	defer st.wmu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_ = c.WriteMessage(websocket.TextMessage, b)
}

// current is the connection events go to (nil when none).
func (s *Server) current() (*websocket.Conn, *connState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, st := range s.conns {
		return c, st
	}
	return nil, nil
}

// flush sends every unacknowledged envelope to the current connection
// (Slack retries unacknowledged events; here on every new connection and
// every new event).
func (s *Server) flush() {
	c, st := s.current()
	if c == nil {
		return
	}
	s.mu.Lock()
	if st.halfOpen || s.deaf {
		s.mu.Unlock()
		return
	}
	var out []map[string]any
	for _, p := range s.pending {
		out = append(out, map[string]any{"envelope_id": p.id, "type": p.typ, "payload": p.payload, "retry_attempt": p.tries,
			"accepts_response_payload": false})
		p.tries++
	}
	s.mu.Unlock()
	for _, e := range out {
		s.write(c, st, e)
	}
}

func (s *Server) enqueue(typ string, payload any) {
	b, _ := json.Marshal(payload)
	s.mu.Lock()
	s.seq++
	s.pending = append(s.pending, &pendingEnv{id: fmt.Sprintf("env-%d", s.seq), typ: typ, payload: b})
	target := s.target
	s.mu.Unlock()
	if target == "" {
		s.sendOne()
	}
}

// sendOne sends only the newest envelope (events are not re-sent on every
// new event; redelivery happens on reconnect).
func (s *Server) sendOne() {
	c, st := s.current()
	if c == nil {
		return
	}
	s.mu.Lock()
	if st.halfOpen || s.deaf || len(s.pending) == 0 {
		s.mu.Unlock()
		return
	}
	p := s.pending[len(s.pending)-1]
	e := map[string]any{"envelope_id": p.id, "type": p.typ, "payload": p.payload, "retry_attempt": p.tries}
	p.tries++
	s.mu.Unlock()
	s.write(c, st, e)
}

// DropSocket closes the live socket abruptly (no close frame).
func (s *Server) DropSocket() {
	if c, _ := s.current(); c != nil {
		c.UnderlyingConn().Close()
	}
}

// Refresh sends disconnect refresh_requested on the live socket.
func (s *Server) Refresh() {
	if c, st := s.current(); c != nil {
		s.write(c, st, map[string]any{"type": "disconnect", "reason": "refresh_requested"})
	}
}

// HalfOpen makes the live socket deaf and mute: no pongs, no events.
func (s *Server) HalfOpen() {
	if _, st := s.current(); st != nil {
		s.mu.Lock()
		st.halfOpen = true
		s.mu.Unlock()
	}
}

// Redeliver re-sends every unacknowledged envelope to the live socket.
func (s *Server) Redeliver() { s.flush() }

// Opens is the number of apps.connections.open calls.
func (s *Server) Opens() int { s.mu.Lock(); defer s.mu.Unlock(); return s.opens }

// MaxLive is the most Socket Mode connections seen open at once.
func (s *Server) MaxLive() int { s.mu.Lock(); defer s.mu.Unlock(); return s.maxLive }

// Live is the number of open Socket Mode connections that still answer.
func (s *Server) Live() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.conns {
		if !st.halfOpen {
			n++
		}
	}
	return n
}

// Pending is the number of unacknowledged events.
func (s *Server) Pending() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.pending) }

// RateLimit answers every Web API chat.* call with 429 and Retry-After
// retryAfter seconds for d.
func (s *Server) RateLimit(d time.Duration, retryAfter int) {
	s.mu.Lock()
	s.rlUntil, s.rlAfter = s.opts.Now().Add(d), retryAfter
	s.mu.Unlock()
}

// Outage makes the Web API's chat.* methods fail for d (on the fake's
// clock): every other call is answered 429 with Retry-After retryAfter
// seconds, the others 503. Socket Mode stays up, so events keep arriving.
// It returns when the outage ends.
func (s *Server) Outage(d time.Duration, retryAfter int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outUntil, s.outAfter = s.opts.Now().Add(d), retryAfter
	return s.outUntil
}

// OutageCalls is the number of calls answered with an outage's errors.
func (s *Server) OutageCalls() int { s.mu.Lock(); defer s.mu.Unlock(); return s.outCalls }

// RateLimitNext answers the next n chat.postMessage and chat.update calls
// with 429 and Retry-After retryAfter seconds.
func (s *Server) RateLimitNext(n, retryAfter int) {
	s.mu.Lock()
	s.rlNext, s.rlAfter = n, retryAfter
	s.mu.Unlock()
}

// --- the user's side ---

// Msg is a message a person sends.
type Msg struct {
	Channel string // D… for a DM, C… for a channel
	User    string
	Text    string // Slack's form: a mention is <@U0SILAS>
	Thread  string // thread_ts, "" at the top level
	Team    string // "" = the fake's team
}

// Send posts a person's message: a `message` event, and for a mention of
// the bot in a channel also an `app_mention` event (two event ids, as
// Slack does). It returns the message's ts.
func (s *Server) Send(m Msg) string {
	s.mu.Lock()
	ts := s.nextTS()
	s.mu.Unlock()
	team := m.Team
	if team == "" {
		team = s.opts.Team
	}
	ctype := "channel"
	if strings.HasPrefix(m.Channel, "D") {
		ctype = "im"
	}
	ev := map[string]any{"type": "message", "user": m.User, "text": m.Text, "ts": ts, "channel": m.Channel, "channel_type": ctype, "team": team}
	if m.Thread != "" {
		ev["thread_ts"] = m.Thread
		s.mu.Lock()
		if p := s.messages[m.Channel+":"+m.Thread]; p != nil {
			ev["parent_user_id"] = BotUser
		}
		s.mu.Unlock()
	}
	s.event(team, ev)
	if ctype != "im" && strings.Contains(m.Text, "<@"+BotUser+">") {
		ev2 := map[string]any{}
		for k, v := range ev {
			ev2[k] = v
		}
		ev2["type"] = "app_mention"
		delete(ev2, "channel_type")
		s.event(team, ev2)
	}
	return ts
}

func (s *Server) event(team string, ev map[string]any) {
	s.mu.Lock()
	s.seq++
	id := fmt.Sprintf("Ev%06d", s.seq)
	s.mu.Unlock()
	s.enqueue("events_api", map[string]any{"type": "event_callback", "team_id": team, "api_app_id": "A0SILAS",
		"event_id": id, "event_time": time.Now().Unix(), "event": ev})
}

// BotEcho sends the bot's own message back as an event, as Slack does.
func (s *Server) BotEcho(m Message) {
	s.event(s.opts.Team, map[string]any{"type": "message", "user": BotUser, "bot_id": BotID, "text": m.Text, "ts": m.TS, "channel": m.Channel})
	s.event(s.opts.Team, map[string]any{"type": "message", "subtype": "message_changed", "channel": m.Channel, "ts": m.TS,
		"message": map[string]any{"text": m.Text, "user": BotUser, "bot_id": BotID}})
}

// Tap taps the button labelled label on m as user; it returns the
// trigger_id (TapAgain replays it).
func (s *Server) Tap(m Message, user, label string) string {
	for _, b := range m.Buttons() {
		if b[0] == label {
			s.mu.Lock()
			s.seq++
			trigger := fmt.Sprintf("trig.%d", s.seq)
			s.mu.Unlock()
			s.TapValue(m, user, b[1], trigger)
			return trigger
		}
	}
	s.t.Fatalf("slacktest: no button %q on message %s (buttons %v)", label, m.TS, m.Buttons())
	return ""
}

// TapValue sends a block_actions interaction with value and trigger.
func (s *Server) TapValue(m Message, user, value, trigger string) {
	container := map[string]any{"type": "message", "message_ts": m.TS, "channel_id": m.Channel, "is_ephemeral": false}
	msg := map[string]any{"ts": m.TS, "type": "message", "user": BotUser, "bot_id": BotID}
	if m.Thread != "" {
		container["thread_ts"] = m.Thread
		msg["thread_ts"] = m.Thread
	}
	s.enqueue("interactive", map[string]any{
		"type": "block_actions", "team": map[string]any{"id": s.opts.Team}, "user": map[string]any{"id": user, "name": strings.ToLower(user)},
		"channel": map[string]any{"id": m.Channel}, "container": container, "message": msg, "trigger_id": trigger,
		"response_url": s.hs.URL + "/response/" + m.Channel + "/" + user,
		"actions":      []any{map[string]any{"type": "button", "action_id": value, "block_id": "choices", "value": value, "action_ts": "1700000000.1"}},
	})
}

// Command runs a slash command ("/silas", text) as user in channel.
func (s *Server) Command(channel, user, text string) string {
	s.mu.Lock()
	s.seq++
	trigger := fmt.Sprintf("cmd.%d", s.seq)
	s.mu.Unlock()
	cname := "general"
	if strings.HasPrefix(channel, "D") {
		cname = "directmessage"
	}
	s.enqueue("slash_commands", map[string]any{"team_id": s.opts.Team, "channel_id": channel, "channel_name": cname, "user_id": user,
		"user_name": strings.ToLower(user), "command": "/silas", "text": text, "trigger_id": trigger,
		"response_url": s.hs.URL + "/response/" + channel + "/" + user})
	return trigger
}

// --- HTTP mode ---

// SetTarget switches to HTTP mode: Push POSTs events to target (the
// gateway's origin, e.g. http://127.0.0.1:8080).
func (s *Server) SetTarget(target string) {
	s.mu.Lock()
	s.target = strings.TrimRight(target, "/")
	s.mu.Unlock()
}

// Sign returns the X-Slack-Signature of body at ts with the signing secret.
func Sign(secret string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%d:%s", ts, body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// Push POSTs every unacknowledged event to the target, signed, as Slack
// does (with X-Slack-Retry-Num on a retry); 2xx acknowledges. It returns
// the status codes.
func (s *Server) Push() []int {
	s.mu.Lock()
	pend := append([]*pendingEnv(nil), s.pending...)
	target := s.target
	s.mu.Unlock()
	var codes []int
	for _, p := range pend {
		path, body, ctype := "/slack/events", []byte(p.payload), "application/json"
		switch p.typ {
		case "interactive":
			path, ctype = "/slack/interactions", "application/x-www-form-urlencoded"
			body = []byte(url.Values{"payload": {string(p.payload)}}.Encode())
		case "slash_commands":
			path, ctype = "/slack/commands", "application/x-www-form-urlencoded"
			var m map[string]string
			_ = json.Unmarshal(p.payload, &m)
			v := url.Values{}
			for k, x := range m {
				v.Set(k, x)
			}
			body = []byte(v.Encode())
		}
		ts := time.Now().Unix()
		req, _ := http.NewRequest(http.MethodPost, target+path, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("X-Slack-Signature", Sign(s.opts.SigningSecret, ts, body))
		if p.tries > 0 {
			req.Header.Set("X-Slack-Retry-Num", strconv.Itoa(p.tries))
			req.Header.Set("X-Slack-Retry-Reason", "http_timeout")
		}
		p.tries++
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			codes = append(codes, 0)
			continue
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode/100 == 2 {
			s.mu.Lock()
			for i, q := range s.pending {
				if q == p {
					s.pending = append(s.pending[:i], s.pending[i+1:]...)
					break
				}
			}
			s.mu.Unlock()
		}
	}
	return codes
}

// --- inspection ---

// Messages returns the bot's messages in channel, oldest first.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, k := range s.order {
		if m, ok := s.messages[k]; ok && m.Channel == channel {
			out = append(out, *m)
		}
	}
	return out
}

// Ephemerals returns the ephemeral notices shown so far.
func (s *Server) Ephemerals() []Ephemeral {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Ephemeral(nil), s.ephemerals...)
}

// Deleted lists "channel:ts" of deleted messages.
func (s *Server) Deleted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.deleted...)
}

// Calls returns the Web API calls of method ("" for all).
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Violations lists every breach of Slack's limits seen.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}
