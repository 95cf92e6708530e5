// Package channeltest is the conformance suite every channel adapter
// passes: one set of scenarios — a reply, a card decided by a tap and edited
// in place, a tap answered exactly once with the card, a replayed tap, a
// refused tap, an expired card, the text
// fallback, a burst across an abrupt restart, a 429 storm, a secure-input
// link, an oversized reply, a restart in the middle of an execution — run
// through the real engine (wired as `silas serve` wires it) on a real
// PostgreSQL database (internal/pgtest; the schema is migrated once per test
// binary and copied, see internal/storetest) against the adapter and a fake
// of its platform.
//
// Each adapter's tests implement Platform over their fake (the Telegram
// Bot API fake, a WebSocket client for the web chat, …) and call Run from a
// test in a package whose TestMain calls pgtest.Main. The suite asks only
// what a person in the chat could see: the messages with their current text
// and buttons, the notices a tapper was shown.
//
// It must never reach the internet, and it never checks timing: it waits
// for outcomes (with generous deadlines) and checks counts and contents.
package channeltest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/background"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowrun"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/storetest"
)

// Role is a person in the chat, as the suite names them.
type Role int

const (
	// Approver is configured as an owner: the one who may decide cards.
	Approver Role = iota
	// Other is someone else in the same chat (Options.Shared), who may
	// not decide the Approver's cards.
	Other
)

func (r Role) String() string {
	if r == Approver {
		return "approver"
	}
	return "other"
}

// Button is one button of a message as the platform shows it.
type Button struct {
	Label string
	// Choice is the card choice the button sends; empty for a link.
	Choice string
	// URL is a link button's target.
	URL string
}

// Message is one message of the bot as the platform holds it now.
type Message struct {
	// ID is the platform's id of the message.
	ID string
	// Text is what a person sees (markup parsed).
	Text string
	// Card is the card the message shows, when it shows one (the platform
	// view may learn it from the buttons: it stays known once they go).
	Card cards.ID
	// Status is the card's state as shown; empty for plain text.
	Status cards.Status
	// Buttons are the message's current buttons.
	Buttons []Button
	// Edits counts edits of the message.
	Edits int
	// MaxLen is the platform's limit of this message's text when it is not
	// MaxTextLen (Discord: an embed holds more than a message's content);
	// 0 means MaxTextLen.
	MaxLen int
}

// Choices are the choice ids of the message's buttons, in order.
func (m Message) Choices() []string {
	var out []string
	for _, b := range m.Buttons {
		if b.Choice != "" {
			out = append(out, b.Choice)
		}
	}
	return out
}

// Link is the URL of the message's first link button.
func (m Message) Link() string {
	for _, b := range m.Buttons {
		if b.URL != "" {
			return b.URL
		}
	}
	return ""
}

// Options shape the chat of one scenario.
type Options struct {
	// Scenario names the scenario the platform is built for.
	Scenario string
	// Shared asks for a chat both the Approver and Other are in.
	Shared bool
}

