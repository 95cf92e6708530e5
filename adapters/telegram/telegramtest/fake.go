// Package telegramtest is a fake Telegram Bot API server for tests. It
// answers POST /bot<token>/<method> (multipart, form or JSON bodies) with
// {"ok":true,"result":…} like Telegram, enforces the limits real Telegram
// enforces (HTML parse mode, 4,096-character texts, callback_data of 1-64
// bytes, valid inline buttons, per-chat/group/global rate limits answered
// with 429), records what it received, queues updates for getUpdates or
// pushes them to a registered webhook, and injects faults: 429 with
// retry_after, 5xx, non-JSON answers and slow answers.
//
// It is driven through the real SDK (bot.WithServerURL(Server.URL)); it
// never reaches the internet.
package telegramtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// DefaultToken is the token the fake accepts unless Options.Token is set.
const DefaultToken = "123456789:TEST-fake-token_0123456789abcdefghij"

// Limits are the rate limits the fake enforces. Requests beyond them are
// answered 429 (retry_after 1) and recorded as violations. Slack absorbs the
// delay between a client's decision to send and the request's arrival.
type Limits struct {
	PerChat         time.Duration // minimum gap between messages in one chat (1s)
	GroupPerMinute  int           // messages per group per minute (20)
	GlobalPerSecond int           // messages per second overall (30)
	Slack           time.Duration // timing slack (300ms)
}

// Options configure the fake.
type Options struct {
	Token       string // default DefaultToken
	BotUsername string // default "silas_test_bot"
	// PrivacyOff reports can_read_all_group_messages in getMe.
	PrivacyOff bool
	Limits     Limits
	// NoRateLimits disables rate-limit enforcement.
	NoRateLimits bool
	Now          func() time.Time
}

// Call is one request the fake received.
type Call struct {
	Method string
	Params map[string]string
	At     time.Time
}

// Button is one inline keyboard button.
type Button struct {
	Text         string
	CallbackData string
	URL          string
}

// Message is a message the bot sent, as Telegram holds it.
type Message struct {
	ChatID int64
	ID     int
	// HTML is the text as sent; Text is what users see (markup parsed).
	HTML      string
	ParseMode string
	Text      string
	Tags      []Tag
	Keyboard  [][]Button
	Edits     int
	Deleted   bool
	SentAt    time.Time
}

// Answer is an answerCallbackQuery the fake received.
type Answer struct {
	QueryID   string
	Text      string
	ShowAlert bool
}

// Fault makes the fake misbehave for the next Times requests to a method.
type Fault struct {
	// Status is the HTTP status and error_code; 0 answers normally (after
	// Delay).
	Status      int
	Description string
	// RetryAfter is parameters.retry_after (429).
	RetryAfter int
	// Raw, when set, is sent verbatim as the body (a proxy's HTML page).
	Raw string
	// Delay is waited before answering (the request's cancellation ends it).
	Delay time.Duration
	// Times is how many requests the fault applies to (default 1).
	Times int
	// After lets this many requests through first.
	After int
}

// WebhookInfo is the webhook registered with setWebhook.
type WebhookInfo struct {
	URL            string
	Secret         string
	AllowedUpdates []string
	MaxConnections int
	// LastErrorDate/LastErrorMessage are reported by getWebhookInfo.
	LastErrorDate    int64
	LastErrorMessage string
}

type queued struct {
	id  int64
	raw json.RawMessage
}

type sendEvent struct {
	chat int64
	at   time.Time
}

// Server is the fake Bot API.
type Server struct {
	// URL is the base URL to give the SDK (bot.WithServerURL).
	URL   string
	Token string
	// BotID and BotUsername are the bot's identity (getMe).
	BotID       int64
	BotUsername string

	opts Options
	srv  *httptest.Server
	now  func() time.Time

	mu      sync.Mutex
	wake    chan struct{}
	pollGen int
	// deaf: getUpdates holds every poll open and returns nothing (Deafen).
	deaf       bool
	calls      []Call
	queue      []queued
	nextUpdate int64
	nextMsg    map[int64]int
	msgs       map[int64]map[int]*Message
	queries    map[string]bool // open callback queries
	answers    []Answer
	webhook    WebhookInfo
	commands   []string // the command menu, as setMyCommands last set it
	faults     map[string][]*Fault
	chatErrs   map[int64]Fault
	events     []sendEvent
	violations []string
}

