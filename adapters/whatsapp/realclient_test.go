//go:build !race

// Not built with -race: whatsmeow's FrameSocket reads its closed flag in
// readPump (socket/framesocket.go:215) without the lock Close writes it
// under (:70), so every Disconnect of a real client is reported as a data
// race inside whatsmeow. The adapter's own code is race-tested by the
// port-level tests and the conformance suite.

package whatsapp

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.mau.fi/whatsmeow/proto/waAdv"
	"go.mau.fi/whatsmeow/types"

	"github.com/silas-gateway/silas/adapters/whatsapp/whatsapptest"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// TestRealClientReceivesThroughFakeServer runs the real whatsmeow client
// (NewClient, as serve would build it) against whatsapptest: TLS
// websocket, Noise handshake under the fake's certificate chain, login
// with the device from the PostgreSQL device store, prekey upload. A phone
// sends a Signal-encrypted text; the adapter delivers it as a turn and
// only then does whatsmeow send the receipt. When storing fails, no
// receipt is sent; after the server drops the connection the adapter
// reconnects on its own, and the message sent again is stored and
// acknowledged.
func TestRealClientReceivesThroughFakeServer(t *testing.T) {
	ctx := context.Background()
	ds, err := OpenDeviceStore(ctx, pgtest.NewDatabase(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	account := func() *waAdv.ADVSignedDeviceIdentity {
		return &waAdv.ADVSignedDeviceIdentity{Details: []byte("d"), AccountSignature: make([]byte, 64), AccountSignatureKey: make([]byte, 32), DeviceSignature: make([]byte, 64)}
	}
	dev, err := ds.Device(ctx)
	if err != nil {
		t.Fatal(err)
	}
	devJID := types.NewADJID("4915100000001", 0, 5)
	dev.ID, dev.Account = &devJID, account()
	if err := dev.Save(ctx); err != nil {
		t.Fatal(err)
	}
	phoneDev := ds.container.NewDevice()
	phoneJID := types.NewJID("4915112345678", types.DefaultUserServer)
	phoneDev.ID, phoneDev.Account = &phoneJID, account()
	if err := phoneDev.Save(ctx); err != nil {
		t.Fatal(err)
	}
	phone := whatsapptest.Phone{JID: phoneJID, Store: phoneDev}

	srv := whatsapptest.NewServer(t)
	srv.AddPhone(phone)
	log := slog.New(slog.DiscardHandler)
	cli := NewClient(dev, log)
	wa := cli.(waClient).WA()
	wa.SetWebsocketHTTPClient(srv.HTTPClient())
	in := &recInbox{}
	a, err := New(Config{Client: cli, Logger: log, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(rctx, in) }()
	defer func() { cancel(); <-done }()

	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := srv.WaitReady(wctx); err != nil {
		t.Fatalf("the device did not log in and upload prekeys: %v", err)
	}
	eventually(t, "Connected", func() bool { return a.Status().Connected })

	if err := srv.SendText(ctx, phone, dev, "3EB0AAAA0001", "/whoami"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the turn", func() bool { return len(in.all()) == 1 })
	tr := in.all()[0]
	if tr.Sender != "whatsapp:4915112345678" || tr.Text != "/whoami" || tr.Evidence.Method != MethodE2E ||
		tr.Conversation != "whatsapp:4915112345678@s.whatsapp.net" || tr.EventID != "m4915112345678/3EB0AAAA0001" {
		t.Fatalf("turn %+v", tr)
	}
	eventually(t, "the receipt after the turn was stored", func() bool { return srv.Receipts("3EB0AAAA0001") == 1 })

	// The answer goes back through whatsmeow: device list, Signal
	// encryption to the phone's session, the server's ack.
	ref, err := a.Send(ctx, core.OutMessage{Conversation: tr.Conversation, Text: "You are whatsapp:4915112345678."})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	got := srv.Received()
	if len(got) != 1 || got[0].Message.GetConversation() != "You are whatsapp:4915112345678." || string(ref) != "4915112345678@s.whatsapp.net/"+got[0].ID {
		t.Fatalf("the phone received %+v (ref %s)", got, ref)
	}

	// Storing fails: no receipt.
	in.mu.Lock()
	in.fail = errors.New("database down")
	in.mu.Unlock()
	if err := srv.SendText(ctx, phone, dev, "3EB0AAAA0002", "hello"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := srv.Receipts("3EB0AAAA0002"); n != 0 || len(srv.OtherReceipts()) != 0 {
		t.Fatalf("%d receipts for a message whose turn was not stored (other receipts %v)", n, srv.OtherReceipts())
	}
	in.mu.Lock()
	in.fail = nil
	in.mu.Unlock()
	// The server drops the connection (as on a 408/428): the adapter
	// reconnects by itself, and the server sends the unacknowledged
	// message again — the same ciphertext, which the Signal session can no
	// longer decrypt; whatsmeow's decrypted-event buffer (kept in the
	// device store) still has its plaintext, so it is stored once.
	srv.DropConnection()
	eventually(t, "a second login", func() bool { return srv.Logins() >= 2 && a.Status().Connected })
	eventually(t, "the redelivered message stored and acknowledged", func() bool {
		return len(in.all()) == 2 && srv.Receipts("3EB0AAAA0002") == 1
	})
}
