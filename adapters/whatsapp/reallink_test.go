//go:build !race

// Not built with -race: see realclient_test.go.

package whatsapp

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mau.fi/whatsmeow/types"

	"github.com/silas-gateway/silas/adapters/channeltest"
	"github.com/silas-gateway/silas/adapters/whatsapp/whatsapptest"
	"github.com/silas-gateway/silas/internal/pgtest"
)

// recPage is a QRPage that records what it was shown.
type recPage struct {
	mu    sync.Mutex
	codes []string
	done  string
}

func (p *recPage) SetCode(code string) error {
	p.mu.Lock()
	p.codes = append(p.codes, code)
	p.mu.Unlock()
	return nil
}
func (p *recPage) Done(msg string) { p.mu.Lock(); p.done = msg; p.mu.Unlock() }

// TestRealClientLinksThenServes is the first `silas serve` without a
// device, on the fake server: the channel offers linking (Config.Link →
// Link with the channel's own unlinked device), the QR code goes to the
// terminal and the page, the account's phone scans it (the fake signs the
// device identity as WhatsApp's primary device does), whatsmeow verifies
// it, stores the device in PostgreSQL and logs in; the page says "linked
// as +… ✓"; the channel then connects with the new device and the owner's
// message is a turn.
func TestRealClientLinksThenServes(t *testing.T) {
	realConfMu.Lock()
	defer realConfMu.Unlock()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	ds, err := OpenDeviceStore(ctx, pgtest.NewDatabase(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	pd := ds.container.NewDevice()
	pj := owner
	pd.ID, pd.Account = &pj, rigAccount()
	if err := pd.Save(ctx); err != nil {
		t.Fatal(err)
	}
	phone := whatsapptest.Phone{JID: pj, Store: pd}
	srv := whatsapptest.NewServer(t)
	srv.AddPhone(phone)

	dev := ds.container.NewDevice() // nothing linked yet
	cli := NewClient(dev, log)
	cli.(waClient).WA().SetWebsocketHTTPClient(srv.HTTPClient())
	page := &recPage{}
	shown := make(chan string, 16)
	in := &recInbox{}
	a, err := New(Config{Client: cli, Logger: log, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		Link: func(ctx context.Context) error {
			_, err := Link(ctx, nil, LinkOptions{Device: dev, Out: io.Discard, Logger: log, Page: page, httpClient: srv.HTTPClient(),
				ShowQR: func(code string) { shown <- code }})
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(rctx, in) }()
	defer func() { cancel(); <-done }()

	var code string
	select {
	case code = <-shown:
	case <-time.After(30 * time.Second):
		t.Fatal("no QR code shown")
	}
	page.mu.Lock()
	onPage := len(page.codes) > 0 && page.codes[0] == code
	page.mu.Unlock()
	if !onPage {
		t.Fatalf("the page did not get the terminal's code %q", code)
	}
	if err := srv.ScanQR(code, botJID, "123456789012345", 9); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := srv.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the channel connected with the new device", func() bool { return a.Status().Connected })
	page.mu.Lock()
	msg := page.done
	page.mu.Unlock()
	if msg != "linked as +"+botJID.User+" ✓" {
		t.Fatalf("page says %q", msg)
	}
	saved, err := ds.container.GetDevice(ctx, types.NewADJID(botJID.User, 0, 9))
	if err != nil || saved == nil || saved.LID.User != "123456789012345" {
		t.Fatalf("the linked device in PostgreSQL: %+v, %v", saved, err)
	}

	if err := srv.SendText(ctx, phone, dev, "3EB0ABCD0001", "/whoami"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the owner's message as a turn", func() bool { return len(in.all()) == 1 && srv.Receipts("3EB0ABCD0001") == 1 })
	if tr := in.all()[0]; string(tr.Sender) != "whatsapp:"+owner.User || tr.Text != "/whoami" {
		t.Fatalf("turn %+v", tr)
	}
	if a.Status().Problem != "" {
		t.Fatalf("problem %q", a.Status().Problem)
	}

	// `silas whatsapp unlink`: logged out on WhatsApp's side, then the
	// keys are gone from PostgreSQL (whatsmeow deletes them only after
	// the server accepted the logout).
	cancel()
	<-done
	// The rig's phone keeps its keys in the same store; a real one holds
	// only Silas's device.
	if err := pd.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := unlink(ctx, ds, false, log, srv.HTTPClient()); err != nil {
		t.Fatalf("unlink: %v", err)
	}
	if gone, err := ds.container.GetDevice(ctx, types.NewADJID(botJID.User, 0, 9)); err != nil || gone != nil {
		t.Fatalf("after unlink the device is still stored: %+v, %v", gone, err)
	}
	if err := unlink(ctx, ds, false, log, srv.HTTPClient()); err == nil || !strings.Contains(err.Error(), "no device is linked") {
		t.Fatalf("a second unlink: %v", err)
	}
}

// `silas whatsapp link --phone +…`: instead of a QR code, whatsmeow asks
// WhatsApp for a pairing code for that number and Link shows it with what
// to do on the phone. (The phone's confirmation of the code is not
// simulated by the fake; QR linking covers the rest of the flow.)
func TestRealClientPairingCode(t *testing.T) {
	realConfMu.Lock()
	defer realConfMu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	ds, err := OpenDeviceStore(ctx, pgtest.NewDatabase(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	srv := whatsapptest.NewServer(t)
	out := &channeltest.SyncBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := Link(ctx, nil, LinkOptions{Phone: "+49 151 0000 0009", Device: ds.container.NewDevice(), Out: out, Logger: log,
			httpClient: srv.HTTPClient(), ShowQR: func(string) { t.Error("a QR code was shown for a pairing-code link") }})
		done <- err
	}()
	codeRe := regexp.MustCompile(`\n    ([A-Z0-9]{4}-[A-Z0-9]{4})\n`)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("output:\n%s", out)
		}
	})
	eventually(t, "the pairing code", func() bool { return codeRe.MatchString(out.String()) || len(done) > 0 })
	if len(done) > 0 {
		t.Fatalf("Link returned %v; output:\n%s", <-done, out)
	}
	if !strings.Contains(out.String(), "On the phone of +4915100000009: WhatsApp → Settings → Linked devices") {
		t.Fatalf("output:\n%s", out)
	}
	if got := srv.PairingCodeRequests(); len(got) != 1 || got[0] != "4915100000009" {
		t.Fatalf("pairing code requests = %v", got)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Link did not return after its context ended")
	}
}