// NewServer starts a fake; it is closed when the test ends.
func NewServer(t interface {
	Cleanup(func())
	Helper()
}, opts Options) *Server {
	t.Helper()
	if opts.Token == "" {
		opts.Token = DefaultToken
	}
	if opts.BotUsername == "" {
		opts.BotUsername = "silas_test_bot"
	}
	if opts.Limits.PerChat == 0 {
		opts.Limits.PerChat = time.Second
	}
	if opts.Limits.GroupPerMinute == 0 {
		opts.Limits.GroupPerMinute = 20
	}
	if opts.Limits.GlobalPerSecond == 0 {
		opts.Limits.GlobalPerSecond = 30
	}
	if opts.Limits.Slack == 0 {
		opts.Limits.Slack = 300 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	id, _ := strconv.ParseInt(opts.Token[:strings.IndexByte(opts.Token, ':')], 10, 64)
	s := &Server{
		Token: opts.Token, BotID: id, BotUsername: opts.BotUsername, opts: opts, now: opts.Now,
		wake: make(chan struct{}), nextUpdate: 1000, nextMsg: map[int64]int{}, msgs: map[int64]map[int]*Message{},
		queries: map[string]bool{}, faults: map[string][]*Fault{}, chatErrs: map[int64]Fault{},
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	t.Cleanup(s.Close)
	return s
}

// Close stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	s.pollGen++
	s.wakeLocked()
	s.mu.Unlock()
	s.srv.CloseClientConnections()
	s.srv.Close()
}

func (s *Server) wakeLocked() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// ---- test controls -------------------------------------------------------

// Deafen makes the Bot API stop delivering updates while it stays
// reachable (deaf) or resume (false): a poll is held open until the client
// gives up, as a getUpdates that never returns (issue 28's deaf channel).
func (s *Server) Deafen(deaf bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deaf = deaf
	s.wakeLocked()
}

// Inject adds a fault for the next requests to method.
func (s *Server) Inject(method string, f Fault) {
	if f.Times <= 0 {
		f.Times = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[strings.ToLower(method)] = append(s.faults[strings.ToLower(method)], &f)
}

// FailChat makes every send or edit to chat fail, e.g.
// Fault{Status: 403, Description: "Forbidden: bot was blocked by the user"}.
func (s *Server) FailChat(chat int64, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chatErrs[chat] = f
}

// SetWebhookError sets what getWebhookInfo reports as the last error.
func (s *Server) SetWebhookError(at time.Time, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.webhook.LastErrorDate, s.webhook.LastErrorMessage = at.Unix(), msg
}

// SetWebhook registers a webhook as if setWebhook had been called.
func (s *Server) SetWebhook(w WebhookInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.webhook = w
}

// Webhook returns the registered webhook.
func (s *Server) Webhook() WebhookInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.webhook
	w.AllowedUpdates = slices.Clone(w.AllowedUpdates)
	return w
}

// Calls returns the requests received, all or for one method.
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if method == "" || strings.EqualFold(c.Method, method) {
			out = append(out, c)
		}
	}
	return out
}

// Messages returns copies of the messages in chat, oldest first, deleted
// ones included.
func (s *Server) Messages(chat int64) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []int
	for id := range s.msgs[chat] {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	out := make([]Message, 0, len(ids))
	for _, id := range ids {
		out = append(out, copyMessage(s.msgs[chat][id]))
	}
	return out
}

// Message returns a copy of one message.
func (s *Server) Message(chat int64, id int) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.msgs[chat][id]
	if !ok {
		return Message{}, false
	}
	return copyMessage(m), true
}

// DeleteMessage deletes a message as a user (or admin) would.
func (s *Server) DeleteMessage(chat int64, id int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.msgs[chat][id]; ok {
		m.Deleted = true
	}
}

func copyMessage(m *Message) Message {
	c := *m
	c.Tags = slices.Clone(m.Tags)
	c.Keyboard = nil
	for _, row := range m.Keyboard {
		c.Keyboard = append(c.Keyboard, slices.Clone(row))
	}
	return c
}

// Answers returns the answerCallbackQuery calls accepted.
func (s *Server) Answers() []Answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.answers)
}

// Violations lists rate-limit violations (each was answered 429).
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.violations)
}

// Pending is how many updates are not confirmed yet.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// ---- updates ---------------------------------------------------------------

// User is a Telegram user.
type User struct {
	ID        int64
	FirstName string
	LastName  string
	Username  string
	IsBot     bool
}

// Chat is a Telegram chat. Type is "private", "group", "supergroup" or
// "channel".
type Chat struct {
	ID    int64
	Type  string
	Title string
}

