// Package e2e_test runs Silas end to end over Discord: the real engine, the
// real Discord adapter driving the real discordgo session, the fake REST
// API and gateway (discordtest) and a real PostgreSQL database per test.
package e2e_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/adapters/discord"
	"github.com/silas-gateway/silas/adapters/discord/discordtest"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/trust"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var (
	owner   = discordtest.User{ID: "1300000000000000001", Username: "olive"}
	sam     = discordtest.User{ID: "1300000000000000002", Username: "sam"}
	ownerID = core.IdentityID("discord:" + owner.ID)
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

type world struct {
	t     testing.TB
	srv   *discordtest.Server
	dsn   string
	db    *store.Store
	key   ed25519.PrivateKey
	sbDir string
	logs  *syncBuffer
	node  *node
	mode  string
	pub   ed25519.PublicKey
	ipriv ed25519.PrivateKey
	now   func() time.Time
	// cfg adjusts the adapter's configuration.
	cfg func(*discord.Config)
}

type node struct {
	st      *store.Store
	dc      *discord.Adapter
	stopDC  context.CancelFunc
	stopEng context.CancelFunc
	dcDone  chan struct{}
	engDone chan struct{}
	hs      *httptest.Server
}

func newWorld(t *testing.T, mode string) *world {
	t.Helper()
	return newWorldWith(t, mode, discordtest.DiscordLimits, nil)
}

