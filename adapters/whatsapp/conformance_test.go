package whatsapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waCommon"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	"google.golang.org/protobuf/proto"

	"github.com/silas-gateway/silas/adapters/channeltest"
	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// TestConformance runs the channel conformance suite through the real
// engine on PostgreSQL against the adapter and waWorld, a model of
// WhatsApp at the adapter's port: it keeps every message a person sends
// until a connected device acknowledges it (the handler's success, as
// whatsmeow's SynchronousAck), delivers what piled up while no device was
// connected after the next connect (the offline batch), holds the bot's
// messages with their edits and polls, and turns a person's vote into a
// poll-update message whose decryption yields the option's hash.
func TestConformance(t *testing.T) {
	channeltest.Run(t, func(t *testing.T, o channeltest.Options) (channeltest.Platform, string) {
		if o.Scenario == "replayed_tap" {
			// Voting twice for the same option is not a thing on
			// WhatsApp (a second tap withdraws the vote), and a vote the
			// core refuses as already decided is deliberately not
			// answered (issue 13): the scenario's "Already decided"
			// notice cannot appear. Double decisions are covered by the
			// core's tests and TestPollCardVoteDecisionEdit.
			return nil, "WhatsApp polls have no repeated tap; refused votes other than a non-approver's are silent by design"
		}
		return newWAWorld(t, o, CardsPoll), ""
	})
}

// TestConformanceNumbered runs the card scenarios with whatsapp.cards:
// numbered, where a tap is a reply quoting the card with the choice's
// number.
func TestConformanceNumbered(t *testing.T) {
	run := map[string]bool{"tap_edits_card": true, "non_approver_tap": true, "text_fallback": true, "expiry": true}
	channeltest.Run(t, func(t *testing.T, o channeltest.Options) (channeltest.Platform, string) {
		if !run[o.Scenario] {
			return nil, "covered in poll mode (TestConformance)"
		}
		return newWAWorld(t, o, CardsNumbered), ""
	})
}

var confLimits = kit.Limits{PerChatInterval: 50 * time.Millisecond, GroupPerMinute: 600, GlobalPerSecond: 50}

var (
	botJID   = types.NewJID("4915100000009", types.DefaultUserServer)
	people   = [2]types.JID{types.NewJID("4915111111111", types.DefaultUserServer), types.NewJID("4915122222222", types.DefaultUserServer)}
	confGrp  = types.NewJID("120363000000000042", types.GroupServer)
	choiceRe = regexp.MustCompile(`(?m)^(\d+)\. (.*) — reply "(\S+) ([a-z2-7]{26})"$`)
	statusRe = regexp.MustCompile(`(?m)^Status: (\w+)$`)
	linkRe   = regexp.MustCompile(`(?m)^[^:\n]+: (https://\S+)$`)
)

type waMsg struct {
	id      string
	text    string
	poll    []string // option names of a poll
	edits   int
	revoked bool
}

type waWorld struct {
	chat  types.JID
	cards string

	mu      sync.Mutex
	msgs    []*waMsg
	byID    map[string]*waMsg
	pending []*events.Message
	votes   map[string]*waE2E.PollVoteMessage
	conn    *waConn
	n       int
	last    map[string]time.Time
	viol    []string
	cardOf  map[string]cards.ID
	wake    chan struct{}
	// deaf (Deafen): keepalives go unanswered and connecting fails.
	deaf bool
}

// Deafen implements channeltest.Deafener: the server stops answering the
// device's keepalive (whatsmeow's KeepAliveTimeout) and a reconnect does
// not get through until it answers again; messages sent meanwhile wait
// and arrive on the next connection.
func (w *waWorld) Deafen(_ testing.TB, deaf bool) {
	w.mu.Lock()
	w.deaf = deaf
	c := w.conn
	w.mu.Unlock()
	if deaf && c != nil {
		c.emit(&events.KeepAliveTimeout{ErrorCount: 1, LastSuccess: time.Now()})
	}
}

