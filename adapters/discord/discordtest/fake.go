// Package discordtest is a fake Discord for tests: the REST API (at
// Server.BaseURL, the value of discord.base_url) and the gateway websocket
// its GET /gateway/bot names. It speaks the protocol the real ones do —
// Hello, Identify or Resume, READY or RESUMED, dispatches with sequence
// numbers, heartbeats and their ACKs, invalid sessions — records what the
// bot sent (messages, edits, interaction callbacks, follow-ups) and injects
// faults: dropped connections, refused RESUMEs, missing heartbeat ACKs
// (zombies) and 429 answers with retry_after.
//
// Tests drive it as the people on the other side: SendMessage (a user
// writes), Tap (a user presses a button), Command (a slash command). It
// never reaches the internet.
package discordtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Fixed identities of the fake.
const (
	Token   = "MTEx.fake-discord.token-0123456789abcdef"
	AppID   = "1100000000000000001"
	BotID   = "1100000000000000002"
	BotName = "Silas"
)

// Message is a message as the fake stores it.
type Message struct {
	ID         string           `json:"id"`
	ChannelID  string           `json:"channel_id"`
	GuildID    string           `json:"guild_id,omitempty"`
	Author     User             `json:"author"`
	Content    string           `json:"content"`
	Timestamp  string           `json:"timestamp"`
	Type       int              `json:"type"`
	Mentions   []User           `json:"mentions"`
	Embeds     []map[string]any `json:"embeds"`
	Components []map[string]any `json:"components"`
	Flags      int              `json:"flags,omitempty"`
	// Reference is the message a reply quotes (message_reference).
	Reference map[string]any `json:"message_reference,omitempty"`
	// Referenced is the quoted message itself, as Discord includes it.
	Referenced *Message `json:"referenced_message,omitempty"`
	// Interaction names the interaction a response message answers
	// (a non-ephemeral type-4 answer becomes a channel message).
	Interaction string `json:"-"`
	// AllowedMentions is what the bot sent (nil: absent).
	AllowedMentions map[string]any `json:"-"`
	Edits           int            `json:"-"`
}

// User is a Discord user.
type User struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Bot      bool   `json:"bot,omitempty"`
}

// Callback is one interaction response the bot gave.
type Callback struct {
	Interaction string
	// User is who caused the interaction.
	User string
	Type int
	Data map[string]any
}

// Ephemeral reports a message only the interaction's user sees.
func (c Callback) Ephemeral() bool {
	f, _ := c.Data["flags"].(float64)
	return int(f)&64 != 0
}

// Limits are the fake's rate limits, enforced as Discord does: fixed
// windows per bucket announced with X-RateLimit-* headers, a 429 for a
// request over the limit (recorded as a violation).
type Limits struct {
	// PerChannel messages (creates; edits have a bucket of their own) per
	// Window in one channel. Discord: 5 per 5 s.
	PerChannel int
	Window     time.Duration
	// GlobalPerSecond caps all REST requests but interaction answers.
	// Discord: 50.
	GlobalPerSecond int
}

// ceilMillis is d in whole milliseconds, rounded up: the headers' precision.
// A bucket announces its reset no earlier than it resets (rounded to the
// nearest, a reset-after could be half a millisecond short, and a client
// that waits exactly that long would be counted in the old window).
func ceilMillis(d time.Duration) int {
	return int((d + time.Millisecond - 1) / time.Millisecond)
}

// DiscordLimits are Discord's documented limits.
var DiscordLimits = Limits{PerChannel: 5, Window: 5 * time.Second, GlobalPerSecond: 50}

type bucket struct {
	start time.Time
	n     int
	until time.Time // a 429 told the bot to wait until then
}