func newWorldWith(t *testing.T, mode string, l discordtest.Limits, cfg func(*discord.Config)) *world {
	t.Helper()
	w := &world{t: t, logs: &syncBuffer{}, sbDir: t.TempDir(), mode: mode, cfg: cfg}
	w.srv = discordtest.NewServerWithLimits(t, l)
	w.dsn = storetest.NewDatabase(t)
	db, err := store.Open(context.Background(), w.dsn, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.db = db
	_, w.key, _ = ed25519.GenerateKey(rand.Reader)
	w.pub, w.ipriv, _ = ed25519.GenerateKey(rand.Reader)
	t.Cleanup(func() {
		if w.node != nil {
			w.stop()
		}
		w.db.Close()
		if strings.Contains(w.logs.String(), discordtest.Token) {
			t.Errorf("the bot token appears in the log")
		}
		if t.Failed() {
			l := w.logs.String()
			if len(l) > 30000 {
				l = "…" + l[len(l)-30000:]
			}
			t.Logf("log:\n%s", l)
		}
	})
	return w
}

func (w *world) start() *node {
	t := w.t
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, w.dsn, store.Options{MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: w.sbDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	pol, err := policy.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := discord.Config{Token: discordtest.Token, ApplicationID: discordtest.AppID, BaseURL: w.srv.BaseURL, Mode: w.mode,
		State: st, Logger: log, Now: w.now}
	if w.mode == discord.ModeHTTP {
		cfg.PublicKey = hex.EncodeToString(w.pub)
	}
	if w.cfg != nil {
		w.cfg(&cfg)
	}
	dc, err := discord.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := gateway.New(gateway.Config{
		Store: st, Channels: []core.Channel{dc}, Agent: agent.Command{}, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}}, Policy: pol, Key: w.key,
		Owners: []core.IdentityID{ownerID}, Access: map[core.ChannelName]trust.AccessPolicy{dc.Name(): trust.AccessPolicy("open")},
		OutboxMaxBackoff: 2 * time.Second, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{st: st, dc: dc, dcDone: make(chan struct{}), engDone: make(chan struct{})}
	ectx, stopEng := context.WithCancel(ctx)
	n.stopEng = stopEng
	go func() {
		defer close(n.engDone)
		if err := eng.Run(ectx, time.Second); err != nil {
			t.Errorf("engine.Run: %v", err)
		}
	}()
	<-eng.Ready()
	dctx, stopDC := context.WithCancel(ctx)
	n.stopDC = stopDC
	go func() {
		defer close(n.dcDone)
		if err := dc.Run(dctx, eng); err != nil {
			t.Errorf("discord.Run: %v", err)
		}
	}()
	if w.mode == discord.ModeHTTP {
		n.hs = httptest.NewServer(dc)
	}
	w.node = n
	return n
}

func (w *world) stop() {
	n := w.node
	n.stopDC()
	<-n.dcDone
	n.stopEng()
	<-n.engDone
	if n.hs != nil {
		n.hs.Close()
	}
	n.st.Close()
	w.node = nil
}

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

func (w *world) count(q string, args ...any) int {
	w.t.Helper()
	var n int
	if err := w.db.Pool().QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		w.t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (w *world) waitReady() {
	w.eventually("gateway READY", 15*time.Second, func() (bool, string) { return w.srv.Connected(), fmt.Sprintf("%+v", w.srv.Gateway()) })
}

// embedText is a message's embed titles and descriptions.
func embedText(m discordtest.Message) string {
	var b strings.Builder
	for _, e := range m.Embeds {
		fmt.Fprintf(&b, "%v\n%v\n", e["title"], e["description"])
	}
	return b.String()
}

// buttons lists a message's custom_ids (and labels).
func buttons(m discordtest.Message) map[string]string {
	out := map[string]string{}
	for _, row := range m.Components {
		cs, _ := row["components"].([]any)
		for _, c := range cs {
			b, _ := c.(map[string]any)
			id, _ := b["custom_id"].(string)
			label, _ := b["label"].(string)
			if id != "" {
				out[label] = id
			}
		}
	}
	return out
}

func (w *world) cardIn(ch, what string) discordtest.Message {
	var card discordtest.Message
	w.eventually(what, 15*time.Second, func() (bool, string) {
		for _, m := range w.srv.BotMessages(ch) {
			if len(buttons(m)) > 0 {
				card = m
				return true, ""
			}
		}
		return false, fmt.Sprintf("%v", w.srv.BotMessages(ch))
	})
	return card
}

func choice(t testing.TB, m discordtest.Message, prefix string) string {
	for label, id := range buttons(m) {
		if strings.HasPrefix(id, "c:") && strings.HasSuffix(id, ":"+prefix) {
			return id
		}
		_ = label
	}
	t.Fatalf("no %q button on %v", prefix, m)
	return ""
}

func (w *world) message(ch, id string) discordtest.Message {
	for _, m := range w.srv.Messages(ch) {
		if m.ID == id {
			return m
		}
	}
	return discordtest.Message{}
}

func (w *world) callback(ix string) (discordtest.Callback, bool) {
	for _, c := range w.srv.Callbacks() {
		if c.Interaction == ix {
			return c, true
		}
	}
	return discordtest.Callback{}, false
}

func (w *world) waitCallback(ix string) discordtest.Callback {
	var cb discordtest.Callback
	w.eventually("interaction "+ix+" answered", 10*time.Second, func() (bool, string) {
		var ok bool
		cb, ok = w.callback(ix)
		return ok, fmt.Sprintf("%v", w.srv.Callbacks())
	})
	return cb
}

// TestSlashRunTapUpdatesSameMessage: /run in a DM → card (embed with
// buttons, allowed_mentions empty) → approve tap answered with type 7 on
// the same message → the same message ends showing the verified result. A
// replayed tap runs nothing again; a non-approver's tap gets an ephemeral
// refusal (flags 64).
func TestSlashRunTapUpdatesSameMessage(t *testing.T) {
	t.Parallel()
	w := newWorld(t, discord.ModeGateway)
	w.start()
	w.waitReady()
	dm := w.srv.DM(owner.ID)
	ix := w.srv.Command(owner, dm, "run", [2]string{"command", "echo hi"})
	if cb := w.waitCallback(ix); cb.Type != 4 {
		t.Fatalf("slash command answered with type %d; want 4", cb.Type)
	}
	card := w.cardIn(dm, "approval card")
	if am := card.AllowedMentions; am == nil || len(am["parse"].([]any)) != 0 {
		t.Errorf("card allowed_mentions = %v; want parse []", am)
	}
	if !strings.Contains(embedText(card), "echo hi") {
		t.Errorf("card = %s", embedText(card))
	}
	approve := choice(t, card, "approve")
	tap := w.srv.Tap(owner, card, approve)
	if cb := w.waitCallback(tap); cb.Type != 7 {
		t.Fatalf("tap answered with type %d (%v); want 7 (update the tapped message)", cb.Type, cb.Data)
	}
	w.eventually("same message shows the verified result", 20*time.Second, func() (bool, string) {
		m := w.message(dm, card.ID)
		return strings.Contains(embedText(m), "exit code 0 ✓") && len(buttons(m)) == 0, embedText(m)
	})
	// The DM shows the command's record (the slash command's type-4
	// answer) and the card, one message, updated in place.
	var records, others []discordtest.Message
	for _, m := range w.srv.BotMessages(dm) {
		if m.Interaction == ix {
			records = append(records, m)
		} else {
			others = append(others, m)
		}
	}
	if len(records) != 1 || !strings.Contains(records[0].Content, "/run echo hi") || len(others) != 1 || others[0].ID != card.ID {
		t.Errorf("bot messages in the DM: records %v, others %v; want the command's record and the one card", records, others)
	}
	// The same approve tap again (a new interaction on a decided card):
	// refused, nothing runs again.
	tap2 := w.srv.Tap(owner, w.message(dm, card.ID), approve)
	if cb := w.waitCallback(tap2); cb.Type != 4 || cb.Data["flags"] != float64(64) {
		t.Errorf("second tap answered %d %v; want an ephemeral refusal", cb.Type, cb.Data)
	}
	if n := w.count(`SELECT count(*) FROM executions`); n != 1 {
		t.Fatalf("executions = %d; want 1", n)
	}

	// A non-approver taps a fresh card: an ephemeral refusal, no run.
	w.srv.Command(owner, dm, "run", [2]string{"command", "echo two"})
	var card2 discordtest.Message
	w.eventually("second card", 15*time.Second, func() (bool, string) {
		for _, m := range w.srv.BotMessages(dm) {
			if m.ID != card.ID && len(buttons(m)) > 0 {
				card2 = m
				return true, ""
			}
		}
		return false, ""
	})
	tap3 := w.srv.Tap(sam, card2, choice(t, card2, "approve"))
	cb := w.waitCallback(tap3)
	if cb.Type != 4 || cb.Data["flags"] != float64(64) || !strings.Contains(fmt.Sprint(cb.Data["content"]), "may not decide") {
		t.Errorf("non-approver tap answered %d %v; want an ephemeral refusal", cb.Type, cb.Data)
	}
	if n := w.count(`SELECT count(*) FROM executions`); n != 1 {
		t.Fatalf("executions = %d after a refused tap; want 1", n)
	}
}

// TestReplayedInteractionRunsOnce: the same INTERACTION_CREATE delivered
// twice (same id) is one turn and one execution.
func TestReplayedInteractionRunsOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, discord.ModeGateway)
	w.start()
	w.waitReady()
	dm := w.srv.DM(owner.ID)
	w.srv.Command(owner, dm, "run", [2]string{"command", "echo once"})
	card := w.cardIn(dm, "card")
	ix := w.srv.Interaction(3, owner, dm, map[string]any{"custom_id": choice(t, card, "approve"), "component_type": 2}, &card)
	w.srv.DispatchInteraction(ix)
	w.srv.DispatchInteraction(ix)
	w.eventually("result", 20*time.Second, func() (bool, string) {
		m := w.message(dm, card.ID)
		return strings.Contains(embedText(m), "exit code 0 ✓"), embedText(m)
	})
	// Executions are written with the decision, while the tap's turn is
	// handled: once no turn is pending, a second one would exist.
	w.eventually("every turn handled", 20*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM turns WHERE status = 'pending'`)
		return n == 0, fmt.Sprintf("%d turns pending", n)
	})
	if n := w.count(`SELECT count(*) FROM executions`); n != 1 {
		t.Fatalf("executions = %d; want 1", n)
	}
	if n := w.count(`SELECT count(*) FROM turns WHERE event_id = $1`, "i"+ix["id"].(string)); n != 1 {
		t.Fatalf("turns for the interaction = %d; want 1", n)
	}
}

func whoamiReplies(w *world, ch string) []string {
	var out []string
	for _, m := range w.srv.BotMessages(ch) {
		if strings.Contains(m.Content, "You are discord") {
			out = append(out, m.Content)
		}
	}
	return out
}

// TestGatewayDropResumeRefused: the socket drops in the middle of a burst
// and the RESUME is refused: the adapter identifies afresh, catches up over
// REST, and every message is answered once, in order.
func TestGatewayDropResumeRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t, discord.ModeGateway)
	w.start()
	w.waitReady()
	dm := w.srv.DM(owner.ID)
	w.srv.RefuseResume(true)
	const total = 12
	for i := range total {
		w.srv.SendMessage(owner, dm, "/audit "+strconv.Itoa(i+1), false)
		if i == 4 {
			w.srv.DropConnection()
		}
	}
	w.eventually("every message stored", 30*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM turns WHERE channel = 'discord'`)
		return n == total, fmt.Sprintf("%d turns; gateway %+v", n, w.srv.Gateway())
	})
	// A last message, after everything: the adapter's worker handles
	// messages and catch-ups one at a time, in order, so once it is stored
	// whatever the catch-up would have stored again has been handled too.
	w.srv.SendMessage(owner, dm, "/audit last", false)
	w.eventually("the last message stored", 30*time.Second, func() (bool, string) {
		n := w.count(`SELECT count(*) FROM turns WHERE channel = 'discord' AND body->>'text' = '/audit last'`)
		return n == 1, fmt.Sprintf("%d", n)
	})
	if n := w.count(`SELECT count(*) FROM turns WHERE channel = 'discord'`); n != total+1 {
		t.Errorf("turns = %d; want %d", n, total+1)
	}
	if n := w.count(`SELECT count(DISTINCT event_id) FROM turns WHERE channel = 'discord'`); n != total+1 {
		t.Errorf("distinct events = %d; want %d", n, total+1)
	}
	// In order: the turns' sequence follows the message ids.
	rows, err := w.db.Pool().Query(context.Background(), `SELECT event_id FROM turns WHERE channel = 'discord' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var prev string
	for rows.Next() {
		var ev string
		_ = rows.Scan(&ev)
		if prev != "" && !(len(prev) < len(ev) || (len(prev) == len(ev) && prev < ev)) {
			t.Errorf("turn %s stored after %s: out of order", ev, prev)
		}
		prev = ev
	}
	rows.Close()
	if g := w.srv.Gateway(); g.Identifies < 2 {
		t.Errorf("gateway %+v: want a fresh IDENTIFY after the refused RESUME", g)
	}
}

// TestRestartCatchUp: the process stops, messages arrive while it is down,
// and after the restart every missed message is processed once, in order.
func TestRestartCatchUp(t *testing.T) {
	t.Parallel()
	w := newWorld(t, discord.ModeGateway)
	w.start()
	w.waitReady()
	dm := w.srv.DM(owner.ID)
	w.srv.SendMessage(owner, dm, "/whoami", false)
	w.eventually("first reply", 15*time.Second, func() (bool, string) { return len(whoamiReplies(w, dm)) == 1, "" })
	w.stop()
	w.srv.DropConnection()
	const missed = 6
	for range missed {
		w.srv.SendMessage(owner, dm, "/whoami", false)
	}
	w.start()
	w.eventually("every missed message answered", 30*time.Second, func() (bool, string) {
		return len(whoamiReplies(w, dm)) == missed+1, fmt.Sprintf("%d replies", len(whoamiReplies(w, dm)))
	})
	// A last message, after everything, answered differently: the worker
	// and the conversation's outbox lane keep order, so once its answer is
	// out any duplicate answer of an earlier message would be out too.
	w.srv.SendMessage(owner, dm, "/help", false)
	w.eventually("the last message answered", 30*time.Second, func() (bool, string) {
		n := len(w.srv.BotMessages(dm))
		return n > len(whoamiReplies(w, dm)), fmt.Sprintf("%d bot messages", n)
	})
	if n := w.count(`SELECT count(*) FROM turns WHERE channel = 'discord'`); n != missed+2 {
		t.Errorf("turns = %d; want %d (the missed messages, the first and the last)", n, missed+2)
	}
	if n := len(whoamiReplies(w, dm)); n != missed+1 {
		t.Errorf("replies = %d; want %d", n, missed+1)
	}
}

func (w *world) post(body []byte, ts string, sign bool) *http.Response {
	w.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, w.node.hs.URL+discord.InteractionsPath, bytes.NewReader(body))
	if ts != "" {
		req.Header.Set("X-Signature-Timestamp", ts)
	}
	if sign {
		req.Header.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(w.ipriv, append([]byte(ts), body...))))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	return resp
}

// TestInteractionsEndpoint: http mode checks the signature and timestamp
// before anything else; failures are 401 and store nothing; PING is
// answered with type 1; a signed slash command is delivered.
func TestInteractionsEndpoint(t *testing.T) {
	t.Parallel()
	w := newWorld(t, discord.ModeHTTP)
	w.start()
	dm := w.srv.DM(owner.ID)
	cmd, _ := json.Marshal(w.srv.Interaction(2, owner, dm, map[string]any{"id": "1", "name": "whoami", "type": 1}, nil))
	now := strconv.FormatInt(time.Now().Unix(), 10)
	stale := strconv.FormatInt(time.Now().Add(-6*time.Minute).Unix(), 10)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	badSig := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, w.node.hs.URL+discord.InteractionsPath, bytes.NewReader(cmd))
		req.Header.Set("X-Signature-Timestamp", now)
		req.Header.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(other, append([]byte(now), cmd...))))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tc := range []struct {
		name string
		do   func() *http.Response
	}{
		{"bad signature", badSig},
		{"stale timestamp", func() *http.Response { return w.post(cmd, stale, true) }},
		{"missing headers", func() *http.Response { return w.post(cmd, "", false) }},
		{"body changed after signing", func() *http.Response {
			req, _ := http.NewRequest(http.MethodPost, w.node.hs.URL+discord.InteractionsPath, bytes.NewReader(append(cmd[:len(cmd):len(cmd)], ' ')))
			req.Header.Set("X-Signature-Timestamp", now)
			req.Header.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(w.ipriv, append([]byte(now), cmd...))))
			resp, _ := http.DefaultClient.Do(req)
			return resp
		}},
	} {
		resp := tc.do()
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: status %d; want 401", tc.name, resp.StatusCode)
		}
	}
	if n := w.count(`SELECT count(*) FROM turns`); n != 0 {
		t.Fatalf("turns = %d after refused requests; want 0", n)
	}
	ping := []byte(`{"id":"1400000000000000001","application_id":"` + discordtest.AppID + `","type":1,"token":"t","version":1}`)
	resp := w.post(ping, now, true)
	var pong map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&pong)
	resp.Body.Close()
	if resp.StatusCode != 200 || pong["type"] != float64(1) {
		t.Errorf("PING = %d %v; want 200 type 1", resp.StatusCode, pong)
	}
	// A signed command: delivered, answered in the response.
	w.eventually("adapter running", 5*time.Second, func() (bool, string) {
		resp := w.post(cmd, now, true)
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode == 200 && out["type"] == float64(4), fmt.Sprintf("%d %v", resp.StatusCode, out)
	})
	w.eventually("reply", 15*time.Second, func() (bool, string) { return len(whoamiReplies(w, dm)) == 1, "" })
}

// TestZombieReplaced: the gateway stops acknowledging heartbeats; the
// adapter replaces the connection (RESUME) and messages keep flowing.
func TestZombieReplaced(t *testing.T) {
	t.Parallel()
	w := newWorld(t, discord.ModeGateway)
	w.srv.SetHeartbeat(300)
	w.start()
	w.waitReady()
	dm := w.srv.DM(owner.ID)
	w.srv.SendMessage(owner, dm, "/whoami", false)
	w.eventually("first reply", 15*time.Second, func() (bool, string) { return len(whoamiReplies(w, dm)) == 1, "" })
	before := w.srv.Gateway()
	w.srv.Zombie(true)
	w.eventually("zombie replaced", 20*time.Second, func() (bool, string) {
		g := w.srv.Gateway()
		return g.Connects > before.Connects, fmt.Sprintf("%+v", g)
	})
	w.srv.Zombie(false)
	// The new connection resumes the session (it may still be on its way:
	// wait for it rather than read the count once).
	w.eventually("a RESUME after the zombie connection", 20*time.Second, func() (bool, string) {
		g := w.srv.Gateway()
		return g.Resumes > 0, fmt.Sprintf("%+v", g)
	})
	w.waitReady()
	w.srv.SendMessage(owner, dm, "/whoami", false)
	w.eventually("reply after the reconnect", 15*time.Second, func() (bool, string) { return len(whoamiReplies(w, dm)) == 2, "" })
}
