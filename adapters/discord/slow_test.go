package discord

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/discord/discordtest"
	"github.com/silas-gateway/silas/core"
)

// slowInbox stores nothing and does not return until released, as a
// database that is stuck.
type slowInbox struct {
	release chan struct{}
	n       atomic.Int64
}

func (s *slowInbox) Deliver(ctx context.Context, _ core.Turn) (core.DeliverResult, error) {
	s.n.Add(1)
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return core.DeliverResult{}, nil
}

// TestInteractionsAnsweredWithin3s: with a core that has not stored either
// turn yet, a slash command and a tap are answered anyway, within
// Discord's 3 s (the fake refuses and records a later answer): the command
// with its visible record, the tap with a deferred update. No wall-clock
// bound of the test's own: both answers must arrive while both deliveries
// are still blocked, however long the machine takes.
func TestInteractionsAnsweredWithin3s(t *testing.T) {
	t.Parallel()
	srv := discordtest.NewServer(t)
	a, err := New(Config{Token: discordtest.Token, ApplicationID: discordtest.AppID, BaseURL: srv.BaseURL})
	if err != nil {
		t.Fatal(err)
	}
	in := &slowInbox{release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, in) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); !srv.Connected(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no gateway session")
		}
	}
	user := discordtest.User{ID: "1300000000000000001", Username: "olive"}
	dm := srv.DM(user.ID)
	cmd := srv.Command(user, dm, "run", [2]string{"command", "echo slow"})
	card := discordtest.Message{ID: "1200000000000000500", ChannelID: dm}
	tap := srv.Tap(user, card, "c:dqkc53c53bi4vzkowpdi4w34xm:approve")
	got := map[string]discordtest.Callback{}
	for deadline := time.Now().Add(30 * time.Second); len(got) < 2 || in.n.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("answers %v with %d deliveries blocked; want both interactions answered", got, in.n.Load())
		}
		for _, c := range srv.Callbacks() {
			got[c.Interaction] = c
		}
	}
	close(in.release) // only now may the store finish
	if c, ok := got[cmd]; !ok || c.Type != 4 || !strings.Contains(c.Data["content"].(string), "/run echo slow") {
		t.Errorf("slash command answered %+v (%v); want its record (type 4)", c, ok)
	}
	if c, ok := got[tap]; !ok || c.Type != 6 {
		t.Errorf("tap answered %+v (%v); want a deferred update (type 6)", c, ok)
	}
	if v := srv.Violations(); len(v) > 0 {
		t.Errorf("violations: %q", v)
	}
	if in.n.Load() != 2 {
		t.Errorf("deliveries = %d; want 2", in.n.Load())
	}
}

// TestDoctorAgainstFake: silas doctor's checks against the fake API: the
// token, the application id, GET /gateway/bot and the command
// registration, which a start writes once and a restart leaves alone.
func TestDoctorAgainstFake(t *testing.T) {
	t.Parallel()
	srv := discordtest.NewServer(t)
	ctx := context.Background()
	cfg := Config{Token: discordtest.Token, ApplicationID: discordtest.AppID, BaseURL: srv.BaseURL}
	findings := func(c Config) map[string]Finding {
		out := map[string]Finding{}
		for _, f := range Doctor(ctx, c) {
			out[f.Check] = f
		}
		return out
	}
	f := findings(cfg)
	for _, c := range []string{"token", "application", "gateway"} {
		if f[c].Severity != SeverityOK {
			t.Errorf("%s: %+v; want OK", c, f[c])
		}
	}
	if !strings.Contains(f["gateway"].Message, "ws://") || !strings.Contains(f["token"].Message, discordtest.BotID) {
		t.Errorf("gateway %q, token %q", f["gateway"].Message, f["token"].Message)
	}
	if f["commands"].Severity != SeverityInfo || !strings.Contains(f["commands"].Message, "differ") {
		t.Errorf("commands before registration: %+v", f["commands"])
	}
	if srv.CommandPuts() != 0 {
		t.Fatalf("doctor wrote commands")
	}
	// A start registers the commands once; a restart writes nothing.
	for i, want := range []bool{true, false, false} {
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		changed, err := a.syncCommands(ctx)
		if err != nil || changed != want {
			t.Fatalf("start %d: changed %v, %v; want %v", i, changed, err, want)
		}
	}
	if n := srv.CommandPuts(); n != 1 {
		t.Errorf("commands written %d times; want once", n)
	}
	if f := findings(cfg); f["commands"].Severity != SeverityOK {
		t.Errorf("commands after registration: %+v", f["commands"])
	}

	wrongApp := cfg
	wrongApp.ApplicationID = "1100000000000000099"
	if f := findings(wrongApp); f["application"].Severity != SeverityError || !strings.Contains(f["application"].Message, "discord.application_id") {
		t.Errorf("wrong application id: %+v", f["application"])
	}
	badToken := cfg
	badToken.Token = "MTEx.other-token.0123456789abcdef0123"
	if f := findings(badToken); f["token"].Severity != SeverityError {
		t.Errorf("refused token: %+v", f["token"])
	}
	// A refused token and an unreachable Discord are told apart, and both
	// still print the invite URL (it needs only the application id).
	unreachable := cfg
	unreachable.BaseURL = closedURL(t)
	for _, tc := range []struct {
		name      string
		cfg       Config
		want, not string
	}{
		{"refused", badToken, "Discord refused the token", "cannot reach"},
		{"unreachable", unreachable, "cannot reach Discord at " + unreachable.BaseURL, "Reset Token"},
	} {
		f := findings(tc.cfg)
		if tok := f["token"]; tok.Severity != SeverityError || !strings.Contains(tok.Message, tc.want) || strings.Contains(tok.Message, tc.not) {
			t.Errorf("%s: token finding %+v; want an error saying %q, not %q", tc.name, tok, tc.want, tc.not)
		}
		if inv := f["invite"]; inv.Message != InviteURL(discordtest.AppID) {
			t.Errorf("%s: invite finding %+v; want %s", tc.name, inv, InviteURL(discordtest.AppID))
		}
	}
	if f := findings(Config{Token: discordtest.Token, ApplicationID: "x", BaseURL: srv.BaseURL}); f["config"].Severity != SeverityError {
		t.Errorf("bad config: %+v", f)
	}
}