// Server is the fake.
type Server struct {
	*httptest.Server
	BaseURL string
	t       testing.TB

	mu         sync.Mutex
	next       int64
	msgs       map[string][]*Message // by channel
	guildOf    map[string]string     // channel → guild
	dms        map[string]string     // user → DM channel
	cbs        []Callback
	follows    []Callback
	commands   []map[string]any
	cmdPuts    int
	faults     map[string][]int     // route prefix → queued retry_after ms for 429
	ixMsg      map[string][2]string // interaction → tapped channel, message
	ixUser     map[string]string    // interaction → user
	ixChannel  map[string]string    // interaction → channel
	ixSent     map[string]time.Time // interaction → written to a live socket
	calls      map[string]int
	limits     Limits
	buckets    map[string]*bucket
	arrivals   []time.Time // REST requests counted by the global limit
	viol       []string
	outage     bool
	outageHits int

	// gateway: Discord ends a session when the client closes with
	// 1000/1001; cleanCloses counts those, resumesAfterClean the RESUMEs
	// attempted on such a session (which Discord refuses).
	cleanCloses       int
	closeCodes        []int
	resumesAfterClean int
	endedSession      string
	loseEvents        bool
	refusedResumes    int

	// gateway
	conn        *websocket.Conn
	connMu      sync.Mutex // serialises writes to conn
	session     string
	seq         int64
	events      []event // dispatched in this session, for RESUME replay
	refuseRes   bool
	zombie      bool
	identifies  int
	resumes     int
	connects    int
	heartbeatMs int
	// deaf (Deafen): no dispatches, no heartbeat ACKs, no Hello on a new
	// socket until undeaf is closed.
	deaf   bool
	undeaf chan struct{}
}

type event struct {
	seq int64
	t   string
	d   any
}

// NewServer starts the fake; it is closed at the end of the test.
func NewServer(t testing.TB) *Server {
	return NewServerWithLimits(t, DiscordLimits)
}

// NewServerWithLimits starts the fake with other rate limits (a shorter
// window keeps scenarios short).
func NewServerWithLimits(t testing.TB, l Limits) *Server {
	s := &Server{t: t, next: 1200000000000000000, msgs: map[string][]*Message{}, guildOf: map[string]string{}, dms: map[string]string{},
		faults: map[string][]int{}, ixMsg: map[string][2]string{}, ixUser: map[string]string{}, ixChannel: map[string]string{}, ixSent: map[string]time.Time{},
		calls: map[string]int{}, heartbeatMs: 500, limits: l, buckets: map[string]*bucket{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	s.BaseURL = s.URL + "/api/v10"
	t.Cleanup(s.Close)
	return s
}

// Close stops the fake.
func (s *Server) Close() {
	s.DropConnection()
	s.Server.Close()
}

func (s *Server) id() string {
	s.next++
	return strconv.FormatInt(s.next, 10)
}

// SetHeartbeat sets the heartbeat interval announced in Hello.
func (s *Server) SetHeartbeat(ms int) { s.mu.Lock(); s.heartbeatMs = ms; s.mu.Unlock() }

// RefuseResume makes every RESUME fail with op 9 (invalid session).
func (s *Server) RefuseResume(v bool) { s.mu.Lock(); s.refuseRes = v; s.mu.Unlock() }

// Deafen makes the gateway stop delivering while its sockets stay open
// (true): no events, no heartbeat ACKs, and a new socket gets no Hello; or
// resume (false): the live socket is dropped so the client resumes and the
// events it missed are replayed (issue 28's deaf channel).
func (s *Server) Deafen(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case v && !s.deaf:
		s.deaf, s.undeaf = true, make(chan struct{})
	case !v && s.deaf:
		s.deaf = false
		close(s.undeaf)
		if s.conn != nil {
			_ = s.conn.UnderlyingConn().Close()
		}
	}
}

// Zombie stops (true) or restarts (false) heartbeat ACKs.
func (s *Server) Zombie(v bool) { s.mu.Lock(); s.zombie = v; s.mu.Unlock() }

// LoseEvents (true) makes the gateway forget what it dispatches while no
// socket is connected, so a RESUME replays none of it — as Discord loses
// events across some reconnects. Only the REST history has them.
func (s *Server) LoseEvents(v bool) { s.mu.Lock(); s.loseEvents = v; s.mu.Unlock() }

// Outage (true) answers every REST request with 502 and refuses gateway
// connections, as during a Discord outage or a network partition.
func (s *Server) Outage(v bool) {
	s.mu.Lock()
	s.outage = v
	s.mu.Unlock()
	if v {
		s.DropConnection()
	}
}

// OutageHits counts REST requests answered 502 during an outage.
func (s *Server) OutageHits() int { s.mu.Lock(); defer s.mu.Unlock(); return s.outageHits }

// Stats are counts of gateway handshakes.
type Stats struct {
	Connects, Identifies, Resumes int
	// RefusedResumes were answered with op 9.
	RefusedResumes int
	// CleanCloses are client closes with 1000/1001 (which end the session).
	CleanCloses int
	// ResumesAfterCleanClose are RESUMEs of a session the client had ended.
	ResumesAfterCleanClose int
	// CloseCodes are the client's close codes, in order.
	CloseCodes []int
}

// Gateway returns the handshake counts.
func (s *Server) Gateway() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{s.connects, s.identifies, s.resumes, s.refusedResumes, s.cleanCloses, s.resumesAfterClean, slices.Clone(s.closeCodes)}
}

