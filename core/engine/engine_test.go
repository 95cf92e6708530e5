package engine_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/trust"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// fakeChannel records what the engine sends, like a platform would show it.
type fakeChannel struct {
	mu     sync.Mutex
	msgs   map[core.MessageRef]core.OutMessage
	order  []core.MessageRef
	n      int
	notify chan struct{}
}

func newFakeChannel() *fakeChannel {
	return &fakeChannel{msgs: map[core.MessageRef]core.OutMessage{}, notify: make(chan struct{}, 1)}
}

func (f *fakeChannel) Name() core.ChannelName { return "test" }
func (f *fakeChannel) Run(ctx context.Context, _ core.Inbox) error {
	<-ctx.Done()
	return nil
}
func (f *fakeChannel) Send(_ context.Context, m core.OutMessage) (core.MessageRef, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	ref := core.MessageRef(fmt.Sprintf("msg-%d", f.n))
	f.msgs[ref] = m
	f.order = append(f.order, ref)
	f.poke()
	return ref, nil
}
func (f *fakeChannel) Update(_ context.Context, ref core.MessageRef, m core.OutMessage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.msgs[ref]; !ok {
		return &core.PermanentError{Err: fmt.Errorf("no message %s", ref)}
	}
	f.msgs[ref] = m
	f.poke()
	return nil
}
func (f *fakeChannel) poke() {
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

// waitFor polls the channel's visible state until cond holds.
func (f *fakeChannel) waitFor(t *testing.T, what string, cond func(msgs []core.OutMessage) bool) []core.OutMessage {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		f.mu.Lock()
		msgs := make([]core.OutMessage, 0, len(f.order))
		for _, r := range f.order {
			msgs = append(msgs, f.msgs[r])
		}
		f.mu.Unlock()
		if cond(msgs) {
			return msgs
		}
		select {
		case <-f.notify:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s; channel shows:\n%s", what, dump(msgs))
		}
	}
}

func dump(msgs []core.OutMessage) string {
	var b strings.Builder
	for i, m := range msgs {
		if m.Card != nil {
			fmt.Fprintf(&b, "%d: card %s status=%s outcome=%q output=%q choices=%v\n", i, m.Card.ID, m.Card.Status, m.Card.Outcome, m.Card.Output, m.Card.Choices)
		} else {
			fmt.Fprintf(&b, "%d: %q\n", i, m.Text)
		}
	}
	return b.String()
}

func cardWith(msgs []core.OutMessage, pred func(c *cards.Card) bool) *cards.Card {
	for _, m := range msgs {
		if m.Card != nil && pred(m.Card) {
			return m.Card
		}
	}
	return nil
}

func textContaining(msgs []core.OutMessage, s string) bool {
	for _, m := range msgs {
		if strings.Contains(m.Text, s) {
			return true
		}
	}
	return false
}

func accessMap(p trust.AccessPolicy) map[core.ChannelName]trust.AccessPolicy {
	if p == "" {
		return nil
	}
	return map[core.ChannelName]trust.AccessPolicy{"test": p}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type bundle struct {
	eng   *gateway.Gateway
	st    *store.Store
	ch    *fakeChannel
	clock *clock
	ctx   context.Context
	seq   int
	// stop ends the engine (not the store) early.
	stop func()
	// hold and before, when set, are the executor's test hooks
	// (gateway.Config.HoldExecution and BeforeExecute).
	hold   func(core.ApprovalID) bool
	before func(core.ApprovalID)
	// apart: claim executions apart from their decisions
	// (gateway.Config.ClaimApart).
	apart bool
}

const owner core.IdentityID = "test:owner"

func setup(t *testing.T) *bundle {
	t.Helper()
	ch := newFakeChannel()
	return setupChannel(t, ch, ch)
}

// setupChannel runs the engine with channel c, observed through ch.
func setupChannel(t *testing.T, c core.Channel, ch *fakeChannel) *bundle {
	return setupAccess(t, c, ch, "")
}

const (
	AccessPolicyPairing   = trust.AccessPairing
	AccessPolicyAllowlist = trust.AccessAllowlist
)

func setupAccess(t *testing.T, c core.Channel, ch *fakeChannel, access trust.AccessPolicy, opts ...func(*gateway.Config)) *bundle {
	t.Helper()
	return setupStore(t, c, ch, access, store.Options{}, opts...)
}

// setupStore is setupAccess with the store opened with so (its Now is the
// bundle's clock).
func setupStore(t *testing.T, c core.Channel, ch *fakeChannel, access trust.AccessPolicy, so store.Options, opts ...func(*gateway.Config)) *bundle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dsn := storetest.NewDatabase(t)
	clk := &clock{t: time.Now()}
	so.Now = clk.Now
	st, err := store.Open(ctx, dsn, so)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{BaseDir: t.TempDir()})
	if err == nil {
		t.Cleanup(func() { sb.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := policy.New(nil)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	b := &bundle{st: st, ch: ch, clock: clk, ctx: ctx}
	cfg := gateway.Config{
		HoldExecution: func(id core.ApprovalID) bool { return b.hold != nil && b.hold(id) },
		BeforeExecute: func(id core.ApprovalID) {
			if b.before != nil {
				b.before(id)
			}
		},
		Store: st, Channels: []core.Channel{c}, Agent: agent.Command{}, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}}, Policy: pol, Key: key,
		Owners: []core.IdentityID{owner}, Allowed: []core.IdentityID{"test:friend"}, Now: clk.Now,
		Access: accessMap(access),
		// A test that edits the rows between the decision and the claim
		// needs the claim in a transaction of its own.
		ClaimApart: func(core.ApprovalID) bool { return b.before != nil || b.apart },
	}
	for _, o := range opts {
		o(&cfg)
	}
	eng, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.eng = eng
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); eng.Run(runCtx, 5*time.Second) }()
	<-eng.Ready()
	t.Cleanup(func() {
		cancel()
		<-done
		st.Close()
	})
	b.stop = func() { stopRun(); <-done }
	return b
}

