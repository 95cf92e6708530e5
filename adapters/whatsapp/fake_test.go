package whatsapp

import (
	"context"
	"errors"
	"fmt"
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

	"github.com/silas-gateway/silas/core"
)

// fakeWA is the Client port over a recorder: what the adapter sends is
// kept; events are whatsmeow's own types, handed to the handler the way
// whatsmeow's dispatcher does (ack = the handler's answer). The message
// builders are whatsmeow's real ones (a client that never connects).
type fakeWA struct {
	wa  *whatsmeow.Client
	own types.JID

	mu        sync.Mutex
	handlers  []func(any) bool
	sent      []sentMsg
	n         int
	connected bool
	connects  int
	lids      map[types.JID]types.JID
	votes     map[string]*waE2E.PollVoteMessage
	acks      map[string]int // message id → times acknowledged
	typing    []types.JID
	notLinked bool
}

type sentMsg struct {
	to  types.JID
	id  string
	msg *waE2E.Message
}

var ownJID = types.NewJID("4915100000001", types.DefaultUserServer)

func newFakeWA(t *testing.T) *fakeWA {
	dev := &store.Device{ID: &ownJID}
	return &fakeWA{wa: whatsmeow.NewClient(dev, nil), own: ownJID, lids: map[types.JID]types.JID{},
		votes: map[string]*waE2E.PollVoteMessage{}, acks: map[string]int{}}
}

func (f *fakeWA) Connect(context.Context) error {
	f.mu.Lock()
	if f.notLinked {
		f.connects++
		f.mu.Unlock()
		return ErrNotLinked
	}
	f.connected = true
	f.connects++
	f.mu.Unlock()
	f.emit(&events.Connected{})
	return nil
}
func (f *fakeWA) Disconnect() { f.mu.Lock(); f.connected = false; f.mu.Unlock() }
func (f *fakeWA) IsConnected() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.connected
}
func (f *fakeWA) Own() (types.JID, types.JID) { return f.own, types.JID{} }
func (f *fakeWA) SendMessage(_ context.Context, to types.JID, m *waE2E.Message) (whatsmeow.SendResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.connected {
		return whatsmeow.SendResponse{}, whatsmeow.ErrNotConnected
	}
	f.n++
	id := fmt.Sprintf("3EB0%012d", f.n)
	f.sent = append(f.sent, sentMsg{to, id, m})
	return whatsmeow.SendResponse{ID: id, Timestamp: time.Now()}, nil
}
func (f *fakeWA) BuildPollCreation(name string, o []string, n int) *waE2E.Message {
	return f.wa.BuildPollCreation(name, o, n)
}
func (f *fakeWA) BuildEdit(c types.JID, id types.MessageID, m *waE2E.Message) *waE2E.Message {
	return f.wa.BuildEdit(c, id, m)
}
func (f *fakeWA) BuildRevoke(c, s types.JID, id types.MessageID) *waE2E.Message {
	return f.wa.BuildRevoke(c, s, id)
}

// DecryptPollVote stands in for whatsmeow's decryption with the poll's
// message secret: the test registers the plaintext vote under the vote
// message's id.
func (f *fakeWA) DecryptPollVote(_ context.Context, e *events.Message) (*waE2E.PollVoteMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.votes[e.Info.ID]
	if !ok {
		return nil, errors.New("failed to decrypt poll vote: no message secret")
	}
	return v, nil
}
func (f *fakeWA) PNForLID(_ context.Context, lid types.JID) (types.JID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lids[lid], nil
}
func (f *fakeWA) AddEventHandler(h func(any) bool) {
	f.mu.Lock()
	f.handlers = append(f.handlers, h)
	f.mu.Unlock()
}

// emit dispatches an event like whatsmeow's dispatcher; it reports whether
// every handler succeeded (whatsmeow then sends the receipt).
func (f *fakeWA) emit(evt any) bool {
	f.mu.Lock()
	hs := append([]func(any) bool(nil), f.handlers...)
	f.mu.Unlock()
	ok := true
	for _, h := range hs {
		ok = h(evt) && ok
	}
	if m, isMsg := evt.(*events.Message); isMsg && ok {
		f.mu.Lock()
		f.acks[m.Info.ID]++
		f.mu.Unlock()
	}
	return ok
}

func (f *fakeWA) sentMsgs() []sentMsg {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sentMsg(nil), f.sent...)
}

// textEvent is a real *events.Message carrying text from a person.
func textEvent(id string, from, chat types.JID, text string, ci *waE2E.ContextInfo) *events.Message {
	m := &waE2E.Message{Conversation: proto.String(text)}
	if ci != nil {
		m = &waE2E.Message{ExtendedTextMessage: &waE2E.ExtendedTextMessage{Text: proto.String(text), ContextInfo: ci}}
	}
	return &events.Message{Info: types.MessageInfo{
		MessageSource: types.MessageSource{Chat: chat, Sender: from, IsGroup: chat.Server == types.GroupServer},
		ID:            id, PushName: "Owner", Timestamp: time.Unix(1_800_000_000, 0)}, Message: m, RawMessage: m}
}

// voteEvent is a real poll-update message on poll pollID.
func voteEvent(id string, from, chat types.JID, pollID string) *events.Message {
	m := &waE2E.Message{PollUpdateMessage: &waE2E.PollUpdateMessage{
		PollCreationMessageKey: &waCommon.MessageKey{RemoteJID: proto.String(chat.String()), FromMe: proto.Bool(true), ID: proto.String(pollID)},
		Vote:                   &waE2E.PollEncValue{EncPayload: []byte("ciphertext"), EncIV: make([]byte, 12)},
	}}
	return &events.Message{Info: types.MessageInfo{
		MessageSource: types.MessageSource{Chat: chat, Sender: from, IsGroup: chat.Server == types.GroupServer},
		ID:            id, Timestamp: time.Unix(1_800_000_000, 0)}, Message: m, RawMessage: m}
}

// recInbox is a core.Inbox that stores turns unique on the event id, as
// the core's inbox does.
type recInbox struct {
	mu    sync.Mutex
	turns []core.Turn
	seen  map[string]bool
	fail  error
}

func (r *recInbox) Deliver(_ context.Context, t core.Turn) (core.DeliverResult, error) {
	if err := t.Validate(); err != nil {
		return core.DeliverResult{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return core.DeliverResult{}, r.fail
	}
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	if r.seen[t.EventID] {
		return core.DeliverResult{Duplicate: true}, nil
	}
	r.seen[t.EventID] = true
	r.turns = append(r.turns, t)
	return core.DeliverResult{Seq: int64(len(r.turns))}, nil
}

func (r *recInbox) all() []core.Turn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]core.Turn(nil), r.turns...)
}

var limitsFast = kitLimitsFast()

func (f *fakeWA) SendTyping(_ context.Context, chat types.JID, on bool) error {
	f.mu.Lock()
	f.typing = append(f.typing, chat)
	f.mu.Unlock()
	return nil
}