// CloseWith closes the gateway socket from Discord's side with a close
// frame (code), then waits briefly for the client's own close frame.
func (s *Server) CloseWith(code int) {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c == nil {
		return
	}
	s.connMu.Lock()
	_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, "closed by the fake"), time.Now().Add(time.Second))
	s.connMu.Unlock()
	// The reader (gateway) records the client's answer and ends.
	time.AfterFunc(2*time.Second, func() { _ = c.UnderlyingConn().Close() })
}

// Violations are the ways the bot broke Discord's rules: requests over a
// rate limit, messages or edits without allowed_mentions with no parse
// targets, custom_ids over 100 characters, interactions answered late or
// twice.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.viol)
}

func (s *Server) violate(format string, a ...any) {
	s.viol = append(s.viol, fmt.Sprintf(format, a...))
}

// Unanswered lists the interactions written to a live socket more than d
// ago that have no answer.
func (s *Server) Unanswered(d time.Duration) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for ix, at := range s.ixSent {
		if time.Since(at) < d {
			continue
		}
		if !slices.ContainsFunc(s.cbs, func(c Callback) bool { return c.Interaction == ix }) {
			out = append(out, ix)
		}
	}
	return out
}

// Connected reports whether a gateway session is READY.
func (s *Server) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn != nil && s.session != ""
}

// DropConnection closes the gateway socket without a close frame.
func (s *Server) DropConnection() {
	s.mu.Lock()
	c := s.conn
	s.conn = nil
	s.mu.Unlock()
	if c != nil {
		_ = c.UnderlyingConn().Close()
	}
}

// Inject429 answers the next n requests whose "METHOD path" (path after
// /api/v10) starts with route with 429 and retry_after.
func (s *Server) Inject429(route string, n int, retryAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults[route] = append(s.faults[route], int(retryAfter/time.Millisecond))
	}
}

// Calls counts requests by "METHOD route" (ids replaced by {id}).
func (s *Server) Calls(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[route]
}

// DM returns the DM channel id with a user, creating it.
func (s *Server) DM(user string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dmLocked(user)
}

func (s *Server) dmLocked(user string) string {
	if c, ok := s.dms[user]; ok {
		return c
	}
	c := s.id()
	s.dms[user] = c
	return c
}

// GuildChannel declares a guild channel.
func (s *Server) GuildChannel(guild, channel string) {
	s.mu.Lock()
	s.guildOf[channel] = guild
	s.mu.Unlock()
}

// SendMessage stores a message from user in channel and dispatches
// MESSAGE_CREATE if the bot is connected. mention adds the bot to
// mentions. It returns the message id.
func (s *Server) SendMessage(from User, channel, content string, mention bool) string {
	return s.SendReply(from, channel, content, mention, "")
}

// SendReply is SendMessage replying to message replyTo of the channel
// (type 19, message_reference and referenced_message as Discord sends
// them); mention is whether the reply pings its author (Discord's
// "@ on", the default).
func (s *Server) SendReply(from User, channel, content string, mention bool, replyTo string) string {
	s.mu.Lock()
	m := &Message{ID: s.id(), ChannelID: channel, GuildID: s.guildOf[channel], Author: from, Content: content,
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Mentions: []User{}}
	if mention {
		m.Mentions = append(m.Mentions, User{ID: BotID, Username: BotName, Bot: true})
	}
	if replyTo != "" {
		for _, q := range s.msgs[channel] {
			if q.ID == replyTo {
				c := *q
				c.Referenced, c.Reference = nil, nil
				m.Type, m.Referenced = 19, &c
				m.Reference = map[string]any{"message_id": q.ID, "channel_id": channel}
				if m.GuildID != "" {
					m.Reference["guild_id"] = m.GuildID
				}
			}
		}
	}
	s.msgs[channel] = append(s.msgs[channel], m)
	d := s.messageJSONLocked(m, true)
	s.mu.Unlock()
	s.dispatch("MESSAGE_CREATE", d)
	return m.ID
}

