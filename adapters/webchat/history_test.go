package webchat

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/audit"
	coregateway "github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/storetest"
)

// gateway is a web chat adapter wired to a real engine and PostgreSQL, the
// way `silas serve` wires them (the transcript read from the store). Two
// gateways started one after the other on the same store are a restart.
type gateway struct {
	*fixture
	eng  *coregateway.Gateway
	st   *store.Store
	stop func()
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

func startGateway(t *testing.T, st *store.Store, key ed25519.PrivateKey, history int) *gateway {
	t.Helper()
	a, err := New(Config{Transcript: st, History: history, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := policy.New(nil)
	eng, err := coregateway.New(coregateway.Config{Store: st, Channels: []core.Channel{a}, Agent: agent.Command{}, Sandbox: sb,
		Policy: pol, Key: key, Owners: []core.IdentityID{"webchat:local"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	engDone, chDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(engDone); _ = eng.Run(ctx, 5*time.Second) }()
	<-eng.Ready()
	go func() { defer close(chDone); _ = a.Run(ctx, eng) }()
	srv := httptest.NewServer(a)
	for i := 0; ; i++ {
		a.mu.Lock()
		ready := a.inbox != nil
		a.mu.Unlock()
		if ready {
			break
		}
		if i > 1000 {
			t.Fatal("adapter did not start")
		}
		time.Sleep(time.Millisecond)
	}
	g := &gateway{fixture: &fixture{a: a, srv: srv}, eng: eng, st: st}
	var stopped bool
	g.stop = func() {
		if stopped {
			return
		}
		stopped = true
		srv.CloseClientConnections()
		cancel()
		<-chDone
		<-engDone
		srv.Close()
	}
	t.Cleanup(g.stop)
	return g
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// until returns the first frame matching pred, failing after 10s.
func (c *wsClient) until(what string, pred func(map[string]any) bool) map[string]any {
	c.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("connection closed while waiting for %s: %v", what, <-c.closed)
			}
			if pred(f) {
				return f
			}
		case <-deadline:
			c.t.Fatalf("no %s within 10s", what)
		}
	}
}

// replayed collects the replay that follows hello: every frame up to the
// first one not marked replay, or until nothing arrives for a moment.
func (c *wsClient) replayed() []map[string]any {
	c.t.Helper()
	want(c.t, c.next(), "type", "hello")
	var out []map[string]any
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("connection closed during the replay: %v", <-c.closed)
			}
			if f["replay"] != true {
				c.t.Fatalf("live frame %v before the replay ended (the replay is sent before any live frame)", f)
			}
			out = append(out, f)
		case <-time.After(300 * time.Millisecond):
			return out
		}
	}
}

func cardFrame(f map[string]any) *cards.Card {
	raw, ok := f["card"]
	if !ok {
		return nil
	}
	b, _ := json.Marshal(raw)
	var c cards.Card
	if json.Unmarshal(b, &c) != nil {
		return nil
	}
	return &c
}

func isCard(status cards.Status) func(map[string]any) bool {
	return func(f map[string]any) bool {
		c := cardFrame(f)
		return c != nil && c.Status == status
	}
}