func (b *bundle) send(t *testing.T, from core.IdentityID, text string) core.DeliverResult {
	t.Helper()
	b.seq++
	res, err := b.eng.Deliver(b.ctx, core.Turn{Channel: "test", Conversation: "test:chat", Sender: from, EventID: fmt.Sprintf("e%d", b.seq),
		Text: text, Evidence: core.Evidence{Authenticated: true, Method: "test"}})
	if err != nil {
		t.Fatalf("Deliver(%q): %v", text, err)
	}
	return res
}

func (b *bundle) tap(t *testing.T, from core.IdentityID, card cards.ID, choice string) string {
	t.Helper()
	b.seq++
	id := fmt.Sprintf("tap%d", b.seq)
	b.tapWithID(t, from, card, choice, id)
	return id
}

func (b *bundle) tapWithID(t *testing.T, from core.IdentityID, card cards.ID, choice, eventID string) core.DeliverResult {
	t.Helper()
	res, err := b.eng.Deliver(b.ctx, core.Turn{Channel: "test", Conversation: "test:chat", Sender: from, EventID: eventID,
		Tap: &core.Tap{Card: card, Choice: choice}, Evidence: core.Evidence{Authenticated: true, Method: "test"}})
	if err != nil {
		t.Fatalf("tap: %v", err)
	}
	return res
}

func (b *bundle) pendingCard(t *testing.T, cmd string) *cards.Card {
	t.Helper()
	var c *cards.Card
	b.ch.waitFor(t, "approval card for "+cmd, func(msgs []core.OutMessage) bool {
		c = cardWith(msgs, func(c *cards.Card) bool { return c.Command == cmd && c.Status == cards.StatusPending })
		return c != nil
	})
	return c
}

func (b *bundle) waitStatus(t *testing.T, id cards.ID, status cards.Status) *cards.Card {
	t.Helper()
	var c *cards.Card
	b.ch.waitFor(t, fmt.Sprintf("card %s %s", id, status), func(msgs []core.OutMessage) bool {
		c = cardWith(msgs, func(c *cards.Card) bool { return c.ID == id && c.Status == status })
		return c != nil
	})
	return c
}