func (s *Server) messageJSONLocked(m *Message, withGuild bool) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	if !withGuild {
		delete(out, "guild_id") // REST messages carry no guild_id
	}
	return out
}

// Messages returns the messages of a channel, oldest first (copies).
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.msgs[channel] {
		out = append(out, *m)
	}
	return out
}

// BotMessages returns the bot's messages in a channel.
func (s *Server) BotMessages(channel string) []Message {
	var out []Message
	for _, m := range s.Messages(channel) {
		if m.Author.ID == BotID {
			out = append(out, m)
		}
	}
	return out
}

// Callbacks returns the interaction responses, in order.
func (s *Server) Callbacks() []Callback {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cbs)
}

// FollowUps returns the follow-up messages, in order.
func (s *Server) FollowUps() []Callback {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.follows)
}

// CommandPuts counts bulk overwrites of the global commands.
func (s *Server) CommandPuts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmdPuts
}

// CommandNames are the names of the global commands as last registered.
func (s *Server) CommandNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.commands {
		if n, ok := c["name"].(string); ok {
			out = append(out, n)
		}
	}
	return out
}

// Interaction builds an interaction payload. guild "" is a DM.
func (s *Server) Interaction(typ int, from User, channel string, data map[string]any, message *Message) map[string]any {
	s.mu.Lock()
	id := s.id()
	guild := s.guildOf[channel]
	s.mu.Unlock()
	ix := map[string]any{"id": id, "application_id": AppID, "type": typ, "token": "itok-" + id, "version": 1,
		"channel_id": channel, "data": data}
	s.mu.Lock()
	s.ixUser[id] = from.ID
	s.ixChannel[id] = channel
	s.mu.Unlock()
	if guild != "" {
		ix["guild_id"] = guild
		ix["member"] = map[string]any{"user": from}
	} else {
		ix["user"] = from
	}
	if message != nil {
		s.mu.Lock()
		s.ixMsg[id] = [2]string{message.ChannelID, message.ID}
		s.mu.Unlock()
		ix["message"] = map[string]any{"id": message.ID, "channel_id": message.ChannelID}
	}
	return ix
}

// Tap dispatches a button press on message msg with customID and returns
// the interaction id.
func (s *Server) Tap(from User, msg Message, customID string) string {
	ix := s.Interaction(3, from, msg.ChannelID, map[string]any{"custom_id": customID, "component_type": 2}, &msg)
	s.dispatch("INTERACTION_CREATE", ix)
	return ix["id"].(string)
}

// DispatchInteraction sends a prepared interaction over the gateway.
func (s *Server) DispatchInteraction(ix map[string]any) { s.dispatch("INTERACTION_CREATE", ix) }

// Command dispatches a slash command /name with string options.
func (s *Server) Command(from User, channel, name string, opts ...[2]string) string {
	var o []map[string]any
	for _, kv := range opts {
		o = append(o, map[string]any{"name": kv[0], "type": 3, "value": kv[1]})
	}
	ix := s.Interaction(2, from, channel, map[string]any{"id": "1", "name": name, "type": 1, "options": o}, nil)
	s.dispatch("INTERACTION_CREATE", ix)
	return ix["id"].(string)
}

func (s *Server) dispatch(t string, d any) {
	s.mu.Lock()
	if s.session == "" {
		s.mu.Unlock()
		return
	}
	c := s.conn
	if c == nil && s.loseEvents {
		s.mu.Unlock()
		return
	}
	s.seq++
	ev := event{seq: s.seq, t: t, d: d}
	s.events = append(s.events, ev)
	if m, ok := d.(map[string]any); ok && t == "INTERACTION_CREATE" && c != nil {
		if id, ok := m["id"].(string); ok {
			if _, seen := s.ixSent[id]; !seen {
				s.ixSent[id] = time.Now()
			}
		}
	}
	deaf := s.deaf
	s.mu.Unlock()
	if c != nil && !deaf {
		s.write(c, map[string]any{"op": 0, "s": ev.seq, "t": t, "d": d})
	}
}