// Platform is one adapter over a fake of its platform, as the suite drives
// it. Methods take the scenario's testing.TB and fail it on their own
// errors.
type Platform interface {
	// Identity is the core identity of a person.
	Identity(r Role) core.IdentityID
	// NewChannel builds a new adapter instance on the same fake platform:
	// called at every (re)start of the gateway. state is the store.
	NewChannel(t testing.TB, state core.StateStore, log *slog.Logger) core.Channel
	// Started runs once the new channel's Run has begun (the web chat
	// signs in and connects here, and resends what was not acknowledged).
	Started(t testing.TB, ch core.Channel)
	// Say sends text as person r into the chat. It does not wait: while
	// the gateway is down the platform keeps the message (or the client
	// resends it) as the real one would.
	Say(t testing.TB, r Role, text string)
	// Reply sends text quoting message m; false when the platform cannot.
	Reply(t testing.TB, r Role, m Message, text string) bool
	// Tap presses the button of m that sends choice, as person r. m may be
	// a stale view (a replayed tap on buttons that are gone by now).
	Tap(t testing.TB, r Role, m Message, choice string)
	// Chat is the platform's current view of the bot's messages, oldest
	// first.
	Chat(t testing.TB) []Message
	// Told is every notice person r was shown after their taps: a toast,
	// an ephemeral reply, or the bot's text messages in the chat.
	Told(t testing.TB, r Role) []string
	// RateLimit makes the platform answer the next n messages (sends and
	// edits) with 429 and a short retry-after; false when it has no such
	// limit.
	RateLimit(t testing.TB, n int) bool
	// Violations are the platform's rate limits the adapter broke.
	Violations() []string
	// MaxTextLen is the platform's limit of one message's text in
	// characters; 0 for none.
	MaxTextLen() int
	// TapAnswers counts the answers the platform received to person r's
	// taps, each answer that carries a notice counted once however it came
	// (a toast, an interaction's ephemeral response or follow-up, an
	// ephemeral message, a tap_result), and every attempt counted, also
	// one the platform refused as answered already. ok is false on a
	// platform where a tap has no answer of its own (WhatsApp: the card's
	// edit and, for a refusal, a message are what a tapper sees).
	TapAnswers(t testing.TB, r Role) (n int, ok bool)
}

// NativeCommands is a Platform where people give Silas commands the
// platform's own way (Discord's slash commands, Slack's /silas); the
// commands scenario uses it when the Platform implements it, and typed
// "/name arg" otherwise.
type NativeCommands interface {
	// Registered is the command names the adapter registered with the
	// platform; nil when the platform keeps no list (Slack's one /silas).
	Registered(t testing.TB) []string
	// Command invokes command name (catalog name, no slash) with arg as
	// person r.
	Command(t testing.TB, r Role, name, arg string)
}

// Deafener is a Platform whose fake can stop delivering events while the
// connection stays open (and start again): the deaf-channel scenario uses
// it, and is skipped on a platform without it.
type Deafener interface {
	Deafen(t testing.TB, deaf bool)
}

// Factory builds the platform of one scenario, or returns a reason to skip
// the scenario on this platform.
type Factory func(t *testing.T, o Options) (p Platform, skip string)

// Clock is the gateway's clock: real time plus an offset a scenario
// advances (to let a card expire without waiting for it).
type Clock struct{ off atomic.Int64 }

// Now is time.Now plus the offset.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// secretBase is where secure-input links of the suite's gateway point.
const secretBase = "https://secrets.conformance.test/s/"

// world is one deployment: a fake platform, a database, keys and a sandbox
// directory that survive restarts of the gateway (node).
type world struct {
	t      *testing.T
	p      Platform
	ctx    context.Context
	dsn    string
	db     *store.Store
	key    ed25519.PrivateKey
	sealer *secrets.Sealer
	sbDir  string
	clock  *Clock
	logs   *SyncBuffer
	node   *node
	// routed: the gateway also runs the elsewhere channel (elsewhere.go),
	// whose owner is an owner, and the Other person is allowed (auth).
	routed    bool
	elsewhere *elsewhere
	// deafAfter, when set, turns the channel-health check on (core/health)
	// with this threshold.
	deafAfter time.Duration
	// flows, when set, runs the flow runtime with these flow files (and
	// its step jobs in the background room, as serve does).
	flows fs.FS
}

type node struct {
	w       *world
	st      *store.Store
	sb      *sandbox.Subprocess
	eng     *gateway.Gateway
	ch      core.Channel
	stopCh  context.CancelFunc
	stopEng context.CancelFunc
	chDone  chan struct{}
	engDone chan struct{}
	// room runs the engine's periodic work (card expiry, the outbox's
	// recovery scan) on River, as serve does.
	room *background.Room
	once sync.Once
}

