package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mau.fi/whatsmeow/proto/waAdv"
	wastore "go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"

	"github.com/silas-gateway/silas/adapters/whatsapp"
	"github.com/silas-gateway/silas/adapters/whatsapp/whatsapptest"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/storetest"
)

// The silas binary built with -tags whatsappfake (the hook that lets
// WHATSAPPTEST_FAKE_SERVER point the channel at the fake server). TestMain
// starts its build in the background once the plain binary is built:
// built when the first test needing it started, each test waiting for it
// held one of the package's parallel slots for the whole build (over 20 s
// of a 35 s test under make test's load).
var (
	fakeBinOnce   sync.Once
	fakeBinDone   = make(chan struct{})
	fakeBin       string
	fakeBinErr    error
	fakeBinCancel context.CancelFunc
)

// whatsappFakeTests are the tests that run the whatsappfake binary.
var whatsappFakeTests = []string{"TestServeWhatsAppThroughFake", "TestClusterWhatsAppHandOver"}

// startWhatsAppFakeBuild starts the build unless it has started.
func startWhatsAppFakeBuild() {
	fakeBinOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		fakeBinCancel = cancel
		fakeBin = filepath.Join(filepath.Dir(silasBin), "silas-whatsappfake")
		go func() {
			defer close(fakeBinDone)
			fakeBinErr = buildSilas(ctx, fakeBin, "whatsappfake")
		}()
	})
}

// stopWhatsAppFakeBuild ends a build no test waited for (a -run that
// selected none of whatsappFakeTests' tests after all) and waits for it.
func stopWhatsAppFakeBuild() {
	if fakeBinCancel != nil {
		fakeBinCancel()
		<-fakeBinDone
	}
}

// whatsappFakeBinary waits for the whatsappfake binary (starting its
// build if TestMain did not).
func whatsappFakeBinary(t *testing.T) string {
	t.Helper()
	startWhatsAppFakeBuild()
	<-fakeBinDone
	if fakeBinErr != nil {
		t.Fatalf("building silas -tags whatsappfake: %v", fakeBinErr)
	}
	return fakeBin
}