// waitDelivered waits until every turn is processed and the outbox has
// nothing pending.
func waitDelivered(t *testing.T, st *store.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := st.Pool().QueryRow(context.Background(), `SELECT (SELECT count(*) FROM outbox WHERE status = 'pending') + (SELECT count(*) FROM turns WHERE status = 'pending')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d turns and outbox jobs still pending", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The conversation, both sides of it and every card's latest state, is read
// from the database: a new adapter on the same database (a restart) replays
// it in order, with the ids the previous one used live.
func TestHistoryReplayAfterRestart(t *testing.T) {
	t.Parallel()
	st, key := openStore(t), newKey(t)
	g1 := startGateway(t, st, key, 0)
	c := g1.dial(t, g1.login(t))
	if r := c.replayed(); len(r) != 0 {
		t.Fatalf("replay of an empty conversation: %v", r)
	}
	c.write(`{"type":"message","id":"m-1","text":"/help"}`)
	want(t, c.next(), "type", "ack", "id", "m-1")
	help := c.until("the help reply", func(f map[string]any) bool { return f["type"] == "message" && f["from"] == "bot" })
	c.write(`{"type":"message","id":"m-2","text":"/run uname -a"}`)
	want(t, c.next(), "type", "ack", "id", "m-2")
	pending := c.until("a pending card", isCard(cards.StatusPending))
	cd := cardFrame(pending)
	// The forward choice and the decline are told apart by kind.
	if len(cd.Choices) != 2 || cd.Choices[0].ID != "approve" || cd.Choices[0].Kind != cards.ChoiceForward ||
		cd.Choices[1].ID != "decline" || cd.Choices[1].Kind != cards.ChoiceDecline {
		t.Fatalf("choices = %+v", cd.Choices)
	}
	c.write(`{"type":"tap","id":"t-1","card_id":"` + string(cd.ID) + `","choice":"decline"}`)
	want(t, c.next(), "type", "ack", "id", "t-1")
	declined := c.until("the declined card", isCard(cards.StatusDeclined))
	if declined["type"] != "update" || declined["message_id"] != pending["message_id"] {
		t.Fatalf("the decline arrived as %v, not as an update of %v", declined["type"], pending["message_id"])
	}
	waitDelivered(t, st)
	g1.stop()

	g2 := startGateway(t, st, key, 0)
	r := g2.dial(t, g2.login(t)).replayed()
	type row struct{ from, id, clientID, text string }
	var got []row
	for _, f := range r {
		want(t, f, "type", "message", "replay", true)
		s := func(k string) string { v, _ := f[k].(string); return v }
		got = append(got, row{s("from"), s("message_id"), s("client_id"), s("text")})
	}
	wantRows := []row{
		{"user", got[0].id, "m-1", "/help"},
		{"bot", help["message_id"].(string), "", help["text"].(string)},
		{"user", got[2].id, "m-2", "/run uname -a"},
		{"bot", pending["message_id"].(string), "", ""},
	}
	if len(got) != len(wantRows) {
		t.Fatalf("replay = %+v, want %d messages", got, len(wantRows))
	}
	for i := range wantRows {
		if got[i] != wantRows[i] {
			t.Errorf("replay[%d] = %+v, want %+v", i, got[i], wantRows[i])
		}
	}
	if got[0].id == got[2].id || got[0].id == "" {
		t.Errorf("user messages without distinct ids: %q %q", got[0].id, got[2].id)
	}
	// The card is shown in its latest state, its buttons gone.
	if c := cardFrame(r[3]); c == nil || c.ID != cd.ID || c.Status != cards.StatusDeclined || len(c.Choices) != 0 {
		t.Fatalf("replayed card = %+v", c)
	}
}

// An edit of a card made while no browser is connected is stored, counted
// as delivered (it is in the history the next browser gets), and shown on
// the next connect, after a restart too.
func TestUpdateToNobodyShownOnConnect(t *testing.T) {
	t.Parallel()
	st, key := openStore(t), newKey(t)
	g1 := startGateway(t, st, key, 0)
	c := g1.dial(t, g1.login(t))
	c.replayed()
	c.write(`{"type":"message","id":"m-1","text":"/run uname -a"}`)
	cd := cardFrame(c.until("a pending card", isCard(cards.StatusPending)))
	c.conn.CloseNow()
	// Wait for the server to notice, so nobody is connected.
	deadline := time.Now().Add(5 * time.Second)
	for {
		g1.a.mu.Lock()
		n := len(g1.a.clients)
		g1.a.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed client is still registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A decline arriving by another path while nobody looks (as the expiry
	// loop or a restart's "interrupted" would edit the card).
	if _, err := g1.eng.Deliver(context.Background(), g1.a.frameTurn(ClientFrame{Type: "tap", ID: "t-away", CardID: string(cd.ID), Choice: "decline"})); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, st)
	var delivered int
	if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE op IN ('update', 'answer') AND message_key = $1 AND status = 'delivered'`, string(cd.ID)).Scan(&delivered); err != nil {
		t.Fatal(err)
	}
	if delivered == 0 {
		t.Fatal("the edit was not recorded as delivered")
	}
	for _, restart := range []bool{false, true} {
		g := g1
		if restart {
			g1.stop()
			g = startGateway(t, st, key, 0)
		}
		var last *cards.Card
		for _, f := range g.dial(t, g.login(t)).replayed() {
			if c := cardFrame(f); c != nil && c.ID == cd.ID {
				last = c
			}
		}
		if last == nil || last.Status != cards.StatusDeclined || len(last.Choices) != 0 {
			t.Fatalf("restart=%v: the card on connect = %+v, want declined without buttons", restart, last)
		}
	}
}

// The replay is bounded: the newest History messages, oldest first.
func TestReplayIsBounded(t *testing.T) {
	t.Parallel()
	st, key := openStore(t), newKey(t)
	g := startGateway(t, st, key, 3)
	c := g.dial(t, g.login(t))
	c.replayed()
	for i, text := range []string{"/whoami", "/help"} {
		id := []string{"m-a", "m-b"}[i]
		c.write(`{"type":"message","id":"` + id + `","text":"` + text + `"}`)
		want(t, c.next(), "type", "ack", "id", id)
		c.until("a reply", func(f map[string]any) bool { return f["type"] == "message" && f["from"] == "bot" })
	}
	waitDelivered(t, st)
	r := g.dial(t, g.login(t)).replayed()
	if len(r) != 3 {
		t.Fatalf("replay has %d messages, want the newest 3: %v", len(r), r)
	}
	// Oldest dropped: the first /whoami; then its reply, /help, its reply.
	if r[0]["from"] != "bot" || r[1]["client_id"] != "m-b" || r[2]["from"] != "bot" {
		t.Fatalf("replay = %v", r)
	}
}