func (b *bundle) executions(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM executions WHERE status NOT IN ('queued')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRunLowRiskOneTap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/run echo hi")
	c := b.pendingCard(t, "echo hi")
	if c.Risk != cards.RiskLow || c.Choices[0].ID != "approve" || c.Choices[0].Label != "Run `echo hi`" || c.Choices[len(c.Choices)-1].ID != "decline" {
		t.Fatalf("card = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	b.tap(t, owner, c.ID, "approve")
	done := b.waitStatus(t, c.ID, cards.StatusDone)
	if done.Output != "hi\n" || !strings.Contains(done.Outcome, "exit code 0 ✓") || len(done.Choices) != 0 {
		t.Fatalf("done card = %+v", done)
	}
	if n := b.executions(t); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
	// A card edit's delivery mark is recorded lazily (core/outbox, store
	// DoLazy: in the next transaction, or LazyDelay after the edit): the
	// tap's answer's rode in the claim's transaction while the claim had
	// one; claimed with the decision, it may come after the card shows
	// done. Wait for it before reading the log.
	for deadline := time.Now().Add(5 * time.Second); !auditKinds(t, b)["message.update"] && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	n, err := b.st.VerifyAudit(b.ctx)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	kinds := auditKinds(t, b)
	for _, k := range []string{"turn.received", "trust.decided", "policy.decided", "approval.requested", "approval.approved",
		"token.minted", "token.consumed", "execution.started", "execution.finished", "verification.passed", "message.send", "message.update"} {
		if !kinds[k] {
			t.Errorf("audit has no %s entry (%d entries)", k, n)
		}
	}
}

func auditKinds(t *testing.T, b *bundle) map[string]bool {
	rows, err := b.st.AuditTail(b.ctx, 1000, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, r := range rows {
		m[string(r.Entry.Kind)] = true
	}
	return m
}

func TestMediumRiskNeedsConfirm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/run touch made-by-silas")
	c := b.pendingCard(t, "touch made-by-silas")
	if c.Risk != cards.RiskMedium {
		t.Fatalf("risk = %s", c.Risk)
	}
	b.tap(t, owner, c.ID, "confirm") // confirm before approve: refused
	b.ch.waitFor(t, "refusal", func(m []core.OutMessage) bool { return textContaining(m, "nothing to confirm") })
	b.tap(t, owner, c.ID, "approve")
	conf := b.waitStatus(t, c.ID, cards.StatusConfirming)
	if conf.Choices[0].ID != "confirm" {
		t.Fatalf("confirming card = %+v", conf)
	}
	if b.executions(t) != 0 {
		t.Fatal("ran before confirmation")
	}
	b.tap(t, owner, c.ID, "confirm")
	b.waitStatus(t, c.ID, cards.StatusDone)
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/run echo once")
	c := b.pendingCard(t, "echo once")

	// A tap by an identity that may not approve changes nothing.
	b.tap(t, "test:friend", c.ID, "approve")
	b.ch.waitFor(t, "non-approver refusal", func(m []core.OutMessage) bool { return textContaining(m, "may not decide this card") })
	b.tap(t, "test:stranger", c.ID, "approve")
	b.ch.waitFor(t, "stranger refusal", func(m []core.OutMessage) bool { return textContaining(m, "(test:stranger) may not decide") })

	// Forged card id.
	b.tap(t, owner, "aaaaaaaaaaaaaaaaaaaaaaaaaa", "approve")
	b.ch.waitFor(t, "unknown card", func(m []core.OutMessage) bool { return textContaining(m, "Unknown card") })

	// Approve, then replay the same frame and tap again.
	id := b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusDone)
	if res := b.tapWithID(t, owner, c.ID, "approve", id); !res.Duplicate {
		t.Fatal("replayed event was not recognised as a duplicate")
	}
	b.tap(t, owner, c.ID, "approve")
	b.ch.waitFor(t, "already decided", func(m []core.OutMessage) bool { return textContaining(m, "Already decided (approved)") })
	b.tap(t, owner, c.ID, "decline")
	// The decline is answered like the tap before it; once it is, every tap
	// was decided (a conversation's turns are processed in order).
	b.ch.waitFor(t, "already decided, twice", func(m []core.OutMessage) bool {
		n := 0
		for _, x := range m {
			if strings.Contains(x.Text, "Already decided (approved)") {
				n++
			}
		}
		return n >= 2
	})
	if n := b.executions(t); n != 1 {
		t.Fatalf("executions = %d, want exactly 1", n)
	}
	var status string
	mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT status FROM approvals WHERE id = $1`, string(c.ID)), &status)
	if status != "approved" {
		t.Fatalf("approval status = %s", status)
	}
	var nonces int
	mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM token_nonces`), &nonces)
	if nonces != 1 {
		t.Fatalf("nonces = %d, want 1", nonces)
	}
}

func TestExpiredCard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/run echo late")
	c := b.pendingCard(t, "echo late")
	b.clock.Add(5*time.Minute + time.Second)
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusExpired)
	b.ch.waitFor(t, "expired answer", func(m []core.OutMessage) bool { return textContaining(m, "expired") })
	if b.executions(t) != 0 {
		t.Fatal("expired card ran")
	}
}

func TestExternalCannotRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, "test:stranger", "/run echo pwned")
	b.ch.waitFor(t, "refusal", func(m []core.OutMessage) bool { return textContaining(m, "not trusted here") })
	var n int
	mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM approvals`), &n)
	if n != 0 {
		t.Fatalf("an external turn created %d approval(s)", n)
	}
}

func TestUnauthenticatedTurnRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.eng.Deliver(b.ctx, core.Turn{Channel: "test", Conversation: "test:chat", Sender: owner, EventID: "x", Text: "/run id"})
	if err == nil || !strings.Contains(err.Error(), "unauthenticated") {
		t.Fatalf("Deliver = %v, want rejection", err)
	}
}

func TestActionChangedAfterApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.before = (func(id core.ApprovalID) {
		// An attacker with database access swaps the command after approval.
		evil := `{"argv":["touch","/tmp/pwned-by-silas-test"],"network":false,"tool":"shell","verify":[]}`
		if _, err := b.st.Pool().Exec(context.Background(), `UPDATE approvals SET action_canonical = $2 WHERE id = $1`, string(id), []byte(evil)); err != nil {
			t.Error(err)
		}
	})
	b.send(t, owner, "/run echo fine")
	c := b.pendingCard(t, "echo fine")
	b.tap(t, owner, c.ID, "approve")
	refused := b.waitStatus(t, c.ID, cards.StatusRefused)
	if !strings.Contains(refused.Outcome, "changed after approval") {
		t.Fatalf("outcome = %q", refused.Outcome)
	}
	if _, err := os.Stat("/tmp/pwned-by-silas-test"); err == nil {
		t.Fatal("the changed action ran")
	}
}

func TestActionChangedBeforeApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/run echo fine")
	c := b.pendingCard(t, "echo fine")
	b.st.Pool().Exec(b.ctx, `UPDATE approvals SET action_canonical = convert_to('{"argv":["id"]}', 'UTF8') WHERE id = $1`, string(c.ID))
	b.tap(t, owner, c.ID, "approve")
	b.ch.waitFor(t, "integrity refusal", func(m []core.OutMessage) bool { return textContaining(m, "no longer matches") })
	if b.executions(t) != 0 {
		t.Fatal("tampered action ran")
	}
}

func TestBlockedAndDecline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/run rm -rf /")
	b.ch.waitFor(t, "blocked", func(m []core.OutMessage) bool { return textContaining(m, "Blocked: `rm -rf /`") })
	b.send(t, owner, "/run echo no")
	c := b.pendingCard(t, "echo no")
	b.tap(t, owner, c.ID, "decline")
	d := b.waitStatus(t, c.ID, cards.StatusDeclined)
	if len(d.Choices) != 0 {
		t.Fatalf("declined card still has choices: %+v", d.Choices)
	}
	if b.executions(t) != 0 {
		t.Fatal("declined action ran")
	}
}

func TestFailedVerification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/run false")
	c := b.pendingCard(t, "false")
	b.tap(t, owner, c.ID, "approve")
	f := b.waitStatus(t, c.ID, cards.StatusFailed)
	if !strings.Contains(f.Outcome, "not verified") {
		t.Fatalf("outcome = %q", f.Outcome)
	}
}

func TestLongOutputIsStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/run seq 1 5000")
	c := b.pendingCard(t, "seq 1 5000")
	b.tap(t, owner, c.ID, "approve")
	d := b.waitStatus(t, c.ID, cards.StatusDone)
	if d.OutputRef == "" || len([]rune(d.Output)) > 2000 {
		t.Fatalf("long output pasted: ref=%q len=%d", d.OutputRef, len(d.Output))
	}
	full, err := b.st.GetOutput(b.ctx, d.OutputRef)
	if err != nil || !strings.HasSuffix(full, "4999\n5000\n") {
		t.Fatalf("stored output: %v, %d bytes", err, len(full))
	}
}

func TestCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/whoami")
	b.ch.waitFor(t, "whoami", func(m []core.OutMessage) bool { return textContaining(m, "You are test:owner with owner trust") })
	b.send(t, owner, "/run echo pending")
	c := b.pendingCard(t, "echo pending")
	b.send(t, owner, "/pending")
	b.ch.waitFor(t, "pending", func(m []core.OutMessage) bool {
		return textContaining(m, "1 open approval(s)") && textContaining(m, string(c.ID))
	})
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusDone)
	b.send(t, owner, "/audit 5")
	b.ch.waitFor(t, "audit", func(m []core.OutMessage) bool {
		return textContaining(m, "you approved `echo pending`; ran ") && textContaining(m, "verified: exit code 0 ✓")
	})
	b.send(t, owner, "/help")
	b.ch.waitFor(t, "help", func(m []core.OutMessage) bool { return textContaining(m, "/run <command>") })
}

// /audit names a decided approval by the command recorded in the log when
// it was requested: the approvals table can be edited by the gateway's
// database role, and an edit there must not change what the log shows.
func TestAuditShowsTheRecordedCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.send(t, owner, "/run echo recorded")
	c := b.pendingCard(t, "echo recorded")
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusDone)
	tag, err := b.st.Pool().Exec(b.ctx, `UPDATE approvals SET action_canonical = convert_to(replace(convert_from(action_canonical, 'UTF8'), 'recorded', 'forged'), 'UTF8')
		WHERE id = $1`, string(c.ID))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("edit the approval: %v, %v", tag, err)
	}
	if a, err := b.st.GetApproval(b.ctx, core.ApprovalID(c.ID)); err != nil || !strings.Contains(string(a.ActionCanonical), "forged") {
		t.Fatalf("the edit did not take: %v", err)
	}
	// Three lines: the decision, the run, the verification — not the
	// request, which names the command itself.
	b.send(t, owner, "/audit 3")
	m := b.ch.waitFor(t, "audit", func(m []core.OutMessage) bool { return textContaining(m, "you approved `") })
	if !textContaining(m, "you approved `echo recorded`") || textContaining(m, "forged") {
		t.Fatalf("/audit shows the edited command:\n%v", m[len(m)-1].Text)
	}
}

func TestPairing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code := "ABCDE-23456"
	err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		tx.QueuePairingCode(trust.HashPairingCode(code), "owner", "test", b.clock.Now().Add(time.Minute))
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.send(t, "test:phone", "/whoami")
	b.ch.waitFor(t, "external", func(m []core.OutMessage) bool { return textContaining(m, "test:phone with external trust") })
	b.send(t, "test:phone", "/pair "+strings.ToLower(code))
	b.ch.waitFor(t, "paired", func(m []core.OutMessage) bool { return textContaining(m, "Paired: test:phone now has owner trust") })
	b.send(t, "test:phone", "/whoami")
	b.ch.waitFor(t, "owner", func(m []core.OutMessage) bool { return textContaining(m, "test:phone with owner trust") })
	b.send(t, "test:other", "/pair "+code)
	b.ch.waitFor(t, "reuse refused", func(m []core.OutMessage) bool { return textContaining(m, "unknown, used or expired") })

	// A binding whose role was edited in SQL no longer verifies: no trust.
	b.st.Pool().Exec(b.ctx, `UPDATE identity_bindings SET role = 'auth' WHERE identity = 'test:phone'`)
	b.clock.Add(10 * time.Second) // past the binding cache
	b.send(t, "test:phone", "/whoami")
	b.ch.waitFor(t, "tampered binding ignored", func(m []core.OutMessage) bool {
		return strings.Count(dump(m), "test:phone with external trust") == 2
	})
}