// TestServeWhatsAppThroughFake runs the silas binary (built with the test
// hook) with WhatsApp enabled against whatsapptest's fake server: the
// owner's phone asks /whoami over WhatsApp and gets the answer through the
// real whatsmeow client inside serve; the owner also uses the web chat;
// then WhatsApp logs the device out, and the web chat shows the notice
// telling the owner what to do.
func TestServeWhatsAppThroughFake(t *testing.T) {
	t.Parallel()
	bin := whatsappFakeBinary(t)
	ctx := context.Background()
	dsn := storetest.NewDatabase(t)
	srv, phone, dev, hook := fakeWhatsApp(t, dsn)
	s := startBinary(t, bin, dsn, t.TempDir(), "SILAS_WHATSAPP_ENABLED=true", "WHATSAPPTEST_FAKE_SERVER="+hook,
		"SILAS_IDENTITIES_OWNERS=webchat:local,whatsapp:4915112345678")
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := srv.WaitReady(wctx); err != nil {
		t.Fatalf("serve's WhatsApp channel did not log in to the fake: %v\n%s", err, s.logs.String())
	}
	if err := srv.SendText(ctx, phone, dev, "3EB0F00D0001", "/whoami"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !receivedContaining(srv, "whatsapp:4915112345678") {
		if time.Now().After(deadline) {
			t.Fatalf("no answer on WhatsApp; the phone received %+v\n%s", srv.Received(), s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	c := s.connect(t)
	c.say("/whoami")
	c.expect("the web chat answer", func(f map[string]any) bool { return strings.Contains(fmt.Sprint(f["text"]), "You are webchat:local") })
	srv.StreamError("401", "device_removed")
	c.expect("the WhatsApp notice in the web chat", func(f map[string]any) bool {
		return strings.Contains(fmt.Sprint(f["text"]), "WhatsApp logged Silas's linked device out") &&
			strings.Contains(fmt.Sprint(f["text"]), "silas whatsapp link")
	})
}

// fakeWhatsApp gives dsn a linked device (in its schema whatsmeow) and
// starts whatsapptest's fake server with the owner's phone
// (4915112345678): hook is WHATSAPPTEST_FAKE_SERVER's value for a binary
// built with whatsappFakeBinary.
func fakeWhatsApp(t *testing.T, dsn string) (srv *whatsapptest.Server, phone whatsapptest.Phone, dev *wastore.Device, hook string) {
	t.Helper()
	ctx := context.Background()
	account := func() *waAdv.ADVSignedDeviceIdentity {
		return &waAdv.ADVSignedDeviceIdentity{Details: []byte("d"), AccountSignature: make([]byte, 64), AccountSignatureKey: make([]byte, 32), DeviceSignature: make([]byte, 64)}
	}
	// The gateway's linked device, in its database (schema whatsmeow).
	ds, err := whatsapp.OpenDeviceStore(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	dev, err = ds.Device(ctx)
	if err != nil {
		t.Fatal(err)
	}
	devJID := types.NewADJID("4915100000001", 0, 3)
	dev.ID, dev.Account = &devJID, account()
	if err := dev.Save(ctx); err != nil {
		t.Fatal(err)
	}
	// The owner's phone, with its Signal state in a database of its own.
	pds, err := whatsapp.OpenDeviceStore(ctx, storetest.NewDatabase(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pds.Close() })
	pdev, err := pds.Device(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pj := types.NewJID("4915112345678", types.DefaultUserServer)
	pdev.ID, pdev.Account = &pj, account()
	if err := pdev.Save(ctx); err != nil {
		t.Fatal(err)
	}
	phone = whatsapptest.Phone{JID: pj, Store: pdev}
	srv = whatsapptest.NewServer(t)
	srv.AddPhone(phone)
	root := srv.RootKey()
	hook = srv.Addr() + " " + base64.StdEncoding.EncodeToString(root[:]) + " " + base64.StdEncoding.EncodeToString(srv.Certificate().Raw)
	return srv, phone, dev, hook
}

func receivedContaining(srv *whatsapptest.Server, s string) bool {
	for _, r := range srv.Received() {
		if strings.Contains(r.Message.GetConversation()+r.Message.GetExtendedTextMessage().GetText(), s) {
			return true
		}
	}
	return false
}

// TestWhatsAppLinkQRForm: `silas whatsapp link` with secrets_web enabled
// serves the QR code on the secure form behind the one-time link it
// prints; the page follows the codes, ends with "linked as", and is gone
// when linking ends (the form stops with it).
func TestWhatsAppLinkQRForm(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.Secrets.KeyFile = filepath.Join(cfg.DataDir, "secrets.key")
	cfg.SecretsWeb.Enabled, cfg.SecretsWeb.Listen, cfg.SecretsWeb.PublicURL = true, addr, "https://"+addr
	var out syncBuffer
	log := slog.New(slog.DiscardHandler)
	page, stop := whatsappQRForm(context.Background(), &cliEnv{stdout: &out, stderr: io.Discard}, cfg, nil, log)
	if page == nil {
		t.Fatalf("no QR page: %s", out.String())
	}
	m := regexp.MustCompile(`(https://\S+/qr/\S+)`).FindStringSubmatch(out.String())
	if m == nil || !strings.Contains(out.String(), "fingerprint") {
		t.Fatalf("no one-time link printed: %q", out.String())
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed test certificate; the fingerprint is not what is tested
	if err := page.SetCode("2@a-code,noise,identity,adv"); err != nil {
		t.Fatal(err)
	}
	code, body := getPage(t, hc, m[1])
	src := regexp.MustCompile(`<img src="([^"]+)"`).FindStringSubmatch(body)
	if code != http.StatusOK || src == nil {
		t.Fatalf("page: %d %s", code, body)
	}
	if code, img := getPage(t, hc, "https://"+addr+strings.ReplaceAll(src[1], "&amp;", "&")); code != http.StatusOK || !strings.HasPrefix(img, "\x89PNG") {
		t.Fatalf("image: %d", code)
	}
	if code, _ := getPage(t, hc, m[1]+"x"); code != http.StatusNotFound {
		t.Fatalf("another token: %d", code)
	}
	page.Done("linked as +4915100000001 ✓")
	if code, body := getPage(t, hc, m[1]); code != http.StatusOK || !strings.Contains(html.UnescapeString(body), "linked as +4915100000001 ✓") {
		t.Fatalf("after linking: %d %s", code, body)
	}
	stop()
	if _, err := hc.Get(m[1]); err == nil {
		t.Fatal("the form still serves after linking ended")
	}
}