// Private is the private chat with u.
func Private(u User) Chat { return Chat{ID: u.ID, Type: "private"} }

// Group is a supergroup (ids of groups are negative).
func Group(id int64, title string) Chat { return Chat{ID: id, Type: "supergroup", Title: title} }

func (u User) json() map[string]any {
	m := map[string]any{"id": u.ID, "is_bot": u.IsBot, "first_name": u.FirstName}
	if u.LastName != "" {
		m["last_name"] = u.LastName
	}
	if u.Username != "" {
		m["username"] = u.Username
	}
	return m
}

func (c Chat) json() map[string]any {
	m := map[string]any{"id": c.ID, "type": c.Type}
	if c.Title != "" {
		m["title"] = c.Title
	}
	return m
}

// Entity is a message entity (offsets in UTF-16 code units).
type Entity struct {
	Type   string `json:"type"`
	Offset int    `json:"offset"`
	Length int    `json:"length"`
	User   *User  `json:"-"`
}

// Msg describes an incoming message.
type Msg struct {
	Chat Chat
	From User
	Text string
	// Entities are computed like Telegram does (a leading /command, and
	// @mentions) unless set; NoEntities sends none.
	Entities   []Entity
	NoEntities bool
	// ReplyTo is the id of a message in the chat being replied to; replies
	// to messages the bot sent carry the bot as their sender.
	ReplyTo int
	// ReplyToUser replies to a message from this user instead.
	ReplyToUser *User
	// SenderChat marks a message sent on behalf of a chat (anonymous admin).
	SenderChat *Chat
	// Edited sends it as edited_message.
	Edited bool
}

var (
	commandRe = regexp.MustCompile(`^/[A-Za-z0-9_]{1,32}(@[A-Za-z0-9_]{3,32})?`)
	mentionRe = regexp.MustCompile(`(^|[^A-Za-z0-9_@])(@[A-Za-z0-9_]{5,32})`)
)

// Entities computes the entities Telegram attaches to text: a leading bot
// command and @mentions.
func Entities(text string) []Entity {
	var out []Entity
	u16 := func(byteOff int) int { return len(utf16.Encode([]rune(text[:byteOff]))) }
	if loc := commandRe.FindStringIndex(text); loc != nil {
		out = append(out, Entity{Type: "bot_command", Offset: 0, Length: u16(loc[1])})
	}
	for _, m := range mentionRe.FindAllStringSubmatchIndex(text, -1) {
		out = append(out, Entity{Type: "mention", Offset: u16(m[4]), Length: u16(m[5]) - u16(m[4])})
	}
	return out
}

// NextUpdateID reserves an update id (for AddRawUpdate).
func (s *Server) NextUpdateID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextUpdate++
	return s.nextUpdate
}

// SendMessage queues an incoming message update and returns its update id.
func (s *Server) SendMessage(m Msg) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextMsg[m.Chat.ID]++
	msg := map[string]any{
		"message_id": s.nextMsg[m.Chat.ID], "date": s.now().Unix(), "chat": m.Chat.json(), "from": m.From.json(), "text": m.Text,
	}
	ents := m.Entities
	if ents == nil && !m.NoEntities {
		ents = Entities(m.Text)
	}
	if len(ents) > 0 {
		var list []map[string]any
		for _, e := range ents {
			em := map[string]any{"type": e.Type, "offset": e.Offset, "length": e.Length}
			if e.User != nil {
				em["user"] = e.User.json()
			}
			list = append(list, em)
		}
		msg["entities"] = list
	}
	if m.SenderChat != nil {
		msg["sender_chat"] = m.SenderChat.json()
	}
	switch {
	case m.ReplyToUser != nil:
		msg["reply_to_message"] = map[string]any{"message_id": m.ReplyTo, "date": s.now().Unix(), "chat": m.Chat.json(), "from": m.ReplyToUser.json(), "text": "…"}
	case m.ReplyTo != 0:
		r := map[string]any{"message_id": m.ReplyTo, "date": s.now().Unix(), "chat": m.Chat.json(), "text": "…"}
		if bm, ok := s.msgs[m.Chat.ID][m.ReplyTo]; ok && !bm.Deleted {
			// As Telegram quotes it: the bot's message as it is now,
			// its inline keyboard included.
			r = s.messageJSON(bm)
			r["chat"] = m.Chat.json()
		}
		msg["reply_to_message"] = r
	}
	key := "message"
	if m.Edited {
		key = "edited_message"
		msg["edit_date"] = s.now().Unix()
	}
	return s.enqueueLocked(key, msg)
}