// TestRestartResumesTurnsInOrder stores turns as intake would and stops
// before processing (a crash); a new engine processes them, in order.
func TestRestartResumesTurnsInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.stop() // the "crashed" process
	// Store three turns directly, as if the previous process died right
	// after acknowledging them.
	for i, text := range []string{"/whoami", "/run echo resumed", "/pending"} {
		turn := core.Turn{Channel: "test", Conversation: "test:chat", Sender: owner, EventID: fmt.Sprintf("old%d", i), Text: text,
			Evidence: core.Evidence{Authenticated: true, Method: "test"}, At: time.Now()}
		err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			_, _, err := tx.InsertTurn(ctx, turn)
			return nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	pol, _ := policy.New(nil)
	sb, _ := sandbox.New(sandbox.Config{BaseDir: t.TempDir()})
	t.Cleanup(func() { sb.Close() })
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	ch := newFakeChannel()
	eng2, err := gateway.New(gateway.Config{Store: b.st, Channels: []core.Channel{ch}, Agent: agent.Command{}, Sandbox: sb, Policy: pol, Key: key,
		Owners: []core.IdentityID{owner}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); eng2.Run(ctx, time.Second) }()
	defer func() { cancel(); <-done }()
	msgs := ch.waitFor(t, "three answers", func(m []core.OutMessage) bool { return len(m) >= 3 })
	if !strings.Contains(msgs[0].Text, "You are test:owner") || msgs[1].Card == nil || !strings.Contains(msgs[2].Text, "1 open approval") {
		t.Fatalf("out of order or missing:\n%s", dump(msgs))
	}
}

// toastChannel is a fakeChannel that can answer taps (like Telegram).
type toastChannel struct {
	*fakeChannel
	mu     sync.Mutex
	toasts []string
}

func (c *toastChannel) AnswerTap(ctx context.Context, a core.TapAnswer) error {
	if a.Card != nil {
		if err := c.Update(ctx, a.Ref, core.OutMessage{Conversation: a.Conversation, Card: a.Card}); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.toasts = append(c.toasts, string(a.Sender)+": "+a.Text)
	return nil
}

func (c *toastChannel) toastList() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.toasts...)
}

func TestTapAnswersAreToasts(t *testing.T) {
	t.Parallel()
	fc := newFakeChannel()
	tc := &toastChannel{fakeChannel: fc}
	b := setupChannel(t, tc, fc)
	b.send(t, owner, "/run echo toast")
	c := b.pendingCard(t, "echo toast")
	b.tap(t, "test:friend", c.ID, "approve")
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusDone)
	deadline := time.Now().Add(10 * time.Second)
	for len(tc.toastList()) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	got := tc.toastList()
	if len(got) != 2 || !strings.Contains(got[0], "test:friend: You (test:friend) may not decide") || got[1] != "test:owner: Approved: running it now." {
		t.Fatalf("toasts = %q", got)
	}
	// The refusal was a toast only: nothing about it in the chat.
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, m := range fc.msgs {
		if strings.Contains(m.Text, "may not decide") {
			t.Fatalf("refusal leaked into the chat: %q", m.Text)
		}
	}
}

// dmChannel is a fakeChannel whose identities have direct conversations.
type dmChannel struct{ *fakeChannel }

func (dmChannel) DirectConversation(id core.IdentityID) (core.ConversationID, bool) {
	return core.ConversationID("test:dm-" + strings.TrimPrefix(string(id), "test:")), true
}

func (b *bundle) sendIn(t *testing.T, conv core.ConversationID, from core.IdentityID, kind, text string, tap *core.Tap) {
	t.Helper()
	b.seq++
	_, err := b.eng.Deliver(b.ctx, core.Turn{Channel: "test", Conversation: conv, Sender: from, SenderName: "Stranger Danger", EventID: fmt.Sprintf("e%d", b.seq),
		ChatKind: kind, Text: text, Tap: tap, Evidence: core.Evidence{Authenticated: true, Method: "test"}})
	if err != nil {
		t.Fatalf("Deliver: %v", err)
	}
}