func (s *Server) write(c *websocket.Conn, v any) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	_ = c.WriteJSON(v)
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) gateway(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	down := s.outage
	s.mu.Unlock()
	if down {
		http.Error(w, "502 Bad Gateway", http.StatusBadGateway)
		return
	}
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	s.mu.Lock()
	old := s.conn
	s.conn = c
	s.connects++
	hb := s.heartbeatMs
	s.mu.Unlock()
	if old != nil {
		_ = old.UnderlyingConn().Close()
	}
	defer func() {
		s.mu.Lock()
		if s.conn == c {
			s.conn = nil
		}
		s.mu.Unlock()
		_ = c.Close()
	}()
	s.mu.Lock()
	deaf, undeaf := s.deaf, s.undeaf
	s.mu.Unlock()
	if deaf {
		select {
		case <-undeaf:
		case <-r.Context().Done():
			return
		}
	}
	s.write(c, map[string]any{"op": 10, "d": map[string]any{"heartbeat_interval": hb}})
	for {
		_, raw, err := c.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				s.mu.Lock()
				s.closeCodes = append(s.closeCodes, ce.Code)
				if ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseGoingAway {
					// Discord: the session is over; a RESUME of it fails.
					s.cleanCloses++
					s.endedSession, s.session = s.session, ""
				}
				s.mu.Unlock()
			}
			return
		}
		var p struct {
			Op int             `json:"op"`
			D  json.RawMessage `json:"d"`
		}
		if json.Unmarshal(raw, &p) != nil {
			return
		}
		switch p.Op {
		case 1:
			s.mu.Lock()
			z := s.zombie || s.deaf
			s.mu.Unlock()
			if !z {
				s.write(c, map[string]any{"op": 11})
			}
		case 2:
			var id struct {
				Token string `json:"token"`
			}
			_ = json.Unmarshal(p.D, &id)
			if id.Token != "Bot "+Token {
				_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4004, "Authentication failed."), time.Now().Add(time.Second))
				return
			}
			s.mu.Lock()
			s.identifies++
			s.session = "sess-" + s.id()
			s.seq, s.events = 1, nil
			sess := s.session
			s.mu.Unlock()
			s.write(c, map[string]any{"op": 0, "s": 1, "t": "READY", "d": map[string]any{"v": 10, "session_id": sess,
				"resume_gateway_url": "ws" + strings.TrimPrefix(s.URL, "http") + "/gateway",
				"user":               User{ID: BotID, Username: BotName, Bot: true}, "guilds": []any{}, "application": map[string]any{"id": AppID}}})
		case 6:
			var rs struct {
				Session string `json:"session_id"`
				Seq     int64  `json:"seq"`
			}
			_ = json.Unmarshal(p.D, &rs)
			s.mu.Lock()
			s.resumes++
			if rs.Session != "" && rs.Session == s.endedSession {
				s.resumesAfterClean++
			}
			ok := !s.refuseRes && rs.Session == s.session && s.session != ""
			if !ok {
				s.refusedResumes++
			}
			var replay []event
			if ok {
				for _, e := range s.events {
					if e.seq > rs.Seq {
						replay = append(replay, e)
					}
				}
			} else {
				s.session = ""
			}
			s.mu.Unlock()
			if !ok {
				s.write(c, map[string]any{"op": 9, "d": false})
				continue
			}
			for _, e := range replay {
				s.write(c, map[string]any{"op": 0, "s": e.seq, "t": e.t, "d": e.d})
			}
			s.mu.Lock()
			s.seq++
			seq := s.seq
			s.mu.Unlock()
			s.write(c, map[string]any{"op": 0, "s": seq, "t": "RESUMED", "d": map[string]any{}})
		}
	}
}