// Tap queues a callback_query update for a button on message msgID in chat
// and returns the update id and the callback query id. When the bot sent
// that message, the query carries it; otherwise it is "inaccessible".
func (s *Server) Tap(chat Chat, from User, msgID int, data string) (int64, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	qid := randomID()
	s.queries[qid] = true
	var msg map[string]any
	if bm, ok := s.msgs[chat.ID][msgID]; ok && !bm.Deleted {
		msg = map[string]any{"message_id": msgID, "date": bm.SentAt.Unix(), "chat": chat.json(), "from": s.botUser().json(), "text": bm.Text}
	} else {
		msg = map[string]any{"message_id": msgID, "date": 0, "chat": chat.json()}
	}
	q := map[string]any{"id": qid, "from": from.json(), "message": msg, "chat_instance": "42", "data": data}
	return s.enqueueLocked("callback_query", q), qid
}

// AddRawUpdate queues raw JSON as an update with the given id (use
// NextUpdateID); the JSON need not be valid.
func (s *Server) AddRawUpdate(id int64, raw string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, queued{id: id, raw: json.RawMessage(raw)})
	s.wakeLocked()
}

func (s *Server) enqueueLocked(key string, v any) int64 {
	s.nextUpdate++
	id := s.nextUpdate
	raw, _ := json.Marshal(map[string]any{"update_id": id, key: v})
	s.queue = append(s.queue, queued{id: id, raw: raw})
	s.wakeLocked()
	return id
}

// Update returns the queued raw JSON of an update (for posting it to a
// webhook handler by hand).
func (s *Server) Update(id int64) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.queue {
		if q.id == id {
			return slices.Clone([]byte(q.raw)), true
		}
	}
	return nil, false
}

// PushWebhook delivers queued updates to the registered webhook in order,
// as Telegram does: an update is dropped only after a 2xx answer; the first
// failure stops the push and is reported by getWebhookInfo.
func (s *Server) PushWebhook(ctx context.Context) (delivered int, err error) {
	for {
		s.mu.Lock()
		w := s.webhook
		if w.URL == "" {
			s.mu.Unlock()
			return delivered, fmt.Errorf("telegramtest: no webhook is set")
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return delivered, nil
		}
		q := s.queue[0]
		s.mu.Unlock()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(q.raw))
		if err != nil {
			return delivered, err
		}
		req.Header.Set("Content-Type", "application/json")
		if w.Secret != "" {
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", w.Secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		s.mu.Lock()
		if err != nil || resp.StatusCode/100 != 2 {
			msg := "Connection refused"
			if err == nil {
				msg = fmt.Sprintf("Wrong response from the webhook: %s", resp.Status)
			}
			s.webhook.LastErrorDate, s.webhook.LastErrorMessage = s.now().Unix(), msg
			s.mu.Unlock()
			return delivered, fmt.Errorf("telegramtest: webhook: %s", msg)
		}
		if len(s.queue) > 0 && s.queue[0].id == q.id {
			s.queue = s.queue[1:]
		}
		s.mu.Unlock()
		delivered++
	}
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *Server) botUser() User {
	return User{ID: s.BotID, IsBot: true, FirstName: "Silas", Username: s.BotUsername}
}

// ---- HTTP ------------------------------------------------------------------

