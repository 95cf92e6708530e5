//go:build !race

// Not built with -race: see realclient_test.go (a data race inside
// whatsmeow's FrameSocket on every Disconnect).
//
// Every test in a !race file is named TestRealClient…: `make test` runs
// this package's non-race pass with -run '^TestRealClient' (the other
// tests already ran with -race), so a test named otherwise never runs.

package whatsapp

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waAdv"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"

	"github.com/silas-gateway/silas/adapters/whatsapp/whatsapptest"
	"github.com/silas-gateway/silas/core"
)

// realRig is the real whatsmeow client of a linked device on the fake
// server, with one phone that knows it.
type realRig struct {
	ds  *DeviceStore
	dev *store.Device
	// devJID is the device's JID (dev.ID is cleared when whatsmeow
	// deletes a logged-out device).
	devJID types.JID
	srv    *whatsapptest.Server
	phone  whatsapptest.Phone
	cli    Client
}

var rigAccount = func() *waAdv.ADVSignedDeviceIdentity {
	return &waAdv.ADVSignedDeviceIdentity{Details: []byte("d"), AccountSignature: make([]byte, 64), AccountSignatureKey: make([]byte, 32), DeviceSignature: make([]byte, 64)}
}

// newRealRig links a device (dsn: a database; the device store lives in
// its schema whatsmeow) and starts the fake. Scenarios over the fake run
// one at a time (realConfMu: it replaces whatsmeow's certificate root).
func newRealRig(t *testing.T, dsn string, log *slog.Logger) *realRig {
	t.Helper()
	realConfMu.Lock()
	t.Cleanup(realConfMu.Unlock)
	ctx := context.Background()
	ds, err := OpenDeviceStore(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	dev, err := ds.Device(ctx)
	if err != nil {
		t.Fatal(err)
	}
	devJID := types.NewADJID(botJID.User, 0, 7)
	dev.ID, dev.Account = &devJID, rigAccount()
	if err := dev.Save(ctx); err != nil {
		t.Fatal(err)
	}
	pd := ds.container.NewDevice()
	pj := owner
	pd.ID, pd.Account = &pj, rigAccount()
	if err := pd.Save(ctx); err != nil {
		t.Fatal(err)
	}
	r := &realRig{ds: ds, dev: dev, devJID: devJID, srv: whatsapptest.NewServer(t), phone: whatsapptest.Phone{JID: pj, Store: pd}}
	r.srv.AddPhone(r.phone)
	r.cli = NewClient(dev, log)
	r.cli.(waClient).WA().SetWebsocketHTTPClient(r.srv.HTTPClient())
	return r
}

// run starts a on in and waits until the device logged in.
// adapter is an adapter on the rig's client that reconnects quickly.
func (r *realRig) adapter(t *testing.T, log *slog.Logger) *Adapter {
	t.Helper()
	a, err := New(Config{Client: r.cli, Logger: log, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (r *realRig) run(t *testing.T, a *Adapter, in core.Inbox) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, in) }()
	t.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := r.srv.WaitReady(wctx); err != nil {
		t.Fatalf("the device did not log in and upload prekeys: %v", err)
	}
	eventually(t, "Connected", func() bool { return a.Status().Connected })
}

// fastKeepalives makes whatsmeow ping every 50-100ms and give up on a
// ping after 300ms (package variables; restored after the test).
func fastKeepalives(t *testing.T) {
	minI, maxI, dl := whatsmeow.KeepAliveIntervalMin, whatsmeow.KeepAliveIntervalMax, whatsmeow.KeepAliveResponseDeadline
	whatsmeow.KeepAliveIntervalMin, whatsmeow.KeepAliveIntervalMax, whatsmeow.KeepAliveResponseDeadline = 50*time.Millisecond, 100*time.Millisecond, 300*time.Millisecond
	t.Cleanup(func() {
		whatsmeow.KeepAliveIntervalMin, whatsmeow.KeepAliveIntervalMax, whatsmeow.KeepAliveResponseDeadline = minI, maxI, dl
	})
}