func newWAWorld(t *testing.T, o channeltest.Options, mode string) *waWorld {
	w := &waWorld{chat: people[channeltest.Approver], cards: mode, byID: map[string]*waMsg{}, votes: map[string]*waE2E.PollVoteMessage{},
		last: map[string]time.Time{}, cardOf: map[string]cards.ID{}, wake: make(chan struct{}, 1)}
	if o.Shared {
		w.chat = confGrp
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.deliverLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *waWorld) nextID(prefix string) string {
	w.n++
	return fmt.Sprintf("%s%08d", prefix, w.n)
}

func (w *waWorld) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// deliverLoop hands pending messages, oldest first, to the connected
// device; one stays pending until a handler acknowledges it.
func (w *waWorld) deliverLoop(ctx context.Context) {
	for {
		w.mu.Lock()
		c := w.conn
		var e *events.Message
		if c != nil && len(w.pending) > 0 {
			e = w.pending[0]
		}
		w.mu.Unlock()
		if e == nil {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if c.emit(e) {
			w.mu.Lock()
			if len(w.pending) > 0 && w.pending[0] == e {
				w.pending = w.pending[1:]
			}
			w.mu.Unlock()
			continue
		}
		select { // not acknowledged: WhatsApp sends it again later
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (w *waWorld) inbound(e *events.Message) {
	w.mu.Lock()
	w.pending = append(w.pending, e)
	w.mu.Unlock()
	w.poke()
}

func (w *waWorld) message(r channeltest.Role, text string, ci *waE2E.ContextInfo) *events.Message {
	w.mu.Lock()
	id := w.nextID("IN")
	w.mu.Unlock()
	if w.chat.Server == types.GroupServer {
		if ci == nil {
			ci = &waE2E.ContextInfo{}
			text = "@" + botJID.User + " " + text
			ci.MentionedJID = []string{botJID.String()}
		}
	}
	e := textEvent(id, people[r], w.chat, text, ci)
	e.Info.PushName = r.String()
	return e
}

func (w *waWorld) Identity(r channeltest.Role) core.IdentityID {
	return core.IdentityID("whatsapp:" + people[r].User)
}

func (w *waWorld) NewChannel(t testing.TB, state core.StateStore, log *slog.Logger) core.Channel {
	c := &waConn{w: w, wa: whatsmeow.NewClient(&store.Device{ID: &botJID}, nil)}
	a, err := New(Config{Client: c, Cards: w.cards, State: state, Logger: log, Limits: confLimits,
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (w *waWorld) Started(testing.TB, core.Channel) {}

func (w *waWorld) Say(_ testing.TB, r channeltest.Role, text string) {
	w.inbound(w.message(r, text, nil))
}

func (w *waWorld) Reply(t testing.TB, r channeltest.Role, m channeltest.Message, text string) bool {
	ci := &waE2E.ContextInfo{StanzaID: proto.String(m.ID), Participant: proto.String(botJID.String()),
		QuotedMessage: &waE2E.Message{Conversation: proto.String(m.Text)}}
	w.inbound(w.message(r, text, ci))
	return true
}

// Tap votes on the poll that offers m's choices, or in numbered mode
// replies to m with the choice's number.
func (w *waWorld) Tap(t testing.TB, r channeltest.Role, m channeltest.Message, choice string) {
	if w.cards == CardsNumbered {
		for _, l := range choiceRe.FindAllStringSubmatch(m.Text, -1) {
			if l[3] == choice {
				w.Reply(t, r, m, l[1])
				return
			}
		}
		t.Fatalf("message %s offers no %q", m.ID, choice)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	poll, opt := w.pollFor(m.Text, choice)
	if poll == nil {
		t.Fatalf("no poll offers %q for message %s", choice, m.ID)
	}
	id := w.nextID("VOTE")
	w.votes[id] = &waE2E.PollVoteMessage{SelectedOptions: whatsmeow.HashPollOptions([]string{opt})}
	msg := &waE2E.Message{PollUpdateMessage: &waE2E.PollUpdateMessage{
		PollCreationMessageKey: &waCommon.MessageKey{RemoteJID: proto.String(w.chat.String()), FromMe: proto.Bool(true), ID: proto.String(poll.id)},
		Vote:                   &waE2E.PollEncValue{EncPayload: []byte("ciphertext"), EncIV: make([]byte, 12)}}}
	e := &events.Message{Info: types.MessageInfo{MessageSource: types.MessageSource{Chat: w.chat, Sender: people[r], IsGroup: w.chat.Server == types.GroupServer},
		ID: id, Timestamp: time.Now()}, Message: msg, RawMessage: msg}
	w.pending = append(w.pending, e)
	w.poke()
}

// pollFor finds the newest poll whose options are the choices text shows,
// and the option for choice.
func (w *waWorld) pollFor(text, choice string) (*waMsg, string) {
	lines := choiceRe.FindAllStringSubmatch(text, -1)
	var names []string
	opt := ""
	for _, l := range lines {
		n := truncate(l[1]+". "+l[2], maxPollOption)
		names = append(names, n)
		if l[3] == choice {
			opt = n
		}
	}
	for i := len(w.msgs) - 1; i >= 0; i-- {
		if m := w.msgs[i]; m.poll != nil && equal(m.poll, names) {
			return m, opt
		}
	}
	return nil, ""
}

func (w *waWorld) Chat(testing.TB) []channeltest.Message {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []channeltest.Message
	for _, m := range w.msgs {
		if m.revoked || m.poll != nil {
			continue // a poll is shown as the buttons of its card
		}
		cm := channeltest.Message{ID: m.id, Text: m.text, Edits: m.edits}
		lines := choiceRe.FindAllStringSubmatch(m.text, -1)
		if len(lines) > 0 {
			w.cardOf[m.id] = cards.ID(lines[0][4])
		}
		cm.Card = w.cardOf[m.id]
		if w.cards == CardsNumbered {
			for _, l := range lines {
				cm.Buttons = append(cm.Buttons, channeltest.Button{Label: l[1] + ". " + l[2], Choice: l[3]})
			}
		} else if p, _ := w.pollFor(m.text, ""); p != nil && len(lines) > 0 {
			for i, l := range lines {
				cm.Buttons = append(cm.Buttons, channeltest.Button{Label: p.poll[i], Choice: l[3]})
			}
		}
		if l := linkRe.FindStringSubmatch(m.text); l != nil && strings.Contains(l[1], "/s/") {
			cm.Buttons = append(cm.Buttons, channeltest.Button{Label: "link", URL: l[1]})
		}
		if cm.Card != "" {
			switch s := statusRe.FindStringSubmatch(m.text); {
			case s != nil:
				cm.Status = cards.Status(s[1])
			case len(cm.Choices()) > 0 && contains(cm.Choices(), "confirm"):
				cm.Status = cards.StatusConfirming
			case len(cm.Choices()) > 0:
				cm.Status = cards.StatusPending
			}
		}
		out = append(out, cm)
	}
	return out
}

// TapAnswers: a vote or a reply has no answer of its own on WhatsApp.
func (w *waWorld) TapAnswers(testing.TB, channeltest.Role) (int, bool) { return 0, false }

func (w *waWorld) Told(t testing.TB, _ channeltest.Role) []string {
	var out []string
	for _, m := range w.Chat(t) {
		if m.Card == "" {
			out = append(out, m.Text)
		}
	}
	return out
}

func (w *waWorld) RateLimit(testing.TB, int) bool { return false }

func (w *waWorld) Violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.viol...)
}

func (w *waWorld) MaxTextLen() int { return MaxMessageLen }

// waConn is one device connection: the adapter's Client.
type waConn struct {
	w  *waWorld
	wa *whatsmeow.Client // whatsmeow's message builders

	mu        sync.Mutex
	handlers  []func(any) bool
	connected bool
}

func (c *waConn) Connect(context.Context) error {
	c.w.mu.Lock()
	if c.w.deaf {
		c.w.mu.Unlock()
		return errors.New("fake: the server does not answer (deaf)")
	}
	if old := c.w.conn; old != nil && old != c {
		old.mu.Lock()
		old.connected = false
		old.mu.Unlock()
	}
	c.w.conn = c
	n := len(c.w.pending)
	c.w.mu.Unlock()
	c.mu.Lock()
	c.connected = true
	c.mu.Unlock()
	c.emit(&events.Connected{})
	c.emit(&events.OfflineSyncPreview{Total: n, Messages: n})
	c.w.poke()
	return nil
}

func (c *waConn) Disconnect() {
	c.w.mu.Lock()
	if c.w.conn == c {
		c.w.conn = nil
	}
	c.w.mu.Unlock()
	c.mu.Lock()
	c.connected = false
	c.mu.Unlock()
}

func (c *waConn) IsConnected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected
}

func (c *waConn) Own() (types.JID, types.JID) { return botJID, types.JID{} }

func (c *waConn) SendMessage(_ context.Context, to types.JID, m *waE2E.Message) (whatsmeow.SendResponse, error) {
	if !c.IsConnected() {
		return whatsmeow.SendResponse{}, whatsmeow.ErrNotConnected
	}
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if to != w.chat {
		return whatsmeow.SendResponse{}, fmt.Errorf("unexpected chat %s", to)
	}
	now := time.Now()
	if l, ok := w.last[to.String()]; ok && now.Sub(l) < confLimits.PerChatInterval-10*time.Millisecond {
		w.viol = append(w.viol, fmt.Sprintf("two messages to %s within %s", to, now.Sub(l)))
	}
	w.last[to.String()] = now
	if pm := m.GetEditedMessage().GetMessage().GetProtocolMessage(); pm != nil && pm.GetType() == waE2E.ProtocolMessage_MESSAGE_EDIT {
		t := w.byID[pm.GetKey().GetID()]
		if t == nil || t.poll != nil {
			return whatsmeow.SendResponse{}, fmt.Errorf("edit of unknown message %s", pm.GetKey().GetID())
		}
		t.text = pm.GetEditedMessage().GetConversation()
		t.edits++
		return whatsmeow.SendResponse{ID: w.nextID("EDIT"), Timestamp: now}, nil
	}
	if pm := m.GetProtocolMessage(); pm != nil && pm.GetType() == waE2E.ProtocolMessage_REVOKE {
		if t := w.byID[pm.GetKey().GetID()]; t != nil {
			t.revoked = true
		}
		return whatsmeow.SendResponse{ID: w.nextID("REV"), Timestamp: now}, nil
	}
	id := w.nextID("3EB0")
	if err := w.record(id, m); err != nil {
		return whatsmeow.SendResponse{}, err
	}
	return whatsmeow.SendResponse{ID: id, Timestamp: now}, nil
}

// record applies a message the bot sent (a text, a poll, an edit, a
// revoke) to the chat as a person sees it. The caller holds w.mu.
func (w *waWorld) record(id string, m *waE2E.Message) error {
	if pm := m.GetEditedMessage().GetMessage().GetProtocolMessage(); pm != nil && pm.GetType() == waE2E.ProtocolMessage_MESSAGE_EDIT {
		t := w.byID[pm.GetKey().GetID()]
		if t == nil || t.poll != nil {
			return fmt.Errorf("edit of unknown message %s", pm.GetKey().GetID())
		}
		t.text = pm.GetEditedMessage().GetConversation()
		t.edits++
		return nil
	}
	if pm := m.GetProtocolMessage(); pm != nil && pm.GetType() == waE2E.ProtocolMessage_REVOKE {
		if t := w.byID[pm.GetKey().GetID()]; t != nil {
			t.revoked = true
		}
		return nil
	}
	msg := &waMsg{id: id}
	switch {
	case m.GetConversation() != "":
		msg.text = m.GetConversation()
	case m.GetExtendedTextMessage() != nil:
		msg.text = m.GetExtendedTextMessage().GetText()
	case m.GetPollCreationMessageV3() != nil || m.GetPollCreationMessage() != nil:
		p := m.GetPollCreationMessageV3()
		if p == nil {
			p = m.GetPollCreationMessage()
		}
		msg.text = p.GetName()
		for _, o := range p.GetOptions() {
			msg.poll = append(msg.poll, o.GetOptionName())
		}
	default:
		return fmt.Errorf("unexpected message %v", m)
	}
	if len([]rune(msg.text)) > MaxMessageLen {
		w.viol = append(w.viol, "message over 65536 characters")
	}
	w.msgs = append(w.msgs, msg)
	w.byID[msg.id] = msg
	return nil
}

func (c *waConn) BuildPollCreation(name string, o []string, n int) *waE2E.Message {
	return c.wa.BuildPollCreation(name, o, n)
}
func (c *waConn) BuildEdit(ch types.JID, id types.MessageID, m *waE2E.Message) *waE2E.Message {
	return c.wa.BuildEdit(ch, id, m)
}
func (c *waConn) BuildRevoke(ch, s types.JID, id types.MessageID) *waE2E.Message {
	return c.wa.BuildRevoke(ch, s, id)
}
func (c *waConn) DecryptPollVote(_ context.Context, e *events.Message) (*waE2E.PollVoteMessage, error) {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	v, ok := c.w.votes[e.Info.ID]
	if !ok {
		return nil, fmt.Errorf("no message secret for vote %s", e.Info.ID)
	}
	return v, nil
}
func (c *waConn) PNForLID(context.Context, types.JID) (types.JID, error) { return types.JID{}, nil }
func (c *waConn) AddEventHandler(h func(any) bool) {
	c.mu.Lock()
	c.handlers = append(c.handlers, h)
	c.mu.Unlock()
}

func (c *waConn) emit(evt any) bool {
	if !c.IsConnected() {
		return false
	}
	c.mu.Lock()
	hs := append([]func(any) bool(nil), c.handlers...)
	c.mu.Unlock()
	ok := true
	for _, h := range hs {
		ok = h(evt) && ok
	}
	return ok
}

func (c *waConn) SendTyping(context.Context, types.JID, bool) error { return nil }
