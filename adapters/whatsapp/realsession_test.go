//go:build !race

// Not built with -race: see realclient_test.go.

package whatsapp

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.mau.fi/whatsmeow/store"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// TestRealClientSendDuringDecryption: a reply is sent while whatsmeow is
// decrypting the phone's next message on the same Signal session (the
// normal case in a burst: the outbox answers one message while the next
// arrives). The decryption loaded the session record before the send
// stored it; had it written the record back afterwards, the send's step
// of the sending chain would be lost and the next reply would reuse a
// chain counter the phone already used ("old counter": that reply never
// arrives). Both replies must reach the phone.
func TestRealClientSendDuringDecryption(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	r := newRealRig(t, pgtest.NewDatabase(t), log)
	hold := &holdingSessions{SessionStore: r.dev.Sessions, loaded: make(chan struct{}), release: make(chan struct{})}
	r.dev.Sessions = hold
	in := &recInbox{}
	a := r.adapter(t, log)
	r.run(t, a, in)
	conv := core.ConversationID("whatsapp:" + owner.String())

	// The first message sets the session up (a prekey message).
	if err := r.srv.SendText(ctx, r.phone, r.dev, "3EB0CCCC0001", "one"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first turn", func() bool { return len(in.all()) == 1 })

	// The second is decrypted while a reply is sent: the decryption is
	// held just after it loaded the session.
	hold.arm()
	if err := r.srv.SendText(ctx, r.phone, r.dev, "3EB0CCCC0002", "two"); err != nil {
		t.Fatal(err)
	}
	<-hold.loaded
	sent := make(chan error, 1)
	go func() {
		_, err := a.Send(ctx, core.OutMessage{Conversation: conv, Text: "reply one"})
		sent <- err
	}()
	// Release the decryption once the send is done — or, when the send
	// waits for the decryption (as it must), after a while.
	var err error
	select {
	case err = <-sent:
		close(hold.release)
	case <-time.After(2 * time.Second):
		close(hold.release)
		err = <-sent
	}
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	eventually(t, "the second turn", func() bool { return len(in.all()) == 2 })
	if _, err := a.Send(ctx, core.OutMessage{Conversation: conv, Text: "reply two"}); err != nil {
		t.Fatalf("send: %v", err)
	}
	var got []string
	for _, m := range r.srv.Received() {
		got = append(got, m.Message.GetConversation())
	}
	if len(got) != 2 || got[0] != "reply one" || got[1] != "reply two" {
		t.Fatalf("the phone decrypted %q; want both replies (see the fake's log for why not)", got)
	}
}

// holdingSessions is the device's session store; once armed, the next
// single-session load (a decryption's: sends prefetch with
// GetManySessions) is held until release.
type holdingSessions struct {
	store.SessionStore
	mu      sync.Mutex
	armed   bool
	loaded  chan struct{}
	release chan struct{}
}

func (h *holdingSessions) arm() {
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
}

func (h *holdingSessions) GetSession(ctx context.Context, address string) ([]byte, error) {
	b, err := h.SessionStore.GetSession(ctx, address)
	h.mu.Lock()
	armed := h.armed
	h.armed = false
	h.mu.Unlock()
	if armed {
		close(h.loaded)
		<-h.release
	}
	return b, err
}
