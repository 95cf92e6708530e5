package whatsapp

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
)

// Client is the adapter's port to WhatsApp: the few whatsmeow calls it
// makes. whatsmeow stays behind it because WhatsApp's transport (a Noise
// handshake under a pinned certificate key, then Signal end-to-end
// sessions per device) cannot be faked by a small local server the way the
// Bot APIs of the other platforms are; tests drive the adapter through a
// fake Client with the real whatsmeow event and message values
// (docs/whatsapp.md, "Testing").
type Client interface {
	// Connect opens the websocket and logs in with the stored device.
	Connect(ctx context.Context) error
	// Disconnect closes the websocket (no logout).
	Disconnect()
	IsConnected() bool
	// Own is this device's phone-number JID and LID (either may be empty
	// before pairing).
	Own() (pn, lid types.JID)
	// SendMessage sends msg to a chat (whatsmeow.Client.SendMessage).
	SendMessage(ctx context.Context, to types.JID, msg *waE2E.Message) (whatsmeow.SendResponse, error)
	// BuildPollCreation, BuildEdit and BuildRevoke are whatsmeow's
	// message builders.
	BuildPollCreation(name string, options []string, selectable int) *waE2E.Message
	BuildEdit(chat types.JID, id types.MessageID, content *waE2E.Message) *waE2E.Message
	BuildRevoke(chat, sender types.JID, id types.MessageID) *waE2E.Message
	// DecryptPollVote decrypts a vote on one of our polls with the poll's
	// message secret (kept in the device store when the poll was sent).
	DecryptPollVote(ctx context.Context, vote *events.Message) (*waE2E.PollVoteMessage, error)
	// PNForLID maps a LID to its phone-number JID through whatsmeow's LID
	// store; an empty JID when the mapping is unknown.
	PNForLID(ctx context.Context, lid types.JID) (types.JID, error)
	// SendTyping shows (or stops showing) "typing…" in a chat.
	SendTyping(ctx context.Context, chat types.JID, on bool) error
	// AddEventHandler registers h. whatsmeow acknowledges a message to
	// the server only after h returned true for it (SynchronousAck);
	// false leaves it unacknowledged, so WhatsApp delivers it again.
	AddEventHandler(h func(evt any) bool)
}

// ErrNotLinked: the device store holds no linked device (never linked, or
// WhatsApp logged it out and whatsmeow deleted it).
var ErrNotLinked = errors.New("whatsapp: no linked device: run `silas whatsapp link`")

// waClient is Client over a real *whatsmeow.Client.
type waClient struct{ c *whatsmeow.Client }

// NewClient builds the whatsmeow client of a linked device: acks only
// after the turn is stored (SynchronousAck), offline messages delivered as
// ordinary messages, reconnects left to the adapter (which reports the
// fatal cases instead of looping on them).
func NewClient(dev *store.Device, log *slog.Logger) Client {
	if log == nil {
		log = slog.Default()
	}
	c := whatsmeow.NewClient(dev, waLogger(log.With(slog.String("component", "whatsmeow"))))
	c.SynchronousAck = true
	// Keep each decrypted message (by ciphertext hash, in the device
	// store) until the handler succeeded: when storing the turn fails,
	// no receipt goes out and WhatsApp sends the same ciphertext again,
	// which the Signal ratchet can no longer decrypt — without this
	// buffer that message would be lost.
	c.EnableDecryptedEventBuffer = true
	// A send and a decryption must not interleave on a session
	// (sessionlock.go).
	lockSessions(dev)
	c.EnableAutoReconnect = false
	// History sync blobs are not turns: never download them.
	c.ManualHistorySyncDownload = true
	if testHTTPClient != nil {
		c.SetWebsocketHTTPClient(testHTTPClient)
		c.SetPreLoginHTTPClient(testHTTPClient)
	}
	return waClient{c}
}

// testHTTPClient is set only in test builds (-tags whatsappfake,
// fakehook.go) to reach the fake server; release builds leave it nil and
// pin WhatsApp's keys.
var testHTTPClient *http.Client

// WA returns the whatsmeow client (tests point it at the fake server).
func (w waClient) WA() *whatsmeow.Client { return w.c }

func (w waClient) Connect(ctx context.Context) error {
	if w.c.Store.ID == nil {
		return ErrNotLinked
	}
	return w.c.ConnectContext(ctx)
}
func (w waClient) Disconnect()       { w.c.Disconnect() }
func (w waClient) IsConnected() bool { return w.c.IsConnected() && w.c.IsLoggedIn() }
func (w waClient) Own() (types.JID, types.JID) {
	var pn types.JID
	if w.c.Store.ID != nil {
		pn = w.c.Store.ID.ToNonAD()
	}
	return pn, w.c.Store.GetLID().ToNonAD()
}
func (w waClient) SendMessage(ctx context.Context, to types.JID, m *waE2E.Message) (whatsmeow.SendResponse, error) {
	mu := deviceLock(w.c.Store)
	mu.Lock()
	defer mu.Unlock()
	return w.c.SendMessage(ctx, to, m)
}
func (w waClient) BuildPollCreation(name string, options []string, n int) *waE2E.Message {
	return w.c.BuildPollCreation(name, options, n)
}
func (w waClient) BuildEdit(chat types.JID, id types.MessageID, content *waE2E.Message) *waE2E.Message {
	return w.c.BuildEdit(chat, id, content)
}
func (w waClient) BuildRevoke(chat, sender types.JID, id types.MessageID) *waE2E.Message {
	return w.c.BuildRevoke(chat, sender, id)
}
func (w waClient) DecryptPollVote(ctx context.Context, v *events.Message) (*waE2E.PollVoteMessage, error) {
	return w.c.DecryptPollVote(ctx, v)
}
func (w waClient) PNForLID(ctx context.Context, lid types.JID) (types.JID, error) {
	return w.c.Store.LIDs.GetPNForLID(ctx, lid)
}
func (w waClient) SendTyping(ctx context.Context, chat types.JID, on bool) error {
	state := types.ChatPresencePaused
	if on {
		state = types.ChatPresenceComposing
	}
	return w.c.SendChatPresence(ctx, chat, state, types.ChatPresenceMediaText)
}
func (w waClient) AddEventHandler(h func(any) bool) { w.c.AddEventHandlerWithSuccessStatus(h) }