type apiErr struct {
	code       int
	desc       string
	retryAfter int
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/bot")
	token, method, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		writeErr(w, apiErr{code: 404, desc: "Not Found"})
		return
	}
	if token != s.Token {
		writeErr(w, apiErr{code: 401, desc: "Unauthorized"})
		return
	}
	params, err := readParams(r)
	if err != nil {
		writeErr(w, apiErr{code: 400, desc: "Bad Request: " + err.Error()})
		return
	}
	method = strings.ToLower(method)
	s.mu.Lock()
	s.calls = append(s.calls, Call{Method: method, Params: params, At: s.now()})
	var f *Fault
	if list := s.faults[method]; len(list) > 0 {
		if list[0].After > 0 {
			list[0].After--
		} else {
			f = list[0]
			if f.Times--; f.Times <= 0 {
				s.faults[method] = list[1:]
			}
		}
	}
	s.mu.Unlock()
	if f != nil {
		if f.Delay > 0 {
			select {
			case <-time.After(f.Delay):
			case <-r.Context().Done():
				return
			}
		}
		if f.Raw != "" {
			w.WriteHeader(max(f.Status, 200))
			w.Write([]byte(f.Raw))
			return
		}
		if f.Status != 0 {
			writeErr(w, apiErr{code: f.Status, desc: f.Description, retryAfter: f.RetryAfter})
			return
		}
	}
	var result any
	var ae *apiErr
	switch method {
	case "getme":
		u := s.botUser().json()
		u["can_join_groups"] = true
		u["can_read_all_group_messages"] = s.opts.PrivacyOff
		u["supports_inline_queries"] = false
		result = u
	case "getupdates":
		result, ae = s.getUpdates(r.Context(), params)
	case "sendmessage":
		result, ae = s.sendMessage(params)
	case "editmessagetext":
		result, ae = s.editMessageText(params)
	case "editmessagereplymarkup":
		result, ae = s.editMessageReplyMarkup(params)
	case "deletemessage":
		result, ae = s.deleteMessage(params)
	case "answercallbackquery":
		result, ae = s.answerCallbackQuery(params)
	case "setwebhook":
		result, ae = s.setWebhook(params)
	case "setmycommands":
		result, ae = s.setMyCommands(params)
	case "deletewebhook":
		s.mu.Lock()
		s.webhook = WebhookInfo{}
		if params["drop_pending_updates"] == "true" {
			s.queue = nil
		}
		s.mu.Unlock()
		result = true
	case "getwebhookinfo":
		s.mu.Lock()
		info := map[string]any{"url": s.webhook.URL, "has_custom_certificate": false, "pending_update_count": len(s.queue)}
		if s.webhook.URL != "" {
			info["max_connections"] = s.webhook.MaxConnections
			if len(s.webhook.AllowedUpdates) > 0 {
				info["allowed_updates"] = s.webhook.AllowedUpdates
			}
		}
		if s.webhook.LastErrorDate != 0 {
			info["last_error_date"] = s.webhook.LastErrorDate
			info["last_error_message"] = s.webhook.LastErrorMessage
		}
		s.mu.Unlock()
		result = info
	default:
		ae = &apiErr{code: 404, desc: "Not Found: method not found"}
	}
	if ae != nil {
		writeErr(w, *ae)
		return
	}
	writeJSON(w, 200, map[string]any{"ok": true, "result": result})
}

func writeErr(w http.ResponseWriter, e apiErr) {
	if e.desc == "" {
		e.desc = http.StatusText(e.code)
		if e.code == 429 {
			e.desc = fmt.Sprintf("Too Many Requests: retry after %d", e.retryAfter)
		}
	}
	body := map[string]any{"ok": false, "error_code": e.code, "description": e.desc}
	if e.retryAfter > 0 {
		body["parameters"] = map[string]any{"retry_after": e.retryAfter}
	}
	writeJSON(w, e.code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// readParams reads multipart, urlencoded or JSON parameters as strings (JSON
// values that are not strings keep their JSON text, as multipart sends them).
func readParams(r *http.Request) (map[string]string, error) {
	out := map[string]string{}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "multipart/form-data":
		if r.ContentLength == 0 {
			return out, nil // a method without parameters
		}
		if err := r.ParseMultipartForm(8 << 20); err != nil {
			if errors.Is(err, io.EOF) || strings.Contains(err.Error(), "EOF") {
				return out, nil // the SDK sends no closing boundary without parameters
			}
			return nil, fmt.Errorf("cannot parse multipart body: %v", err)
		}
		for k, v := range r.MultipartForm.Value {
			out[k] = v[0]
		}
	case "application/json":
		var m map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			return nil, fmt.Errorf("cannot parse JSON body: %v", err)
		}
		for k, v := range m {
			var s string
			if json.Unmarshal(v, &s) == nil {
				out[k] = s
			} else {
				out[k] = string(v)
			}
		}
	default:
		if err := r.ParseForm(); err != nil {
			return nil, err
		}
		for k, v := range r.Form {
			out[k] = v[0]
		}
	}
	return out, nil
}

