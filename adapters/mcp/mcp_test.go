package mcp_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	mcpadapter "github.com/silas-gateway/silas/adapters/mcp"
	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/callgate"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	owner = core.IdentityID("test:owner")
	dm    = core.ConversationID("test:dm")
)

// phone is the owner's channel: it keeps each card's newest state.
type phone struct {
	mu    sync.Mutex
	cards map[cards.ID]*cards.Card
	texts []string
	// asked are the cards ever shown open (with buttons).
	asked map[cards.ID]bool
	n     int
}

func (p *phone) Name() core.ChannelName                      { return "test" }
func (p *phone) Run(ctx context.Context, _ core.Inbox) error { <-ctx.Done(); return nil }
func (p *phone) Send(_ context.Context, m core.OutMessage) (core.MessageRef, error) {
	p.keep(m)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	return core.MessageRef(fmt.Sprint(p.n)), nil
}
func (p *phone) Update(_ context.Context, _ core.MessageRef, m core.OutMessage) error {
	p.keep(m)
	return nil
}
func (p *phone) keep(m core.OutMessage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m.Card == nil {
		p.texts = append(p.texts, m.Text)
		return
	}
	c := *m.Card
	p.cards[c.ID] = &c
	if c.Status.Open() {
		if p.asked == nil {
			p.asked = map[cards.ID]bool{}
		}
		p.asked[c.ID] = true
	}
}

// card waits for a card that pred accepts.
func (p *phone) card(t *testing.T, what string, pred func(*cards.Card) bool) *cards.Card {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		for _, c := range p.cards {
			if pred(c) {
				p.mu.Unlock()
				return c
			}
		}
		p.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no card %s on the owner's phone", what)
	return nil
}

// clock is the gateway's time: the test moves it past a card's expiry.
type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

type world struct {
	t      *testing.T
	st     *store.Store
	eng    *gateway.Gateway
	phone  *phone
	clock  *clock
	url    string
	n      int
	sealer *secrets.Sealer
}

// newWorld runs a gateway as serve wires it, with the MCP endpoint on an
// httptest server, and the owner's direct conversation (one message).
func newWorld(t *testing.T) *world {
	t.Helper()
	w := newWorldAway(t)
	w.deliver(core.Turn{Text: "/whoami"})
	return w
}