func newWorld(t *testing.T, p Platform) *world {
	t.Helper()
	w := &world{t: t, p: p, ctx: context.Background(), sbDir: t.TempDir(), clock: &Clock{}, logs: &SyncBuffer{}}
	w.dsn = storetest.NewDatabase(t)
	db, err := store.Open(w.ctx, w.dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.db = db
	if _, w.key, err = ed25519.GenerateKey(rand.Reader); err != nil {
		t.Fatal(err)
	}
	sk, err := secrets.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if w.sealer, err = secrets.NewSealer(sk); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if w.node != nil {
			w.node.stop(true)
		}
		if !t.Failed() {
			if _, err := w.db.VerifyAudit(w.ctx); err != nil {
				t.Errorf("audit chain: %v", err)
			}
		}
		w.db.Close()
		if t.Failed() {
			logs := w.logs.String()
			if len(logs) > 30000 {
				logs = "…" + logs[len(logs)-30000:]
			}
			t.Logf("gateway log:\n%s", logs)
		}
	})
	return w
}

// start runs a gateway the way `silas serve` wires one: store, sandbox,
// policy, engine; the channel starts once the engine is ready. grace is
// the engine's shutdown grace.
func (w *world) start(grace time.Duration) *node {
	w.t.Helper()
	n := w.startAway(grace)
	w.p.Started(w.t, n.ch)
	return n
}

// startAway starts a gateway while the people are away: the platform's
// Started (the web chat's connect) is left to the caller, to show what a
// person finds when they come back.
func (w *world) startAway(grace time.Duration) *node {
	t := w.t
	t.Helper()
	if w.node != nil {
		t.Fatal("a gateway is already running")
	}
	log := slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st, err := store.Open(w.ctx, w.dsn, store.Options{MaxConns: 16, Now: w.clock.Now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: w.sbDir})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Build(policy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ch := w.p.NewChannel(t, st, log)
	chans, owners := []core.Channel{ch}, []core.IdentityID{w.p.Identity(Approver)}
	var allowed []core.IdentityID
	if w.routed {
		if w.elsewhere == nil {
			w.elsewhere = &elsewhere{}
		}
		chans, owners, allowed = append(chans, w.elsewhere), append(owners, elsewhereOwner), []core.IdentityID{w.p.Identity(Other)}
	}
	var flows *flowrun.Config
	if w.flows != nil {
		flows = &flowrun.Config{Catalog: flowrun.Dirs{Sources: []flow.Source{{Label: "conformance", FS: w.flows}}}, Sweep: time.Second}
	}
	eng, err := gateway.New(gateway.Config{
		Store: st, Channels: chans, Agent: agent.Command{}, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}, AllowedDirs: []string{w.sbDir}},
		Policy:   pol, Key: w.key, Owners: owners, Allowed: allowed,
		OutboxMaxBackoff: 2 * time.Second, Logger: log, Now: w.clock.Now, DeafAfter: w.deafAfter,
		Sealer: w.sealer, SecretLink: func(ref, token string) string { return secretBase + ref + "#" + token },
		Flows: flows,
	})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{w: w, st: st, sb: sb, eng: eng, ch: ch, chDone: make(chan struct{}), engDone: make(chan struct{})}
	engCtx, stopEng := context.WithCancel(w.ctx)
	n.stopEng = stopEng
	go func() {
		defer close(n.engDone)
		if err := eng.Run(engCtx, grace); err != nil {
			t.Errorf("engine.Run: %v", err)
		}
	}()
	select {
	case <-eng.Ready():
	case <-n.engDone:
		t.Fatal("the engine stopped before it was ready")
	case <-time.After(30 * time.Second):
		t.Fatal("the engine is not ready after 30s")
	}
	periodic := eng.Maintenance()
	if w.deafAfter > 0 {
		periodic = append(periodic, eng.HealthJobs()...)
	}
	bc := background.Config{Pool: st.Pool(), Periodic: periodic, Logger: log, Testing: true, PollInterval: 200 * time.Millisecond}
	if w.flows != nil {
		bc.Workers = river.NewWorkers()
		bc.Queues = eng.Jobs(bc.Workers)
	}
	room, err := background.New(bc)
	if err == nil {
		err = room.Start(w.ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	n.room = room
	chCtx, stopCh := context.WithCancel(w.ctx)
	n.stopCh = stopCh
	go func() {
		defer close(n.chDone)
		if err := ch.Run(chCtx, eng); err != nil {
			t.Errorf("%s Run: %v", ch.Name(), err)
		}
	}()
	w.node = n
	return n
}

// stop ends the gateway. Graceful: intake first, then the engine with its
// grace. Abrupt (kill): both at once, so what is in flight is cut (start
// the node with a tiny grace) and left for the next start.
func (n *node) stop(graceful bool) {
	n.once.Do(func() {
		n.stopCh()
		if graceful {
			waitClosed(n.w.t, "channel Run", n.chDone)
		}
		n.stopEng()
		waitClosed(n.w.t, "channel Run", n.chDone)
		waitClosed(n.w.t, "engine.Run", n.engDone)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if !graceful {
			cancel() // a kill: running jobs are cut, not waited for
		}
		_ = n.room.Stop(ctx)
		cancel()
		n.sb.Close()
		n.st.Close()
		if n.w.node == n {
			n.w.node = nil
		}
	})
}

func (n *node) kill() { n.stop(false) }

func waitClosed(t testing.TB, what string, c chan struct{}) {
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not return within 30s", what)
	}
}

