//go:build !race

// Not built with -race: see realclient_test.go.

package whatsapp

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/webchat"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/storetest"
)

// TestRealClientLoggedOutOwnerNotifiedViaWebChat: the gateway as `silas serve`
// wires it — real engine on PostgreSQL, the web chat and the WhatsApp
// channel (real whatsmeow client on the fake server), the adapter's Notify
// connected to gateway.NotifyOwners. The owner has used the web chat. The
// server logs the device out (stream error 401 device_removed, as when it
// is removed on the phone): the owner finds a notice in the web chat
// saying what happened and what to do; WhatsApp does not retry; a restart
// that finds the device still missing does not repeat the notice.
func TestRealClientLoggedOutOwnerNotifiedViaWebChat(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	dsn := storetest.NewDatabase(t)
	st, err := store.Open(ctx, dsn, store.Options{MaxConns: 8, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	r := newRealRig(t, dsn, log)

	web, err := webchat.New(webchat.Config{Identity: "webchat:local", Outputs: st, State: st, Transcript: st, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	var eng *gateway.Gateway
	notify := func(ctx context.Context, text string) {
		if _, err := eng.NotifyOwners(ctx, "whatsapp", text); err != nil {
			t.Errorf("NotifyOwners: %v", err)
		}
	}
	wa, err := New(Config{Client: r.cli, State: st, Logger: log, Notify: notify, Limits: kitLimitsFast(), ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sbDir := t.TempDir()
	sb, err := sandbox.New(sandbox.Config{BaseDir: sbDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	pol, err := policy.Build(policy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	eng, err = gateway.New(gateway.Config{Store: st, Channels: []core.Channel{web, wa}, Agent: agent.Command{}, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}, AllowedDirs: []string{sbDir}},
		Policy:   pol, Key: key, Owners: []core.IdentityID{"webchat:local", "whatsapp:" + core.IdentityID(owner.User)},
		OutboxMaxBackoff: time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ectx, stop := context.WithCancel(ctx)
	engDone := make(chan struct{})
	go func() { defer close(engDone); _ = eng.Run(ectx, time.Second) }()
	t.Cleanup(func() { stop(); <-engDone })
	<-eng.Ready()
	go func() { _ = web.Run(ectx, eng) }()

	// The owner once talked to Silas in the web chat (as the browser's
	// frame would deliver it).
	if _, err := eng.Deliver(ctx, core.Turn{Channel: "webchat", Conversation: web.Conversation(), Sender: "webchat:local", SenderName: "you",
		EventID: "w-1", ChatKind: core.ChatDirect, Text: "/whoami", Evidence: core.Evidence{Authenticated: true, Method: "webchat-session"}}); err != nil {
		t.Fatal(err)
	}
	r.run(t, wa, eng)
	// …and on WhatsApp: a WhatsApp conversation is never told about
	// WhatsApp's own problem.
	if err := r.srv.SendText(ctx, r.phone, r.dev, "3EB0CCCC0001", "/whoami"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the WhatsApp turn answered", func() bool { return len(r.srv.Received()) == 1 })

	r.srv.StreamError("401", "device_removed")
	notices := func() []string {
		rows, err := st.Pool().Query(ctx, `SELECT channel, conversation, payload->>'text' FROM outbox
			WHERE status = 'delivered' AND message_key LIKE 'n-%' ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var ch, conv, text string
			if err := rows.Scan(&ch, &conv, &text); err != nil {
				t.Fatal(err)
			}
			out = append(out, ch+" "+conv+" "+text)
		}
		return out
	}
	eventually(t, "the owner told in the web chat", func() bool { return len(notices()) > 0 })
	got := notices()
	if len(got) != 1 || !strings.HasPrefix(got[0], "webchat webchat:local WhatsApp: WhatsApp logged Silas's linked device out") ||
		!strings.Contains(got[0], "silas whatsapp link") {
		t.Fatalf("notices %q", got)
	}
	if p := wa.Status().Problem; !strings.Contains(p, "logged") {
		t.Fatalf("status problem %q", p)
	}
	if p, _, _ := st.GetState(ctx, "whatsapp", "problem"); !strings.Contains(p, "logged") {
		t.Fatalf("recorded problem %q (silas doctor shows it)", p)
	}
	time.Sleep(300 * time.Millisecond) // a retry would have logged in again by now
	if n := r.srv.Logins(); n != 1 {
		t.Fatalf("%d logins after a logout; want no retry", n)
	}

	// A restart with the device gone: "not linked", recorded, not told
	// again (the owner already knows).
	// (The fake's phone shares the device store, so look the device up
	// by its JID; serve would find no device at all.)
	if d, err := r.ds.container.GetDevice(ctx, r.devJID); err != nil || d != nil {
		t.Fatalf("whatsmeow kept the removed device (%v)", err)
	}
	again, err := New(Config{Client: NewClient(r.ds.container.NewDevice(), log), State: st, Logger: log, Notify: notify})
	if err != nil {
		t.Fatal(err)
	}
	actx, astop := context.WithCancel(ctx)
	aDone := make(chan struct{})
	go func() { defer close(aDone); _ = again.Run(actx, eng) }()
	eventually(t, "not linked reported", func() bool { return strings.Contains(again.Status().Problem, "No WhatsApp device is linked") })
	astop()
	<-aDone
	time.Sleep(100 * time.Millisecond)
	if n := len(notices()); n != 1 {
		t.Fatalf("%d notices after the restart; want the first only", n)
	}
}