// closedURL is an http:// address on this host where nothing listens (a
// listener opened and closed again), so a request fails to connect without
// leaving the machine.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/api/v10"
}

// TestZombieLimit: with Discord's heartbeat interval (41.25 s) a
// connection without ACKs is replaced within about 50 s of the last ACK,
// and before the interval is known after ZombieAfter (50 s).
func TestZombieLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		interval time.Duration
		want     time.Duration
	}{
		{"interval unknown", 0, 50 * time.Second},
		{"discord", 41250 * time.Millisecond, 50 * time.Second},
		{"short interval", 300 * time.Millisecond, 450 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := zombieLimit(50*time.Second, tc.interval); got != tc.want {
				t.Errorf("zombieLimit = %s; want %s", got, tc.want)
			}
		})
	}
}

func TestClientCloseCode(t *testing.T) {
	t.Parallel()
	mask := []byte{0x12, 0x34, 0x56, 0x78}
	frame := func(code int) []byte {
		b := []byte{0x88, 0x82, mask[0], mask[1], mask[2], mask[3], byte(code>>8) ^ mask[0], byte(code) ^ mask[1]}
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		code int
		ok   bool
	}{
		{"1000", frame(1000), 1000, true},
		{"4000", frame(4000), 4000, true},
		{"text frame", []byte{0x81, 0x82, 1, 2, 3, 4, 5, 6}, 0, false},
		{"unmasked", []byte{0x88, 0x02, 0x03, 0xe8}, 0, false},
		{"short", []byte{0x88}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, ok := clientCloseCode(tc.b)
			if code != tc.code || ok != tc.ok {
				t.Errorf("clientCloseCode = %d, %v; want %d, %v", code, ok, tc.code, tc.ok)
			}
		})
	}
}

// TestNoReconnectChurnAfterOutage: a failed Open is followed by Close,
// which makes discordgo emit a Disconnect although nothing was connected.
// That signal must not end the next, healthy connection: after Discord
// comes back the adapter connects and identifies once, and stays.
// Checked to fail: without draining the stale signal before Open, the
// fresh connection is dropped at once and a second session identifies
// after an ErrWSAlreadyOpen (seen as ~30 s of silence under load).
func TestNoReconnectChurnAfterOutage(t *testing.T) {
	t.Parallel()
	srv := discordtest.NewServer(t)
	srv.Outage(true)
	a, err := New(Config{Token: discordtest.Token, ApplicationID: discordtest.AppID, BaseURL: srv.BaseURL,
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx, &slowInbox{release: make(chan struct{})}) }()
	defer func() { cancel(); <-done }()
	// Several refused attempts (each a failed Open and a Close).
	for deadline := time.Now().Add(10 * time.Second); srv.OutageHits() < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no gateway attempts during the outage (%d)", srv.OutageHits())
		}
	}
	srv.Outage(false)
	for deadline := time.Now().Add(10 * time.Second); !srv.Connected(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no gateway session after the outage: %+v", srv.Gateway())
		}
	}
	// With the reconnect backoff at 20–50 ms, churn would show within a
	// few backoffs; a second is many of them.
	time.Sleep(time.Second)
	if g := srv.Gateway(); g.Connects != 1 || g.Identifies != 1 || !srv.Connected() {
		t.Errorf("after the outage: %+v, connected %v; want one connect, one IDENTIFY, still connected", g, srv.Connected())
	}
}