// eventually polls cond until it holds, failing the test after d.
func (w *world) eventually(what string, d time.Duration, cond func() (bool, string)) {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out after %s waiting for %s: %s", d, what, detail)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// count runs a count(*) query on the test's own connection.
func (w *world) count(q string, args ...any) int {
	w.t.Helper()
	var n int
	if err := w.db.Pool().QueryRow(w.ctx, q, args...).Scan(&n); err != nil {
		w.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// waitMessage waits for a bot message satisfying pred.
func (w *world) waitMessage(what string, pred func(Message) bool) Message {
	w.t.Helper()
	var got Message
	w.eventually(what, 30*time.Second, func() (bool, string) {
		msgs := w.p.Chat(w.t)
		for _, m := range msgs {
			if pred(m) {
				got = m
				return true, ""
			}
		}
		return false, dump(msgs)
	})
	return got
}

// waitCard waits for the open card proposing command.
func (w *world) waitCard(command string) Message {
	w.t.Helper()
	return w.waitMessage("an open card for "+command, func(m Message) bool {
		return m.Card != "" && m.Status == cards.StatusPending && len(m.Choices()) > 0 && strings.Contains(m.Text, command)
	})
}

// waitSame waits until the message with id (the same platform message)
// satisfies pred.
func (w *world) waitSame(id, what string, pred func(Message) bool) Message {
	w.t.Helper()
	return w.waitMessage(what, func(m Message) bool { return m.ID == id && pred(m) })
}

// waitTold waits for a notice to r containing s.
func (w *world) waitTold(r Role, s string) {
	w.t.Helper()
	w.eventually(fmt.Sprintf("the %s to be told %q", r, s), 30*time.Second, func() (bool, string) {
		told := w.p.Told(w.t, r)
		for _, n := range told {
			if strings.Contains(n, s) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("told %q", told)
	})
}

func dump(msgs []Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "\n  #%s card=%s status=%s edits=%d buttons=%v: %q", m.ID, m.Card, m.Status, m.Edits, m.Buttons, m.Text)
	}
	if b.Len() == 0 {
		return "(no messages)"
	}
	return b.String()
}

// closed reports a card in a final state with no buttons left.
func closed(m Message, statuses ...cards.Status) bool {
	if len(m.Buttons) != 0 {
		return false
	}
	for _, s := range statuses {
		if m.Status == s {
			return true
		}
	}
	return false
}

// SyncBuffer collects log output that concurrent goroutines write while a
// test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