var idRe = regexp.MustCompile(`/[0-9]{5,20}|/itok-[0-9]+`)

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/gateway" || r.URL.Path == "/gateway/" {
		s.gateway(w, r)
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/api/v10")
	if !ok {
		http.NotFound(w, r)
		return
	}
	route := r.Method + " " + idRe.ReplaceAllString(path, "/{id}")
	parts := strings.Split(strings.Trim(path, "/"), "/")
	isIx := strings.HasPrefix(path, "/interactions/") || strings.HasPrefix(path, "/webhooks/")
	s.mu.Lock()
	// The instant the request is counted at: taken under the lock, so
	// windows open and fill in the order requests are counted.
	now := time.Now()
	s.calls[route]++
	if s.outage {
		s.outageHits++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1></body></html>\n")
		return
	}
	// The bucket of the request: message creates and edits per channel.
	key := ""
	if len(parts) >= 3 && parts[0] == "channels" && parts[2] == "messages" && (r.Method == "POST" || r.Method == "PATCH") {
		key = r.Method + " " + parts[1]
	}
	var b *bucket
	if key != "" && s.limits.PerChannel > 0 {
		b = s.buckets[key]
		if b == nil || !now.Before(b.start.Add(s.limits.Window)) {
			b = &bucket{start: now}
			s.buckets[key] = b
		}
	}
	var retry int
	faulted := false
	for prefix, q := range s.faults {
		if len(q) > 0 && strings.HasPrefix(route, prefix) {
			retry, s.faults[prefix] = q[0], q[1:]
			faulted = true
			break
		}
	}
	if !faulted && !isIx && s.limits.GlobalPerSecond > 0 {
		cut := 0
		for cut < len(s.arrivals) && now.Sub(s.arrivals[cut]) >= time.Second {
			cut++
		}
		s.arrivals = append(s.arrivals[cut:], now)
		if len(s.arrivals) > s.limits.GlobalPerSecond {
			s.violate("%s: over the global limit (%d requests within 1s)", route, len(s.arrivals))
		}
	}
	if !faulted && b != nil {
		if b.until.After(now) {
			s.violate("%s %s: sent %s before the retry_after of an earlier 429 ended", route, key, b.until.Sub(now).Round(time.Millisecond))
		}
		if b.n >= s.limits.PerChannel {
			s.violate("%s %s: over the limit of %d per %s", route, key, s.limits.PerChannel, s.limits.Window)
			retry = ceilMillis(b.start.Add(s.limits.Window).Sub(now))
			faulted = true
		} else {
			b.n++
		}
	}
	if faulted && b != nil {
		b.until = now.Add(time.Duration(retry) * time.Millisecond)
	}
	if b != nil {
		w.Header().Set("X-RateLimit-Bucket", strings.Fields(key)[0]+"-messages")
		w.Header().Set("X-RateLimit-Limit", strconv.Itoa(s.limits.PerChannel))
		w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(s.limits.PerChannel-b.n))
		reset := ceilMillis(b.start.Add(s.limits.Window).Sub(now))
		if faulted {
			reset = retry
			w.Header().Set("X-RateLimit-Remaining", "0")
		}
		w.Header().Set("X-RateLimit-Reset-After", strconv.FormatFloat(float64(reset)/1000, 'f', 3, 64))
	}
	s.mu.Unlock()
	if !isIx && r.Header.Get("Authorization") != "Bot "+Token {
		writeJSON(w, 401, map[string]any{"message": "401: Unauthorized", "code": 0})
		return
	}
	if faulted {
		w.Header().Set("Retry-After", strconv.Itoa((retry+999)/1000))
		writeJSON(w, 429, map[string]any{"message": "You are being rate limited.", "retry_after": float64(retry) / 1000, "global": false})
		return
	}
	body, _ := io.ReadAll(r.Body)
	var in map[string]any
	if len(body) > 0 && body[0] == '{' {
		if err := json.Unmarshal(body, &in); err != nil {
			writeJSON(w, 400, map[string]any{"message": "400: Bad Request", "code": 50109})
			return
		}
	}
	if r.Method == "POST" || r.Method == "PATCH" {
		if !s.checkOutgoing(route, in) {
			writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
			return
		}
	}
	switch {
	case route == "GET /gateway/bot":
		writeJSON(w, 200, map[string]any{"url": "ws" + strings.TrimPrefix(s.URL, "http") + "/gateway", "shards": 1,
			"session_start_limit": map[string]any{"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}})
	case route == "GET /users/@me":
		writeJSON(w, 200, User{ID: BotID, Username: BotName, Bot: true})
	case route == "GET /applications/@me" || route == "GET /oauth2/applications/@me":
		writeJSON(w, 200, map[string]any{"id": AppID, "name": "Silas"})
	case route == "POST /users/@me/channels":
		rid, _ := in["recipient_id"].(string)
		writeJSON(w, 200, map[string]any{"id": s.DM(rid), "type": 1})
	case r.Method == "GET" && len(parts) == 3 && parts[0] == "applications" && parts[2] == "commands":
		s.mu.Lock()
		cmds := slices.Clone(s.commands)
		s.mu.Unlock()
		if cmds == nil {
			cmds = []map[string]any{}
		}
		writeJSON(w, 200, cmds)
	case r.Method == "PUT" && len(parts) == 3 && parts[0] == "applications" && parts[2] == "commands":
		var cmds []map[string]any
		_ = json.Unmarshal(body, &cmds)
		s.mu.Lock()
		for _, c := range cmds {
			c["id"] = s.id()
			c["application_id"] = AppID
		}
		s.commands, s.cmdPuts = cmds, s.cmdPuts+1
		s.mu.Unlock()
		writeJSON(w, 200, cmds)
	case len(parts) >= 3 && parts[0] == "channels" && parts[2] == "messages":
		s.channelMessages(w, r, parts, in)
	case len(parts) == 4 && parts[0] == "interactions" && parts[3] == "callback" && r.Method == "POST":
		s.callback(w, parts[1], in)
	case len(parts) == 3 && parts[0] == "webhooks" && r.Method == "POST":
		s.mu.Lock()
		ix := strings.TrimPrefix(parts[2], "itok-")
		s.follows = append(s.follows, Callback{Interaction: ix, User: s.ixUser[ix], Type: 0, Data: in})
		s.mu.Unlock()
		writeJSON(w, 200, map[string]any{"id": s.DM("0"), "content": in["content"]})
	default:
		writeJSON(w, 404, map[string]any{"message": "404: Not Found", "code": 0})
	}
}

func (s *Server) callback(w http.ResponseWriter, ixID string, in map[string]any) {
	typ, _ := in["type"].(float64)
	data, _ := in["data"].(map[string]any)
	s.mu.Lock()
	for _, c := range s.cbs {
		if c.Interaction == ixID {
			s.mu.Unlock()
			writeJSON(w, 400, map[string]any{"message": "Interaction has already been acknowledged.", "code": 40060})
			return
		}
	}
	if at, ok := s.ixSent[ixID]; ok && time.Since(at) > 3*time.Second {
		// Discord forgets an interaction not answered within 3 s.
		s.violate("interaction %s answered after %s", ixID, time.Since(at).Round(time.Millisecond))
		s.mu.Unlock()
		writeJSON(w, 404, map[string]any{"message": "Unknown interaction", "code": 10062})
		return
	}
	cb := Callback{Interaction: ixID, User: s.ixUser[ixID], Type: int(typ), Data: data}
	s.cbs = append(s.cbs, cb)
	if m, ok := s.ixMsg[ixID]; ok && typ == 7 && data != nil {
		s.applyType7Locked(m[0], m[1], data)
	}
	if typ == 4 && !cb.Ephemeral() && data != nil {
		// A visible answer is a message of the bot in the channel.
		if ch, ok := s.ixChannel[ixID]; ok {
			m := &Message{ID: s.id(), ChannelID: ch, Author: User{ID: BotID, Username: BotName, Bot: true},
				Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Mentions: []User{}, Interaction: ixID}
			setContent(m, data)
			s.msgs[ch] = append(s.msgs[ch], m)
		}
	}
	s.mu.Unlock()
	w.WriteHeader(204)
}

// applyType7Locked is what an UPDATE_MESSAGE answer does: the tapped
// message shows the new content.
func (s *Server) applyType7Locked(channel, msgID string, data map[string]any) {
	for _, m := range s.msgs[channel] {
		if m.ID == msgID {
			setContent(m, data)
			m.Edits++
		}
	}
}

func setContent(m *Message, in map[string]any) {
	if c, ok := in["content"].(string); ok {
		m.Content = c
	}
	if e, ok := in["embeds"].([]any); ok {
		m.Embeds = nil
		for _, x := range e {
			if mm, ok := x.(map[string]any); ok {
				m.Embeds = append(m.Embeds, mm)
			}
		}
	}
	if c, ok := in["components"].([]any); ok {
		m.Components = nil
		for _, x := range c {
			if mm, ok := x.(map[string]any); ok {
				m.Components = append(m.Components, mm)
			}
		}
	}
	if am, ok := in["allowed_mentions"].(map[string]any); ok {
		m.AllowedMentions = am
	} else {
		m.AllowedMentions = nil
	}
}

func (s *Server) channelMessages(w http.ResponseWriter, r *http.Request, parts []string, in map[string]any) {
	ch := parts[1]
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == "POST" && len(parts) == 3:
		m := &Message{ID: s.id(), ChannelID: ch, Author: User{ID: BotID, Username: BotName, Bot: true},
			Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Mentions: []User{}}
		setContent(m, in)
		s.msgs[ch] = append(s.msgs[ch], m)
		writeJSON(w, 200, s.messageJSONLocked(m, true))
	case r.Method == "PATCH" && len(parts) == 4:
		for _, m := range s.msgs[ch] {
			if m.ID == parts[3] {
				setContent(m, in)
				m.Edits++
				writeJSON(w, 200, s.messageJSONLocked(m, true))
				return
			}
		}
		writeJSON(w, 404, map[string]any{"message": "Unknown Message", "code": 10008})
	case r.Method == "DELETE" && len(parts) == 4:
		for i, m := range s.msgs[ch] {
			if m.ID == parts[3] {
				s.msgs[ch] = slices.Delete(s.msgs[ch], i, i+1)
				w.WriteHeader(204)
				return
			}
		}
		writeJSON(w, 404, map[string]any{"message": "Unknown Message", "code": 10008})
	case r.Method == "GET" && len(parts) == 3:
		after := r.URL.Query().Get("after")
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		if limit <= 0 || limit > 100 {
			limit = 50
		}
		var sel []*Message
		for _, m := range s.msgs[ch] {
			if after == "" || less(after, m.ID) {
				sel = append(sel, m)
			}
		}
		// The oldest `limit` after the cursor, returned newest first as
		// Discord does.
		if len(sel) > limit {
			sel = sel[:limit]
		}
		sort.Slice(sel, func(i, j int) bool { return less(sel[j].ID, sel[i].ID) })
		out := []map[string]any{}
		for _, m := range sel {
			out = append(out, s.messageJSONLocked(m, false))
		}
		writeJSON(w, 200, out)
	default:
		writeJSON(w, 405, map[string]any{"message": "405: Method Not Allowed", "code": 0})
	}
}

func less(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// String describes a message for failure output.
func (m Message) String() string {
	return fmt.Sprintf("%s by %s: %q embeds=%v comps=%v", m.ID, m.Author.ID, m.Content, m.Embeds, m.Components)
}

// checkOutgoing checks what the bot creates or edits against Discord's
// rules the adapter promises to keep: allowed_mentions with no parse
// targets wherever there is text, custom_ids of at most 100 characters. It
// records violations and reports whether Discord would accept the request.
func (s *Server) checkOutgoing(route string, in map[string]any) bool {
	data := in
	if strings.HasPrefix(route, "POST /interactions/") {
		data, _ = in["data"].(map[string]any)
	}
	if data == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, hasContent := data["content"]
	_, hasEmbeds := data["embeds"]
	if hasContent || hasEmbeds {
		am, ok := data["allowed_mentions"].(map[string]any)
		parse, okP := am["parse"].([]any)
		users, _ := am["users"].([]any)
		roles, _ := am["roles"].([]any)
		if !ok || !okP || len(parse) != 0 || len(users) != 0 || len(roles) != 0 {
			s.violate("%s: allowed_mentions %v; want no parse targets", route, data["allowed_mentions"])
		}
	}
	ok := true
	if c, _ := data["content"].(string); len([]rune(c)) > 2000 {
		s.violate("%s: content of %d characters (Discord allows 2000)", route, len([]rune(c)))
		ok = false
	}
	embeds, _ := data["embeds"].([]any)
	for _, e := range embeds {
		em, _ := e.(map[string]any)
		title, _ := em["title"].(string)
		desc, _ := em["description"].(string)
		nt, nd := len([]rune(title)), len([]rune(desc))
		if nt > 256 || nd > 4096 || nt+nd > 6000 {
			s.violate("%s: embed with a title of %d and a description of %d characters (Discord: 256, 4096, 6000 in all)", route, nt, nd)
			ok = false
		}
	}
	rows, _ := data["components"].([]any)
	for _, row := range rows {
		rm, _ := row.(map[string]any)
		cs, _ := rm["components"].([]any)
		for _, c := range cs {
			cm, _ := c.(map[string]any)
			if id, _ := cm["custom_id"].(string); len(id) > 100 {
				s.violate("%s: custom_id of %d characters", route, len(id))
				ok = false
			}
		}
	}
	return ok
}