// newWorldAway is newWorld before the owner ever wrote to Silas.
func newWorldAway(t *testing.T, opts ...func(*gateway.Config)) *world {
	t.Helper()
	ctx := t.Context()
	w := &world{t: t, phone: &phone{cards: map[cards.ID]*cards.Card{}}, clock: &clock{}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{MaxConns: 8, Now: w.clock.now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	w.st = st
	dir := t.TempDir()
	sb, err := sandbox.New(sandbox.Config{BaseDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	pol, err := policy.Build(policy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	sk, err := secrets.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if w.sealer, err = secrets.NewSealer(sk); err != nil {
		t.Fatal(err)
	}
	cfg := gateway.Config{Store: st, Channels: []core.Channel{w.phone}, Agent: agent.Command{}, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}, AllowedDirs: []string{dir}},
		Policy:   pol, Key: key, Owners: []core.IdentityID{owner}, Logger: log, Now: w.clock.now, Sealer: w.sealer}
	for _, o := range opts {
		o(&cfg)
	}
	w.eng, err = gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.eng.Run(runCtx, 10*time.Second) }()
	t.Cleanup(func() { stop(); <-done })
	<-w.eng.Ready()
	srv := httptest.NewServer(mcpadapter.Handler(w.eng.Calls(), log))
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

// deliver hands the core a turn from the owner in their direct chat.
func (w *world) deliver(t core.Turn) {
	w.t.Helper()
	w.n++
	t.Channel, t.Conversation, t.Sender, t.ChatKind = "test", dm, owner, core.ChatDirect
	t.EventID, t.At = fmt.Sprintf("e%d", w.n), w.clock.now()
	t.Evidence = core.Evidence{Authenticated: true, Method: "test"}
	if _, err := w.eng.Deliver(w.t.Context(), t); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) tap(id cards.ID, choice string) {
	w.deliver(core.Turn{Tap: &core.Tap{Card: id, Choice: choice}})
}

func (w *world) token(name string) string {
	w.t.Helper()
	tok, hash := callgate.NewToken()
	if err := w.st.AddMCPToken(w.t.Context(), name, hash, "operator"); err != nil {
		w.t.Fatal(err)
	}
	return tok
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// agentClient is an agent's MCP client (the SDK's), with the progress
// notifications it received.
type agentClient struct {
	cs       *sdk.ClientSession
	progress atomic.Int32
}

func (w *world) connect(token string) (*agentClient, error) {
	a := &agentClient{}
	c := sdk.NewClient(&sdk.Implementation{Name: "test-agent", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *sdk.ProgressNotificationClientRequest) { a.progress.Add(1) },
	})
	cs, err := c.Connect(w.t.Context(), &sdk.StreamableClientTransport{Endpoint: w.url, HTTPClient: &http.Client{Transport: bearer{token}}, MaxRetries: -1}, nil)
	if err != nil {
		return nil, err
	}
	w.t.Cleanup(func() { cs.Close() })
	a.cs = cs
	return a, nil
}

type call struct {
	res *sdk.CallToolResult
	err error
}

// start calls tool in the background, asking for progress.
func (a *agentClient) start(ctx context.Context, tool string, args any) chan call {
	ch := make(chan call, 1)
	go func() {
		p := &sdk.CallToolParams{Name: tool, Arguments: args}
		p.SetProgressToken("p1")
		res, err := a.cs.CallTool(ctx, p)
		ch <- call{res, err}
	}()
	return ch
}

func wait(t *testing.T, ch chan call) *sdk.CallToolResult {
	t.Helper()
	select {
	case c := <-ch:
		if c.err != nil {
			t.Fatalf("call: %v", c.err)
		}
		return c.res
	case <-time.After(60 * time.Second):
		t.Fatal("the call did not return")
	}
	return nil
}

func text(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func structured(t *testing.T, r *sdk.CallToolResult, v any) {
	t.Helper()
	b, _ := json.Marshal(r.StructuredContent)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

func (w *world) count(q string, args ...any) int {
	w.t.Helper()
	var n int
	if err := w.st.Pool().QueryRow(w.t.Context(), q, args...).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	return n
}

// An agent's run_command becomes a card on the owner's phone; the tap runs
// it in the sandbox and the agent gets the verified outcome, with
// progress notifications while it waited.
func TestRunCommandApproved(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, err := w.connect(w.token("claude"))
	if err != nil {
		t.Fatal(err)
	}
	ch := a.start(t.Context(), "run_command", map[string]any{"argv": []string{"echo", "hello-mcp"}, "why": "to greet"})
	cd := w.phone.card(t, "echo hello-mcp pending", func(c *cards.Card) bool { return c.Command == "echo hello-mcp" && c.Status == cards.StatusPending })
	if !strings.Contains(cd.Rationale, "mcp:claude") {
		t.Errorf("card rationale %q does not name the caller", cd.Rationale)
	}
	w.tap(cd.ID, "approve")
	res := wait(t, ch)
	if res.IsError {
		t.Fatalf("result is an error: %s", text(res))
	}
	var out callgate.RunResult
	structured(t, res, &out)
	if !out.Verified || out.Status != core.ExecVerified || !strings.Contains(out.Stdout, "hello-mcp") || out.DecidedBy != owner {
		t.Fatalf("result = %+v", out)
	}
	if a.progress.Load() == 0 {
		t.Error("no progress notification while waiting")
	}
	w.phone.card(t, "done", func(c *cards.Card) bool { return c.ID == cd.ID && c.Status == cards.StatusDone })
	if n := w.count(`SELECT count(*) FROM approvals WHERE requester = 'mcp:claude'`); n != 1 {
		t.Errorf("approvals from mcp:claude = %d, want 1", n)
	}
	if n := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'mcp.call' AND actor = 'mcp:claude'`); n != 1 {
		t.Errorf("mcp.call entries = %d, want 1", n)
	}
	if _, err := w.st.VerifyAudit(t.Context()); err != nil {
		t.Errorf("audit chain: %v", err)
	}
}

// A decline and an expiry end the call with an error the client shows;
// nothing runs.
func TestRunCommandDeclinedOrExpired(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, err := w.connect(w.token("codex"))
	if err != nil {
		t.Fatal(err)
	}
	ch := a.start(t.Context(), "run_command", map[string]any{"argv": []string{"echo", "no"}})
	cd := w.phone.card(t, "echo no", func(c *cards.Card) bool { return c.Command == "echo no" && c.Status == cards.StatusPending })
	w.tap(cd.ID, "decline")
	res := wait(t, ch)
	if !res.IsError || !strings.Contains(text(res), "Declined by test:owner") {
		t.Fatalf("declined call = %v %q", res.IsError, text(res))
	}

	ch = a.start(t.Context(), "run_command", map[string]any{"argv": []string{"echo", "late"}})
	cd = w.phone.card(t, "echo late", func(c *cards.Card) bool { return c.Command == "echo late" && c.Status == cards.StatusPending })
	w.clock.off.Add(int64(time.Hour))
	res = wait(t, ch)
	if !res.IsError || !strings.Contains(text(res), "expired") {
		t.Fatalf("expired call = %v %q", res.IsError, text(res))
	}
	w.tap(cd.ID, "approve") // too late: refused by the decider
	if n := w.count(`SELECT count(*) FROM executions`); n != 0 {
		t.Fatalf("executions = %d, want 0", n)
	}
}

// ask returns the tapped choice; request_approval a decision signed with
// the gateway's key.
func TestAskAndRequestApproval(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, err := w.connect(w.token("bot"))
	if err != nil {
		t.Fatal(err)
	}
	ch := a.start(t.Context(), "ask", map[string]any{"question": "Which branch?", "choices": []string{"main", "dev"}})
	cd := w.phone.card(t, "question", func(c *cards.Card) bool {
		return strings.Contains(c.Intent, "Which branch?") && c.Status == cards.StatusPending
	})
	if len(cd.Choices) != 2 || cd.Choices[1].Label != "dev" {
		t.Fatalf("question card = %+v", cd)
	}
	w.tap(cd.ID, cd.Choices[1].ID)
	res := wait(t, ch)
	var ans callgate.Answer
	structured(t, res, &ans)
	if res.IsError || ans.Choice != "dev" || ans.By != owner {
		t.Fatalf("ask = %q %+v", text(res), ans)
	}
	w.tap(cd.ID, cd.Choices[0].ID) // a second tap changes nothing
	w.phone.card(t, "answered", func(c *cards.Card) bool {
		return c.ID == cd.ID && c.Status == cards.StatusDone && strings.Contains(c.Outcome, "dev")
	})

	ch = a.start(t.Context(), "request_approval", map[string]any{"action": "git push --force origin main"})
	cd = w.phone.card(t, "approval", func(c *cards.Card) bool {
		return strings.Contains(c.Intent, "git push") && c.Status == cards.StatusPending
	})
	w.tap(cd.ID, "approve")
	res = wait(t, ch)
	var d callgate.Decision
	structured(t, res, &d)
	pub, _ := jsonKey(d.PublicKey)
	sig, _ := jsonKey(d.Signature)
	if !d.Approved || !ed25519.Verify(pub, append([]byte(callgate.DecisionContext), d.Payload...), sig) ||
		!strings.Contains(d.Payload, `"decision":"approved"`) || !strings.Contains(d.Payload, "git push --force") {
		t.Fatalf("decision = %+v", d)
	}
	if n := w.count(`SELECT count(*) FROM executions`); n != 0 {
		t.Fatalf("request_approval ran something: %d executions", n)
	}
	// A decline is a decision too, signed the same way.
	ch = a.start(t.Context(), "request_approval", map[string]any{"action": "rm -rf build/"})
	cd = w.phone.card(t, "approval 2", func(c *cards.Card) bool {
		return strings.Contains(c.Intent, "rm -rf build/") && c.Status == cards.StatusPending
	})
	w.tap(cd.ID, "decline")
	res = wait(t, ch)
	d = callgate.Decision{}
	structured(t, res, &d)
	sig, _ = jsonKey(d.Signature)
	if d.Approved || !strings.Contains(text(res), "DECLINED") || !ed25519.Verify(pub, append([]byte(callgate.DecisionContext), d.Payload...), sig) ||
		!strings.Contains(d.Payload, `"decision":"declined"`) {
		t.Fatalf("declined decision = %q %+v", text(res), d)
	}

	// Nobody answers: the call ends with an error and the card expires.
	ch = a.start(t.Context(), "ask", map[string]any{"question": "Still there?", "choices": []string{"yes"}})
	cd = w.phone.card(t, "unanswered", func(c *cards.Card) bool {
		return strings.Contains(c.Intent, "Still there?") && c.Status == cards.StatusPending
	})
	w.clock.off.Add(int64(time.Hour))
	if res := wait(t, ch); !res.IsError || !strings.Contains(text(res), "expired") {
		t.Fatalf("unanswered ask = %v %q", res.IsError, text(res))
	}
	w.phone.card(t, "expired", func(c *cards.Card) bool { return c.ID == cd.ID && c.Status == cards.StatusExpired })
	w.tap(cd.ID, "c1") // too late: changes nothing
	if n := w.count(`SELECT count(*) FROM mcp_questions WHERE id = $1 AND status = 'expired' AND choice IS NULL`, cd.ID); n != 1 {
		t.Fatal("a tap after expiry answered the question")
	}
}

func jsonKey(s string) ([]byte, error) {
	var b []byte
	err := json.Unmarshal([]byte(`"`+s+`"`), &b)
	return b, err
}

// Without a valid, unrevoked bearer token nothing reaches the core: the
// HTTP request is refused (401) and no approval or question exists.
func TestBearerRequired(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	tok := w.token("gone")
	if _, err := w.st.RevokeMCPToken(t.Context(), "gone", "operator"); err != nil {
		t.Fatal(err)
	}
	for name, token := range map[string]string{"missing": "", "bad": "silas_mcp_notatoken", "other scheme": "", "revoked": tok} {
		if _, err := w.connect(token); err == nil {
			t.Errorf("%s token: connected", name)
		}
	}
	for _, h := range []string{"", "Basic abc", "Bearer " + tok, "Bearer silas_mcp_x"} {
		req, _ := http.NewRequest("POST", w.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"argv":["echo","x"]}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", h, resp.StatusCode)
		}
	}
	if n := w.count(`SELECT count(*) FROM approvals`) + w.count(`SELECT count(*) FROM mcp_questions`); n != 0 {
		t.Fatalf("an unauthenticated call reached the core: %d rows", n)
	}
}

// A token revoked while its client is connected is refused on the next
// call.
func TestRevokedMidSession(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, err := w.connect(w.token("temp"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.RevokeMCPToken(t.Context(), "temp", "operator"); err != nil {
		t.Fatal(err)
	}
	res, err := a.cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"argv": []string{"echo", "x"}}})
	if err == nil && !res.IsError {
		t.Fatalf("a revoked token's call succeeded: %q", text(res))
	}
	if n := w.count(`SELECT count(*) FROM approvals`); n != 0 {
		t.Fatalf("a revoked token's call reached the core")
	}
}

// The output of a command that received a secret never reaches the
// caller (a model): the result says withheld, with the verified outcome.
func TestSecretRunOutputWithheld(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const value = "s3cr3t-value-for-mcp"
	sealed, err := w.sealer.Seal("API_TOKEN", []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.Pool().Exec(t.Context(), `INSERT INTO secrets (name, ciphertext, created_at, updated_at) VALUES ('API_TOKEN', $1, now(), now())`, sealed); err != nil {
		t.Fatal(err)
	}
	a, err := w.connect(w.token("leaky"))
	if err != nil {
		t.Fatal(err)
	}
	ch := a.start(t.Context(), "run_command", map[string]any{"argv": []string{"printenv", "API_TOKEN"}, "secrets": []string{"API_TOKEN"}})
	cd := w.phone.card(t, "printenv", func(c *cards.Card) bool { return c.Command == "printenv API_TOKEN" && c.Status == cards.StatusPending })
	for c := cd; c.Status != cards.StatusRunning && c.Status != cards.StatusDone; {
		w.tap(cd.ID, c.Choices[0].ID) // approve, and confirm when the risk asks for it
		prev := c.Status
		c = w.phone.card(t, "next state", func(n *cards.Card) bool { return n.ID == cd.ID && n.Status != prev })
		if c.Status != cards.StatusConfirming && c.Status != cards.StatusRunning && c.Status != cards.StatusDone {
			t.Fatalf("card went to %s: %+v", c.Status, c)
		}
	}
	res := wait(t, ch)
	var out callgate.RunResult
	structured(t, res, &out)
	if !out.Withheld || out.Stdout != "" || !out.Verified {
		t.Fatalf("result = %+v", out)
	}
	b, _ := json.Marshal(res)
	if strings.Contains(string(b), value) {
		t.Fatal("the secret's value reached the caller")
	}
}

// With no owner conversation to put a card in, a call fails with a reason
// the client shows, and nothing is proposed.
func TestNoOwnerToAsk(t *testing.T) {
	t.Parallel()
	w := newWorldAway(t)
	a, err := w.connect(w.token("early"))
	if err != nil {
		t.Fatal(err)
	}
	res := wait(t, a.start(t.Context(), "run_command", map[string]any{"argv": []string{"echo", "x"}}))
	if !res.IsError || !strings.Contains(text(res), "No owner has talked to Silas yet") {
		t.Fatalf("call = %v %q", res.IsError, text(res))
	}
	if n := w.count(`SELECT count(*) FROM approvals`); n != 0 {
		t.Fatalf("approvals = %d", n)
	}
}

// One caller cannot bury the owner in cards: past five waiting, a call is
// refused before anything is stored.
func TestOpenCallsBounded(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, err := w.connect(w.token("loop"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for i := range 5 {
		q := fmt.Sprintf("Question %d?", i)
		a.start(ctx, "ask", map[string]any{"question": q, "choices": []string{"ok"}})
		w.phone.card(t, q, func(c *cards.Card) bool { return strings.Contains(c.Intent, q) })
	}
	res := wait(t, a.start(ctx, "ask", map[string]any{"question": "One more?", "choices": []string{"ok"}}))
	if !res.IsError || !strings.Contains(text(res), "5 cards waiting") {
		t.Fatalf("sixth call = %v %q", res.IsError, text(res))
	}
	if n := w.count(`SELECT count(*) FROM mcp_questions`); n != 5 {
		t.Fatalf("questions = %d, want 5", n)
	}
	// The five end at their expiry at the latest, whether or not the
	// client's cancellation reached the server.
	w.clock.off.Add(int64(time.Hour))
}

// The owner's standing approval of a command in their chat ("Allow this
// for 1 h" on its /run card) covers an agent's identical run_command: it
// runs with a line instead of a card, under its own token, the use
// counted. Revoked, the next identical call asks with a card again.
func TestRunCommandUnderStandingConsent(t *testing.T) {
	t.Parallel()
	w := newWorldAway(t, func(c *gateway.Config) {
		c.Consents = consent.Limits{TTL: time.Hour, MaxTTL: 24 * time.Hour, MaxUses: 5}
	})
	w.deliver(core.Turn{Text: "/run echo standing-mcp"})
	first := w.phone.card(t, "the /run card", func(c *cards.Card) bool { return c.Command == "echo standing-mcp" && c.Status == cards.StatusPending })
	w.tap(first.ID, render.StandingChoice)
	w.phone.card(t, "the /run card done", func(c *cards.Card) bool { return c.ID == first.ID && c.Status == cards.StatusDone })

	a, err := w.connect(w.token("claude"))
	if err != nil {
		t.Fatal(err)
	}
	res := wait(t, a.start(t.Context(), "run_command", map[string]any{"argv": []string{"echo", "standing-mcp"}}))
	if res.IsError {
		t.Fatalf("result is an error: %s", text(res))
	}
	var out callgate.RunResult
	structured(t, res, &out)
	if !out.Verified || !strings.HasPrefix(string(out.DecidedBy), "consent:") {
		t.Fatalf("result = %+v, want verified under the consent", out)
	}
	w.phone.card(t, "the call's card, done", func(c *cards.Card) bool { return c.ID == cards.ID(out.Approval) && c.Status == cards.StatusDone })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		w.phone.mu.Lock()
		texts := strings.Join(w.phone.texts, "\n")
		w.phone.mu.Unlock()
		if strings.Contains(texts, "under your standing approval") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no standing line; texts %q", texts)
		}
	}
	w.phone.mu.Lock()
	asked := w.phone.asked[cards.ID(out.Approval)]
	w.phone.mu.Unlock()
	if asked {
		t.Fatal("the call was shown as a card asking for a tap")
	}
	if n := w.count(`SELECT uses FROM consents`); n != 1 {
		t.Fatalf("uses = %d, want 1", n)
	}

	// Revoked: the next identical call asks before it runs.
	if _, ok, err := w.st.RevokeConsent(t.Context(), w.consentID(), owner); err != nil || !ok {
		t.Fatalf("revoke: %v %v", ok, err)
	}
	ch := a.start(t.Context(), "run_command", map[string]any{"argv": []string{"echo", "standing-mcp"}})
	cd := w.phone.card(t, "a card again", func(c *cards.Card) bool {
		return c.Command == "echo standing-mcp" && c.Status == cards.StatusPending && c.ID != first.ID
	})
	w.tap(cd.ID, "decline")
	if res := wait(t, ch); !res.IsError {
		t.Fatalf("declined call ran: %s", text(res))
	}
	if n := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'consent.refused' AND data->>'code' = 'consent_revoked'`); n != 1 {
		t.Fatalf("revoked refusals audited = %d, want 1", n)
	}
}

func (w *world) consentID() string {
	w.t.Helper()
	var id string
	if err := w.st.Pool().QueryRow(w.t.Context(), `SELECT id FROM consents`).Scan(&id); err != nil {
		w.t.Fatal(err)
	}
	return id
}

// An agent's call whose card could only go to a channel that is deaf now
// (an open incident of the channel-health check: its tap could not arrive)
// is refused at once with the reason and audited, nothing stored to wait
// (issue 28 point 2); once the channel hears again, the card is shown.
func TestOwnersChannelDeafRefusedAtOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, err := w.connect(w.token("deaf"))
	if err != nil {
		t.Fatal(err)
	}
	incident := func(open bool) {
		t.Helper()
		err := w.st.Do(t.Context(), func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			if open {
				_, err := tx.OpenIncident(ctx, "test", w.clock.now().Add(-time.Hour))
				return nil, err
			}
			_, _, err := tx.CloseIncident(ctx, "test")
			return nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	incident(true)
	// Bounded well below the card's expiry: without the check the call
	// would wait for a tap that cannot arrive.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res := wait(t, a.start(ctx, "run_command", map[string]any{"argv": []string{"echo", "x"}}))
	if !res.IsError || !strings.Contains(text(res), "deaf now (test: nothing heard from the platform") {
		t.Fatalf("call = %v %q", res.IsError, text(res))
	}
	if n := w.count(`SELECT count(*) FROM approvals`); n != 0 {
		t.Fatalf("approvals = %d; want none stored to wait", n)
	}
	if n := w.count(`SELECT count(*) FROM audit_log WHERE kind = 'approval.unroutable' AND actor = 'mcp:deaf'`); n != 1 {
		t.Fatalf("approval.unroutable entries = %d; want 1", n)
	}
	incident(false)
	ch := a.start(t.Context(), "run_command", map[string]any{"argv": []string{"echo", "x"}})
	c := w.phone.card(t, "asking again once the channel hears", func(c *cards.Card) bool { return c.Status == cards.StatusPending })
	w.tap(c.ID, "decline") // the call ends (its server side waits for a decision)
	if res := wait(t, ch); !res.IsError || !strings.Contains(text(res), "Declined") {
		t.Fatalf("call = %v %q", res.IsError, text(res))
	}
}
