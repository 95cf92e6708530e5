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
	Type        int
	Data        map[string]any
}

// Server is the fake.
type Server struct {
	*httptest.Server
	BaseURL string
	t       testing.TB

	mu       sync.Mutex
	next     int64
	msgs     map[string][]*Message // by channel
	guildOf  map[string]string     // channel → guild
	dms      map[string]string     // user → DM channel
	cbs      []Callback
	follows  []Callback
	commands []map[string]any
	cmdPuts  int
	faults   map[string][]int     // route prefix → queued retry_after ms for 429
	ixMsg    map[string][2]string // interaction → tapped channel, message
	calls    map[string]int

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
}

type event struct {
	seq int64
	t   string
	d   any
}

// NewServer starts the fake; it is closed at the end of the test.
func NewServer(t testing.TB) *Server {
	s := &Server{t: t, next: 1200000000000000000, msgs: map[string][]*Message{}, guildOf: map[string]string{}, dms: map[string]string{},
		faults: map[string][]int{}, ixMsg: map[string][2]string{}, calls: map[string]int{}, heartbeatMs: 500}
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

// Zombie stops (true) or restarts (false) heartbeat ACKs.
func (s *Server) Zombie(v bool) { s.mu.Lock(); s.zombie = v; s.mu.Unlock() }

// Stats are counts of gateway handshakes.
type Stats struct{ Connects, Identifies, Resumes int }

// Gateway returns the handshake counts.
func (s *Server) Gateway() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{s.connects, s.identifies, s.resumes}
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
	s.mu.Lock()
	m := &Message{ID: s.id(), ChannelID: channel, GuildID: s.guildOf[channel], Author: from, Content: content,
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano), Mentions: []User{}}
	if mention {
		m.Mentions = append(m.Mentions, User{ID: BotID, Username: BotName, Bot: true})
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

// Interaction builds an interaction payload. guild "" is a DM.
func (s *Server) Interaction(typ int, from User, channel string, data map[string]any, message *Message) map[string]any {
	s.mu.Lock()
	id := s.id()
	guild := s.guildOf[channel]
	s.mu.Unlock()
	ix := map[string]any{"id": id, "application_id": AppID, "type": typ, "token": "itok-" + id, "version": 1,
		"channel_id": channel, "data": data}
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
	s.seq++
	ev := event{seq: s.seq, t: t, d: d}
	s.events = append(s.events, ev)
	c := s.conn
	s.mu.Unlock()
	if c != nil {
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
	s.write(c, map[string]any{"op": 10, "d": map[string]any{"heartbeat_interval": hb}})
	for {
		_, raw, err := c.ReadMessage()
		if err != nil {
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
			z := s.zombie
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
			ok := !s.refuseRes && rs.Session == s.session && s.session != ""
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
	s.mu.Lock()
	s.calls[route]++
	var retry int
	faulted := false
	for prefix, q := range s.faults {
		if len(q) > 0 && strings.HasPrefix(route, prefix) {
			retry, s.faults[prefix] = q[0], q[1:]
			faulted = true
			break
		}
	}
	s.mu.Unlock()
	if !strings.HasPrefix(path, "/interactions/") && !strings.HasPrefix(path, "/webhooks/") && r.Header.Get("Authorization") != "Bot "+Token {
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
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case route == "GET /gateway/bot":
		writeJSON(w, 200, map[string]any{"url": "ws" + strings.TrimPrefix(s.URL, "http") + "/gateway", "shards": 1,
			"session_start_limit": map[string]any{"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}})
	case route == "GET /users/@me":
		writeJSON(w, 200, User{ID: BotID, Username: BotName, Bot: true})
	case route == "GET /applications/@me":
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
		s.follows = append(s.follows, Callback{Interaction: strings.TrimPrefix(parts[2], "itok-"), Type: 0, Data: in})
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
	s.cbs = append(s.cbs, Callback{Interaction: ixID, Type: int(typ), Data: data})
	if m, ok := s.ixMsg[ixID]; ok && typ == 7 && data != nil {
		s.applyType7Locked(m[0], m[1], data)
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
		if c, _ := in["content"].(string); len([]rune(c)) > 2000 {
			writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
			return
		}
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