func (s *Server) getUpdates(ctx context.Context, p map[string]string) (any, *apiErr) {
	offset, _ := strconv.ParseInt(p["offset"], 10, 64)
	limit, _ := strconv.Atoi(p["limit"])
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	timeout, _ := strconv.Atoi(p["timeout"])
	deadline := time.NewTimer(time.Duration(timeout) * time.Second)
	defer deadline.Stop()
	s.mu.Lock()
	s.pollGen++
	gen := s.pollGen
	s.wakeLocked() // an older poll ends with 409, like Telegram
	s.mu.Unlock()
	for {
		s.mu.Lock()
		if s.webhook.URL != "" {
			s.mu.Unlock()
			return nil, &apiErr{code: 409, desc: "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"}
		}
		if s.pollGen != gen {
			s.mu.Unlock()
			return nil, &apiErr{code: 409, desc: "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"}
		}
		if s.deaf {
			wake := s.wake
			s.mu.Unlock()
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return []json.RawMessage{}, nil
			}
		}
		if offset > 0 {
			// Confirm everything below offset.
			i := 0
			for i < len(s.queue) && s.queue[i].id < offset {
				i++
			}
			s.queue = s.queue[i:]
		}
		var out []json.RawMessage
		for _, q := range s.queue {
			if len(out) == limit {
				break
			}
			out = append(out, q.raw)
		}
		wake := s.wake
		s.mu.Unlock()
		if len(out) > 0 || timeout <= 0 {
			if out == nil {
				out = []json.RawMessage{}
			}
			return out, nil
		}
		select {
		case <-wake:
		case <-deadline.C:
			timeout = 0
		case <-ctx.Done():
			return []json.RawMessage{}, nil
		}
	}
}

