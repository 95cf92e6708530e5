//go:build !race

// Not built with -race: see realclient_test.go (a data race inside
// whatsmeow's FrameSocket on every Disconnect).

package whatsapp

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.mau.fi/whatsmeow/proto/waAdv"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	"google.golang.org/protobuf/proto"

	"github.com/silas-gateway/silas/adapters/channeltest"
	"github.com/silas-gateway/silas/adapters/whatsapp/whatsapptest"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// realConfMu: the fake replaces whatsmeow's certificate root, a package
// variable, so scenarios over it run one at a time.
var realConfMu sync.Mutex

// TestRealClientConformance runs the conformance suite through the real
// engine AND the real whatsmeow client (NewClient, as serve builds it) on
// the fake server: every message is Signal-encrypted between a phone and
// the device, cards arrive as text plus a poll, votes are encrypted with
// the poll's secret by whatsmeow on the phone's side and decrypted by the
// adapter with DecryptPollVote, results are edits.
func TestRealClientConformance(t *testing.T) {
	channeltest.Run(t, func(t *testing.T, o channeltest.Options) (channeltest.Platform, string) {
		switch {
		case o.Shared:
			return nil, "the fake server has no groups (sender keys, group metadata)"
		case o.Scenario == "replayed_tap":
			return nil, "WhatsApp polls have no repeated tap; refused votes other than a non-approver's are silent by design"
		}
		realConfMu.Lock()
		t.Cleanup(realConfMu.Unlock)
		return newRealWorld(t), ""
	})
}

// realWorld is channeltest.Platform over whatsapptest: the chat as the
// approver's phone sees it, rebuilt from what the phone decrypted.
type realWorld struct {
	view  *waWorld // the chat model (texts, polls, edits) and its view
	srv   *whatsapptest.Server
	ds    *DeviceStore
	phone whatsapptest.Phone

	mu      sync.Mutex
	applied int
	n       int
}

func newRealWorld(t *testing.T) *realWorld {
	ctx := context.Background()
	ds, err := OpenDeviceStore(ctx, pgtest.NewDatabase(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	account := func() *waAdv.ADVSignedDeviceIdentity {
		return &waAdv.ADVSignedDeviceIdentity{Details: []byte("d"), AccountSignature: make([]byte, 64), AccountSignatureKey: make([]byte, 32), DeviceSignature: make([]byte, 64)}
	}
	dev, err := ds.Device(ctx)
	if err != nil {
		t.Fatal(err)
	}
	devJID := types.NewADJID(botJID.User, 0, 4)
	dev.ID, dev.Account = &devJID, account()
	if err := dev.Save(ctx); err != nil {
		t.Fatal(err)
	}
	pd := ds.container.NewDevice()
	pj := people[channeltest.Approver]
	pd.ID, pd.Account = &pj, account()
	if err := pd.Save(ctx); err != nil {
		t.Fatal(err)
	}
	w := &realWorld{view: newWAWorld(t, channeltest.Options{}, CardsPoll), srv: whatsapptest.NewServer(t), ds: ds,
		phone: whatsapptest.Phone{JID: pj, Store: pd}}
	w.srv.AddPhone(w.phone)
	return w
}

func (w *realWorld) device(t testing.TB) *store.Device {
	d, err := w.ds.Device(context.Background())
	if err != nil || d.ID == nil {
		t.Fatalf("device: %v", err)
	}
	return d
}

func (w *realWorld) Identity(r channeltest.Role) core.IdentityID {
	return core.IdentityID("whatsapp:" + people[r].User)
}

func (w *realWorld) NewChannel(t testing.TB, state core.StateStore, log *slog.Logger) core.Channel {
	cli := NewClient(w.device(t), log)
	cli.(waClient).WA().SetWebsocketHTTPClient(w.srv.HTTPClient())
	a, err := New(Config{Client: cli, State: state, Logger: log, Limits: confLimits,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (w *realWorld) Started(t testing.TB, _ core.Channel) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.srv.WaitReady(ctx); err != nil {
		t.Fatalf("the device did not log in: %v", err)
	}
}

func (w *realWorld) send(t testing.TB, m *waE2E.Message) {
	w.mu.Lock()
	w.n++
	id := fmt.Sprintf("3A%014d", w.n)
	w.mu.Unlock()
	if err := w.srv.SendMessage(context.Background(), w.phone, w.device(t), id, m); err != nil {
		t.Fatal(err)
	}
}

func (w *realWorld) Say(t testing.TB, _ channeltest.Role, text string) {
	w.send(t, &waE2E.Message{Conversation: proto.String(text)})
}

func (w *realWorld) Reply(t testing.TB, _ channeltest.Role, m channeltest.Message, text string) bool {
	w.send(t, &waE2E.Message{ExtendedTextMessage: &waE2E.ExtendedTextMessage{Text: proto.String(text),
		ContextInfo: &waE2E.ContextInfo{StanzaID: proto.String(m.ID), Participant: proto.String(botJID.String()),
			QuotedMessage: &waE2E.Message{Conversation: proto.String(m.Text)}}}})
	return true
}

func (w *realWorld) Tap(t testing.TB, _ channeltest.Role, m channeltest.Message, choice string) {
	w.sync(t)
	w.view.mu.Lock()
	poll, opt := w.view.pollFor(m.Text, choice)
	w.view.mu.Unlock()
	if poll == nil {
		t.Fatalf("no poll offers %q for message %s", choice, m.ID)
	}
	w.mu.Lock()
	w.n++
	id := fmt.Sprintf("3A%014d", w.n)
	w.mu.Unlock()
	if err := w.srv.Vote(context.Background(), w.phone, w.device(t), id, poll.id, opt); err != nil {
		t.Fatal(err)
	}
}

// sync applies what the phone received since the last call.
func (w *realWorld) sync(t testing.TB) {
	got := w.srv.Received()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.view.mu.Lock()
	defer w.view.mu.Unlock()
	for ; w.applied < len(got); w.applied++ {
		r := got[w.applied]
		if err := w.view.record(r.ID, r.Message); err != nil {
			t.Errorf("phone received: %v", err)
		}
	}
}

func (w *realWorld) Chat(t testing.TB) []channeltest.Message {
	w.sync(t)
	return w.view.Chat(t)
}

// TapAnswers: a vote or a reply has no answer of its own on WhatsApp.
func (w *realWorld) TapAnswers(testing.TB, channeltest.Role) (int, bool) { return 0, false }

func (w *realWorld) Told(t testing.TB, r channeltest.Role) []string {
	w.sync(t)
	return w.view.Told(t, r)
}

func (w *realWorld) RateLimit(testing.TB, int) bool { return false }
func (w *realWorld) Violations() []string           { return nil }
func (w *realWorld) MaxTextLen() int                { return MaxMessageLen }