// get_card answers with the card's current state and the request's id; a
// card that is not in this conversation is not_found, with the id.
func TestGetCard(t *testing.T) {
	t.Parallel()
	st, key := openStore(t), newKey(t)
	g := startGateway(t, st, key, 0)
	c := g.dial(t, g.login(t))
	c.replayed()
	c.write(`{"type":"message","id":"m-1","text":"/run uname -a"}`)
	pending := c.until("a pending card", isCard(cards.StatusPending))
	cd := cardFrame(pending)
	c.write(`{"type":"tap","id":"t-1","card_id":"` + string(cd.ID) + `","choice":"decline"}`)
	c.until("the declined card", isCard(cards.StatusDeclined))
	waitDelivered(t, st)

	// A card of another conversation on the same channel.
	err := st.Do(context.Background(), func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		return nil, tx.QueueMessage("webchat", core.OpSend, "elsewhere", core.OutMessage{Conversation: "webchat:other",
			Card: &cards.Card{ID: "elsewhere", Kind: cards.KindInfo, Intent: "Not yours", Status: cards.StatusPending}})
	})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, frame string
		check       func(t *testing.T, f map[string]any)
	}{
		{"current state", `{"type":"get_card","id":"g-1","card_id":"` + string(cd.ID) + `"}`, func(t *testing.T, f map[string]any) {
			want(t, f, "type", "card_state", "id", "g-1", "message_id", pending["message_id"], "from", "bot")
			if c := cardFrame(f); c == nil || c.ID != cd.ID || c.Status != cards.StatusDeclined || len(c.Choices) != 0 {
				t.Fatalf("card = %+v", c)
			}
		}},
		{"unknown card", `{"type":"get_card","id":"g-2","card_id":"nosuchcard"}`, func(t *testing.T, f map[string]any) {
			want(t, f, "type", "error", "id", "g-2", "code", "not_found")
		}},
		{"another conversation's card", `{"type":"get_card","id":"g-3","card_id":"elsewhere"}`, func(t *testing.T, f map[string]any) {
			want(t, f, "type", "error", "id", "g-3", "code", "not_found")
		}},
		{"malformed", `{"type":"get_card","id":"g-4","card_id":"a b"}`, func(t *testing.T, f map[string]any) {
			want(t, f, "type", "error", "id", "g-4", "code", "bad_frame")
		}},
		{"a choice is not part of it", `{"type":"get_card","id":"g-5","card_id":"x","choice":"approve"}`, func(t *testing.T, f map[string]any) {
			want(t, f, "type", "error", "id", "g-5", "code", "bad_frame")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.write(tt.frame)
			// The web chat pushes every conversation's messages to every
			// browser (it has one user); the other conversation's card may
			// arrive in between when its delivery comes round.
			f := c.next()
			if f["message_id"] == "b-elsewhere" {
				f = c.next()
			}
			tt.check(t, f)
		})
	}
}

// A tap the core refuses is answered with a tap_result naming the tap's
// frame id, the card and the reason, after the tap's ack; a tap that took
// effect gets one too, not refused.
func TestTapRefusalIsCorrelated(t *testing.T) {
	t.Parallel()
	st, key := openStore(t), newKey(t)
	g := startGateway(t, st, key, 0)
	c := g.dial(t, g.login(t))
	c.replayed()
	c.write(`{"type":"message","id":"m-1","text":"/run uname -a"}`)
	cd := cardFrame(c.until("a pending card", isCard(cards.StatusPending)))
	id := string(cd.ID)

	tests := []struct {
		name, tap, card, reason string
		refused                 bool
	}{
		{"takes effect", "t-1", id, "", false},
		{"already decided", "t-2", id, core.RefusedAlreadyDecided, true},
		{"unknown card", "t-3", "zzzzzzzzzzzzzzzzzzzzzzzzzz", core.RefusedUnknownCard, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.write(`{"type":"tap","id":"` + tt.tap + `","card_id":"` + tt.card + `","choice":"decline"}`)
			// The ack comes first; other frames (card updates) may follow it.
			want(t, c.until("the ack", func(f map[string]any) bool { return f["type"] == "ack" }), "id", tt.tap)
			r := c.until("the tap_result", func(f map[string]any) bool { return f["type"] == "tap_result" })
			want(t, r, "id", tt.tap, "card_id", tt.card, "refused", tt.refused)
			if got, _ := r["reason"].(string); got != tt.reason {
				t.Fatalf("reason = %q, want %q", got, tt.reason)
			}
			if msg, _ := r["message"].(string); msg == "" {
				t.Fatalf("tap_result without a message: %v", r)
			}
		})
	}
	// Refusals are answers to the tapper, not chat messages: nothing in
	// the stored conversation says "Already decided".
	waitDelivered(t, st)
	for _, f := range g.dial(t, g.login(t)).replayed() {
		if s, _ := f["text"].(string); f["from"] == "bot" && s != "" {
			t.Errorf("a refusal became a chat message: %q", s)
		}
	}
}