func chatID(p map[string]string) (int64, *apiErr) {
	v, ok := p["chat_id"]
	if !ok || v == "" {
		return 0, &apiErr{code: 400, desc: "Bad Request: chat_id is empty"}
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id == 0 {
		return 0, &apiErr{code: 400, desc: "Bad Request: chat not found"}
	}
	return id, nil
}

// checkText validates text and parse mode like Telegram.
func checkText(p map[string]string) (plain string, tags []Tag, ae *apiErr) {
	text := p["text"]
	plain = text
	switch mode := p["parse_mode"]; mode {
	case "":
	case "HTML":
		var err error
		if plain, tags, err = ParseHTML(text); err != nil {
			return "", nil, &apiErr{code: 400, desc: "Bad Request: can't parse entities: " + err.Error()}
		}
	default:
		return "", nil, &apiErr{code: 400, desc: "Bad Request: unsupported parse_mode " + mode + " in this fake"}
	}
	if strings.TrimSpace(plain) == "" {
		return "", nil, &apiErr{code: 400, desc: "Bad Request: message text is empty"}
	}
	if TextLen(plain) > 4096 {
		return "", nil, &apiErr{code: 400, desc: "Bad Request: message is too long"}
	}
	return plain, tags, nil
}

// buttonFields are the fields of InlineKeyboardButton that give it an action.
var buttonFields = []string{"url", "callback_data", "web_app", "login_url", "switch_inline_query",
	"switch_inline_query_current_chat", "switch_inline_query_chosen_chat", "copy_text", "callback_game", "pay"}

// checkKeyboard validates reply_markup like Telegram does for inline
// keyboards.
func checkKeyboard(p map[string]string) ([][]Button, *apiErr) {
	raw, ok := p["reply_markup"]
	if !ok || raw == "" {
		return nil, nil
	}
	bad := func(d string) ([][]Button, *apiErr) { return nil, &apiErr{code: 400, desc: "Bad Request: " + d} }
	var m struct {
		InlineKeyboard [][]map[string]json.RawMessage `json:"inline_keyboard"`
	}
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return bad("can't parse reply keyboard markup JSON object")
	}
	var out [][]Button
	for _, row := range m.InlineKeyboard {
		var r []Button
		for _, b := range row {
			var btn Button
			if err := json.Unmarshal(b["text"], &btn.Text); err != nil || strings.TrimSpace(btn.Text) == "" {
				return bad("can't parse inline keyboard button: Text must be non-empty")
			}
			n := 0
			for _, f := range buttonFields {
				if _, ok := b[f]; ok {
					n++
				}
			}
			if ct, ok := b["copy_text"]; ok {
				var c struct {
					Text string `json:"text"`
				}
				if json.Unmarshal(ct, &c) != nil || c.Text == "" {
					return bad("BUTTON_COPY_TEXT_INVALID")
				}
			}
			if n == 0 {
				return bad("can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard")
			}
			if n > 1 {
				return bad("can't parse inline keyboard button: only one of the optional fields must be used")
			}
			if cd, ok := b["callback_data"]; ok {
				if json.Unmarshal(cd, &btn.CallbackData) != nil || len(btn.CallbackData) < 1 || len(btn.CallbackData) > 64 {
					return bad("BUTTON_DATA_INVALID")
				}
			}
			if u, ok := b["url"]; ok {
				_ = json.Unmarshal(u, &btn.URL)
				pu, err := url.Parse(btn.URL)
				if err != nil || (pu.Scheme != "https" && pu.Scheme != "http" && pu.Scheme != "tg") || pu.Host == "" ||
					pu.Hostname() == "localhost" || strings.HasPrefix(pu.Hostname(), "127.") {
					return bad(fmt.Sprintf("inline keyboard button URL '%s' is invalid: Wrong HTTP URL", btn.URL))
				}
			}
			r = append(r, btn)
		}
		if len(r) > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// rateLimit records a message to chat, or refuses it with 429 when it
// would exceed the limits.
func (s *Server) rateLimitLocked(chat int64) *apiErr {
	if s.opts.NoRateLimits {
		return nil
	}
	l := s.opts.Limits
	now := s.now()
	var inChat, inGroup, global int
	var last time.Time
	for _, e := range s.events {
		if e.chat == chat {
			if e.at.After(last) {
				last = e.at
			}
			if now.Sub(e.at) < time.Minute-l.Slack {
				inGroup++
			}
			inChat++
		}
		if now.Sub(e.at) < time.Second-l.Slack {
			global++
		}
	}
	var v string
	switch {
	case inChat > 0 && now.Sub(last) < l.PerChat-l.Slack:
		v = fmt.Sprintf("chat %d: two messages %s apart (limit: one per %s)", chat, now.Sub(last).Round(time.Millisecond), l.PerChat)
	case chat < 0 && inGroup >= l.GroupPerMinute:
		v = fmt.Sprintf("group %d: more than %d messages in a minute", chat, l.GroupPerMinute)
	case global >= l.GlobalPerSecond:
		v = fmt.Sprintf("more than %d messages in a second", l.GlobalPerSecond)
	}
	if v != "" {
		s.violations = append(s.violations, v)
		return &apiErr{code: 429, retryAfter: 1}
	}
	s.events = append(s.events, sendEvent{chat: chat, at: now})
	// Forget events older than a minute.
	i := 0
	for i < len(s.events) && now.Sub(s.events[i].at) > 2*time.Minute {
		i++
	}
	s.events = s.events[i:]
	return nil
}

func (s *Server) chatFault(chat int64) *apiErr {
	if f, ok := s.chatErrs[chat]; ok {
		return &apiErr{code: f.Status, desc: f.Description, retryAfter: f.RetryAfter}
	}
	return nil
}

func (s *Server) sendMessage(p map[string]string) (any, *apiErr) {
	chat, ae := chatID(p)
	if ae != nil {
		return nil, ae
	}
	plain, tags, ae := checkText(p)
	if ae != nil {
		return nil, ae
	}
	kb, ae := checkKeyboard(p)
	if ae != nil {
		return nil, ae
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ae := s.chatFault(chat); ae != nil {
		return nil, ae
	}
	if ae := s.rateLimitLocked(chat); ae != nil {
		return nil, ae
	}
	s.nextMsg[chat]++
	m := &Message{ChatID: chat, ID: s.nextMsg[chat], HTML: p["text"], ParseMode: p["parse_mode"], Text: plain, Tags: tags, Keyboard: kb, SentAt: s.now()}
	if s.msgs[chat] == nil {
		s.msgs[chat] = map[int]*Message{}
	}
	s.msgs[chat][m.ID] = m
	return s.messageJSON(m), nil
}

func (s *Server) messageJSON(m *Message) map[string]any {
	typ := "private"
	if m.ChatID < 0 {
		typ = "supergroup"
	}
	out := map[string]any{"message_id": m.ID, "date": m.SentAt.Unix(), "chat": map[string]any{"id": m.ChatID, "type": typ},
		"from": s.botUser().json(), "text": m.Text}
	if len(m.Keyboard) > 0 {
		var rows [][]map[string]any
		for _, r := range m.Keyboard {
			var row []map[string]any
			for _, b := range r {
				bm := map[string]any{"text": b.Text}
				if b.CallbackData != "" {
					bm["callback_data"] = b.CallbackData
				}
				if b.URL != "" {
					bm["url"] = b.URL
				}
				row = append(row, bm)
			}
			rows = append(rows, row)
		}
		out["reply_markup"] = map[string]any{"inline_keyboard": rows}
	}
	return out
}

func (s *Server) target(p map[string]string) (*Message, *apiErr) {
	chat, ae := chatID(p)
	if ae != nil {
		return nil, ae
	}
	id, _ := strconv.Atoi(p["message_id"])
	m, ok := s.msgs[chat][id]
	if !ok || m.Deleted {
		return nil, &apiErr{code: 400, desc: "Bad Request: message to edit not found"}
	}
	return m, nil
}

func (s *Server) editMessageText(p map[string]string) (any, *apiErr) {
	plain, tags, ae := checkText(p)
	if ae != nil {
		return nil, ae
	}
	kb, ae := checkKeyboard(p)
	if ae != nil {
		return nil, ae
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ae := s.target(p)
	if ae != nil {
		return nil, ae
	}
	if ae := s.chatFault(m.ChatID); ae != nil {
		return nil, ae
	}
	if m.HTML == p["text"] && m.ParseMode == p["parse_mode"] && reflect.DeepEqual(m.Keyboard, kb) {
		return nil, &apiErr{code: 400, desc: "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"}
	}
	if ae := s.rateLimitLocked(m.ChatID); ae != nil {
		return nil, ae
	}
	// Without reply_markup the inline keyboard is removed, as on Telegram.
	m.HTML, m.ParseMode, m.Text, m.Tags, m.Keyboard = p["text"], p["parse_mode"], plain, tags, kb
	m.Edits++
	return s.messageJSON(m), nil
}

func (s *Server) editMessageReplyMarkup(p map[string]string) (any, *apiErr) {
	kb, ae := checkKeyboard(p)
	if ae != nil {
		return nil, ae
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ae := s.target(p)
	if ae != nil {
		return nil, ae
	}
	if reflect.DeepEqual(m.Keyboard, kb) {
		return nil, &apiErr{code: 400, desc: "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"}
	}
	if ae := s.rateLimitLocked(m.ChatID); ae != nil {
		return nil, ae
	}
	m.Keyboard = kb
	m.Edits++
	return s.messageJSON(m), nil
}

func (s *Server) deleteMessage(p map[string]string) (any, *apiErr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ae := s.target(p)
	if ae != nil {
		return nil, &apiErr{code: 400, desc: "Bad Request: message to delete not found"}
	}
	m.Deleted = true
	return true, nil
}

func (s *Server) answerCallbackQuery(p map[string]string) (any, *apiErr) {
	id := p["callback_query_id"]
	if len([]rune(p["text"])) > 200 {
		return nil, &apiErr{code: 400, desc: "Bad Request: MESSAGE_TOO_LONG"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.queries[id] {
		return nil, &apiErr{code: 400, desc: "Bad Request: query is too old and response timeout expired or query ID is invalid"}
	}
	delete(s.queries, id)
	s.answers = append(s.answers, Answer{QueryID: id, Text: p["text"], ShowAlert: p["show_alert"] == "true"})
	return true, nil
}

var secretTokenRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// setMyCommands keeps the menu's command names; Telegram's rules apply
// (1-100 commands, names of 1-32 lower-case letters, digits and
// underscores, descriptions of 1-256 characters).
func (s *Server) setMyCommands(p map[string]string) (any, *apiErr) {
	var cmds []struct{ Command, Description string }
	if err := json.Unmarshal([]byte(p["commands"]), &cmds); err != nil || len(cmds) > 100 {
		return nil, &apiErr{code: 400, desc: "Bad Request: can't parse commands"}
	}
	var names []string
	for _, c := range cmds {
		if !commandNameRe.MatchString(c.Command) || c.Description == "" || utf8.RuneCountInString(c.Description) > 256 {
			return nil, &apiErr{code: 400, desc: "Bad Request: BOT_COMMAND_INVALID"}
		}
		names = append(names, c.Command)
	}
	s.mu.Lock()
	s.commands = names
	s.mu.Unlock()
	return true, nil
}

var commandNameRe = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// Commands are the command names of the bot's menu (setMyCommands).
func (s *Server) Commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commands)
}

func (s *Server) setWebhook(p map[string]string) (any, *apiErr) {
	u := p["url"]
	s.mu.Lock()
	defer s.mu.Unlock()
	if u == "" {
		s.webhook = WebhookInfo{}
		return true, nil
	}
	if sec := p["secret_token"]; sec != "" && !secretTokenRe.MatchString(sec) {
		return nil, &apiErr{code: 400, desc: "Bad Request: secret token contains unallowed characters"}
	}
	var allowed []string
	if a := p["allowed_updates"]; a != "" {
		if err := json.Unmarshal([]byte(a), &allowed); err != nil {
			return nil, &apiErr{code: 400, desc: "Bad Request: can't parse allowed updates"}
		}
	}
	maxConn, _ := strconv.Atoi(p["max_connections"])
	if maxConn == 0 {
		maxConn = 40
	}
	s.webhook = WebhookInfo{URL: u, Secret: p["secret_token"], AllowedUpdates: allowed, MaxConnections: maxConn}
	return true, nil
}