func TestAccessPairingPolicy(t *testing.T) {
	t.Parallel()
	fc := newFakeChannel()
	b := setupAccess(t, dmChannel{fc}, fc, AccessPolicyPairing)
	b.sendIn(t, "test:dm-stranger", "test:stranger", core.ChatDirect, "hello?", nil)
	b.ch.waitFor(t, "request code", func(m []core.OutMessage) bool { return textContaining(m, "your request code is") })
	msgs := b.ch.waitFor(t, "owner card", func(m []core.OutMessage) bool {
		return cardWith(m, func(c *cards.Card) bool { return strings.Contains(c.Intent, "Allow Stranger Danger (test:stranger)") }) != nil
	})
	var card *cards.Card
	for _, m := range msgs {
		if m.Card != nil && m.Conversation == "test:dm-owner" {
			card = m.Card
		}
	}
	if card == nil || card.Choices[0].ID != "allow" || card.Choices[0].Label != "Allow test:stranger" || card.Choices[1].ID != "deny" {
		t.Fatalf("owner card missing or wrong:\n%s", dump(msgs))
	}
	// Writing again does not ask the owner twice.
	b.sendIn(t, "test:dm-stranger", "test:stranger", core.ChatDirect, "hello again", nil)
	b.ch.waitFor(t, "waiting", func(m []core.OutMessage) bool { return textContaining(m, "is waiting for the owner") })
	// The stranger cannot decide their own request; a group message passes the DM gate.
	b.sendIn(t, "test:dm-stranger", "test:stranger", core.ChatDirect, "", &core.Tap{Card: card.ID, Choice: "allow"})
	b.ch.waitFor(t, "refused", func(m []core.OutMessage) bool { return textContaining(m, "Unknown card") })
	b.sendIn(t, "test:dm-owner", owner, core.ChatDirect, "", &core.Tap{Card: card.ID, Choice: "allow"})
	b.waitStatus(t, card.ID, cards.StatusApproved)
	b.ch.waitFor(t, "welcome", func(m []core.OutMessage) bool { return textContaining(m, "you can talk to Silas now") })
	b.sendIn(t, "test:dm-stranger", "test:stranger", core.ChatDirect, "/whoami", nil)
	b.ch.waitFor(t, "auth trust", func(m []core.OutMessage) bool { return textContaining(m, "test:stranger with auth trust") })
}

func TestAccessAllowlistIgnores(t *testing.T) {
	t.Parallel()
	fc := newFakeChannel()
	b := setupAccess(t, dmChannel{fc}, fc, AccessPolicyAllowlist)
	b.sendIn(t, "test:dm-stranger", "test:stranger", core.ChatDirect, "/help", nil)
	b.sendIn(t, "test:dm-friend", "test:friend", core.ChatDirect, "/whoami", nil)
	b.ch.waitFor(t, "friend answered", func(m []core.OutMessage) bool { return textContaining(m, "test:friend with auth trust") })
	b.ch.waitFor(t, "stranger ignored", func(m []core.OutMessage) bool { return len(m) == 1 })
}

func TestSecretLifecycle(t *testing.T) {
	t.Parallel()
	sealer := newSealer(t)
	var link string
	fc := newFakeChannel()
	rec := &recordingAgent{next: agent.Command{}}
	b := setupAccess(t, fc, fc, "", func(c *gateway.Config) {
		c.Sealer = sealer
		c.Agent = rec
		c.SecretLink = func(ref, token string) string {
			link = "https://127.0.0.1:8443/secrets/" + ref + "?t=" + token
			return link
		}
	})
	const canary = "canary-Zq8vW1xR7pL3nB6t"

	// Only owners may ask; the card carries a link, not a value.
	b.send(t, "test:friend", "/secret demo_key")
	b.ch.waitFor(t, "refusal", func(m []core.OutMessage) bool { return textContaining(m, "Only an owner") })
	b.send(t, owner, "/secret demo_key Demo key")
	var card *cards.Card
	b.ch.waitFor(t, "secure-input card", func(m []core.OutMessage) bool {
		card = cardWith(m, func(c *cards.Card) bool { return c.Kind == cards.KindSecureInput })
		return card != nil
	})
	if card.Link == nil || card.Link.URL != link || len(card.Choices) != 0 {
		t.Fatalf("card = %+v", card)
	}
	// What the secure form does on submit: seal, then fulfil through the engine.
	u, _ := url.Parse(link)
	ref := strings.TrimPrefix(u.Path, "/secrets/")
	sealed, err := sealer.Seal("demo_key", []byte(canary))
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := b.eng.SecureInput().FulfillSecret(b.ctx, ref, secrets.HashToken(u.Query().Get("t")), sealed); err != nil || out != secrets.OutcomeStored {
		t.Fatalf("FulfillSecret = %v, %v", out, err)
	}
	if out, _, _ := b.eng.SecureInput().FulfillSecret(b.ctx, ref, secrets.HashToken(u.Query().Get("t")), sealed); out == secrets.OutcomeStored {
		t.Fatal("a used link stored again")
	}
	b.waitStatus(t, card.ID, cards.StatusDone)

	// An approved action that declares the secret gets it as $DEMO_KEY.
	// Its card does not show the output, only why and how to ask for it.
	script := `echo "key=$DEMO_KEY"; printf %s "$DEMO_KEY" | base64; printf %s "$DEMO_KEY" | od -x; printf %s "$DEMO_KEY" | fold -w 5`
	b.send(t, owner, `/run --secret demo_key sh -c '`+script+`'`)
	run := b.pendingCard(t, `sh -c '`+script+`'`)
	if run.Risk != cards.RiskHigh || !slices.Contains(run.AffectedItems, "receives secret: demo_key") {
		t.Fatalf("run card = %+v", run)
	}
	b.tap(t, owner, run.ID, "approve")
	b.waitStatus(t, run.ID, cards.StatusConfirming)
	b.tap(t, owner, run.ID, "confirm")
	done := b.waitStatus(t, run.ID, cards.StatusDone)
	if done.Output != "" || done.OutputRef == "" ||
		!strings.Contains(done.Outcome, "Output hidden because this action received secret demo_key. Send /output "+done.OutputRef+" to see it (redacted).") {
		t.Fatalf("output not collapsed: %+v", done)
	}
	// Someone who may not decide the card does not get it; the approver
	// gets it redacted: the value, its base64, its od -x words and the
	// value folded over lines are each replaced.
	b.send(t, "test:friend", "/output "+done.OutputRef)
	b.ch.waitFor(t, "output refused", func(m []core.OutMessage) bool { return textContaining(m, "may not decide card "+string(run.ID)) })
	// The approver's /output does not show it: a card asks the owner, and
	// says the output may hold the secret in some encoding (issue 22
	// point 1). Until the owner's tap, every read for showing withholds it
	// (the web chat's full-output page reads GetConversationOutput).
	b.send(t, owner, "/output "+string(run.ID))
	var ask *cards.Card
	b.ch.waitFor(t, "reveal card", func(m []core.OutMessage) bool {
		ask = cardWith(m, func(c *cards.Card) bool {
			return c.Kind == cards.KindInfo && c.Status == cards.StatusPending && strings.Contains(c.Intent, done.OutputRef)
		})
		return ask != nil
	})
	if !strings.Contains(ask.Intent, "may contain secret demo_key in some encoding") || len(ask.Choices) != 2 {
		t.Fatalf("reveal card = %+v", ask)
	}
	if _, err := b.st.GetConversationOutput(b.ctx, "test:chat", done.OutputRef); !errors.Is(err, core.ErrWithheld) {
		t.Fatalf("output read before the tap: %v", err)
	}
	// Only the owner decides it.
	b.tap(t, "test:friend", ask.ID, "show")
	var status string
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT status FROM output_reveals WHERE card_id = $1`, string(ask.ID)).Scan(&status); err != nil || status != "pending" {
		t.Fatalf("after a non-owner's tap: %q, %v", status, err)
	}
	if _, err := b.st.GetConversationOutput(b.ctx, "test:chat", done.OutputRef); !errors.Is(err, core.ErrWithheld) {
		t.Fatalf("output read after a non-owner's tap: %v", err)
	}
	b.tap(t, owner, ask.ID, "show")
	b.waitStatus(t, ask.ID, cards.StatusDone)
	var shown string
	b.ch.waitFor(t, "output shown", func(m []core.OutMessage) bool {
		for _, x := range m {
			if strings.HasPrefix(x.Text, "Output "+done.OutputRef+" (secret values redacted):") {
				shown = x.Text
				return true
			}
		}
		return false
	})
	if !strings.Contains(shown, "key=[redacted secret]") || strings.Count(shown, "[redacted secret]") != 4 || strings.Contains(shown, canary[:8]) {
		t.Fatalf("shown output: %q", shown)
	}
	// Shown, it is marked in the transcript, and the page may show it.
	tr, err := b.st.Transcript(b.ctx, "test", "test:chat", 50)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(tr, func(e core.TranscriptEntry) bool { return e.Text == shown }); i < 0 || !tr[i].SecretOutput {
		t.Fatalf("the shown output is not marked in the transcript (at %d)", i)
	}
	if page, err := b.st.GetConversationOutput(b.ctx, "test:chat", done.OutputRef); err != nil || !strings.Contains(page, "key=[redacted secret]") {
		t.Fatalf("output after the owner's tap: %q, %v", page, err)
	}
	var audited int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM audit_log WHERE kind = 'output.shown' AND actor = $1`, string(owner)).Scan(&audited); err != nil || audited != 1 {
		t.Fatalf("output.shown entries = %d, %v", audited, err)
	}
	b.send(t, owner, "/output out-nosuchcard")
	b.ch.waitFor(t, "unknown ref", func(m []core.OutMessage) bool {
		return textContaining(m, "No stored output out-nosuchcard in this chat.")
	})

	// A credential typed into chat is not kept.
	ghp := "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
	b.send(t, owner, "here is my token "+ghp)
	b.ch.waitFor(t, "notice", func(m []core.OutMessage) bool { return textContaining(m, "removed what looked like a credential") })

	// The canary and the typed token appear nowhere in the database: not in
	// turns, outbox payloads, executions, outputs or the audit log.
	for _, v := range []string{canary, ghp, base64.StdEncoding.EncodeToString([]byte(canary))[:20], hex.EncodeToString([]byte(canary))[:20]} {
		rows, err := b.st.Pool().Query(b.ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'`)
		if err != nil {
			t.Fatal(err)
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(tables) == 0 {
			t.Fatalf("listing tables: %d, %v", len(tables), err)
		}
		for _, tbl := range tables {
			var n int
			if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM `+tbl+` t WHERE t::text LIKE '%' || $1 || '%'`, v).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("%q found in %d row(s) of %s", v[:10], n, tbl)
			}
		}
	}
	b.send(t, owner, "/secrets")
	b.ch.waitFor(t, "list", func(m []core.OutMessage) bool { return textContaining(m, "• demo_key — stored") })
	// Nor in anything the agent was given.
	inputs := rec.texts()
	if !slices.ContainsFunc(inputs, func(s string) bool { return strings.Contains(s, "DEMO_KEY") }) {
		t.Fatalf("control: the agent never saw the /run --secret turn: %q", inputs)
	}
	for _, in := range inputs {
		if strings.Contains(in, canary) || strings.Contains(in, ghp) {
			t.Fatalf("a secret reached the agent: %q", in)
		}
	}
	for _, m := range b.ch.waitFor(t, "all", func([]core.OutMessage) bool { return true }) {
		if strings.Contains(dump([]core.OutMessage{m}), canary) || strings.Contains(m.Text, ghp) {
			t.Fatalf("a secret reached the chat: %+v", m)
		}
	}
}

// recordingAgent passes turns to next and keeps every input it was given,
// for tests that check what the agent may never see.
type recordingAgent struct {
	next core.Agent
	mu   sync.Mutex
	in   []core.AgentInput
}

func (r *recordingAgent) Respond(ctx context.Context, in core.AgentInput) (core.Proposal, error) {
	r.mu.Lock()
	r.in = append(r.in, in)
	r.mu.Unlock()
	return r.next.Respond(ctx, in)
}

func (r *recordingAgent) texts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.in))
	for _, in := range r.in {
		out = append(out, fmt.Sprintf("%+v", in))
	}
	return out
}

// TestInlineAndQueuedTurnsKeepOrder: turns answered inline (stored with
// their answer in one transaction) and turns answered by the worker keep
// the order they arrived in, whichever path each takes; a redelivered event
// is answered once; every turn ends "done" and the audit chain holds.
func TestInlineAndQueuedTurnsKeepOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	texts := []string{"/whoami", "/run echo one", "/whoami", "hello", "/pending", "/help", "/nope", "/run echo two", "/whoami"}
	for range 3 {
		for _, text := range texts {
			b.send(t, owner, text)
		}
	}
	res := b.send(t, owner, "/whoami") // event e<last>
	again, err := b.eng.Deliver(b.ctx, core.Turn{Channel: "test", Conversation: "test:chat", Sender: owner, EventID: fmt.Sprintf("e%d", b.seq),
		Text: "/whoami", Evidence: core.Evidence{Authenticated: true, Method: "test"}})
	if err != nil || !again.Duplicate || again.Seq != res.Seq {
		t.Fatalf("redelivery = %+v, %v; want a duplicate of seq %d", again, err, res.Seq)
	}
	want := 3*len(texts) + 1
	b.ch.waitFor(t, "every answer", func(m []core.OutMessage) bool { return len(m) >= want })
	// A doubled answer would be delivered before the answer to a later turn
	// of the same conversation: send one and wait for its answer.
	b.send(t, owner, "/marker")
	msgs := b.ch.waitFor(t, "the marker's answer", func(m []core.OutMessage) bool { return textContaining(m, "Unknown command /marker") })
	if last := msgs[len(msgs)-1]; !strings.Contains(last.Text, "Unknown command /marker") {
		t.Fatalf("the marker's answer is not the last message:\n%s", dump(msgs))
	}
	msgs = msgs[:len(msgs)-1]
	if len(msgs) != want {
		t.Fatalf("%d messages, want %d:\n%s", len(msgs), want, dump(msgs))
	}
	kind := func(m core.OutMessage) string {
		switch {
		case m.Card != nil:
			return "card"
		case strings.HasPrefix(m.Text, "You are"):
			return "/whoami"
		case strings.HasPrefix(m.Text, "I run commands"):
			return "hello"
		case strings.HasPrefix(m.Text, "Commands:"):
			return "/help"
		case strings.Contains(m.Text, "open approval"):
			return "/pending"
		case strings.HasPrefix(m.Text, "Unknown command"):
			return "/nope"
		}
		return m.Text
	}
	for i, m := range msgs {
		wantKind := texts[i%len(texts)]
		if strings.HasPrefix(wantKind, "/run") {
			wantKind = "card"
		}
		if i == want-1 {
			wantKind = "/whoami"
		}
		if got := kind(m); got != wantKind {
			t.Fatalf("message %d is %s, want %s:\n%s", i, got, wantKind, dump(msgs))
		}
	}
	var notDone int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM turns WHERE status <> 'done'`).Scan(&notDone); err != nil || notDone != 0 {
		t.Fatalf("turns not done: %d (%v)", notDone, err)
	}
	if _, err := b.st.VerifyAudit(b.ctx); err != nil {
		t.Fatal(err)
	}
}

// mustScan scans row into dest; a failed read fails the test instead of
// leaving dest at its zero value for the assertion that follows.
func mustScan(t testing.TB, row pgx.Row, dest ...any) {
	t.Helper()
	if err := row.Scan(dest...); err != nil {
		t.Fatalf("scan: %v", err)
	}
}
