package engine_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/approval"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/sandbox"
	"github.com/silas-gateway/silas/core/verify"
)

// recordingSandbox remembers every program it was asked to run.
type recordingSandbox struct {
	core.Sandbox
	mu   sync.Mutex
	runs [][]string
}

func (r *recordingSandbox) Run(ctx context.Context, req core.ExecRequest) (core.ExecResult, error) {
	r.mu.Lock()
	r.runs = append(r.runs, slices.Clone(req.Argv))
	r.mu.Unlock()
	return r.Sandbox.Run(ctx, req)
}

func (r *recordingSandbox) ran() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

// setupKey is setup that also returns the engine's signing key.
func setupKey(t *testing.T) (*bundle, ed25519.PrivateKey) {
	t.Helper()
	var key ed25519.PrivateKey
	ch := newFakeChannel()
	b := setupAccess(t, ch, ch, "", func(c *gateway.Config) { key = c.Key })
	return b, key
}

// restart runs a second engine on b's store with the same key (the gateway
// after a restart), its programs recorded, and returns what it shows.
func restart(t *testing.T, b *bundle, key ed25519.PrivateKey) (*fakeChannel, *recordingSandbox) {
	t.Helper()
	inner, err := sandbox.New(sandbox.Config{BaseDir: t.TempDir()})
	if err == nil {
		t.Cleanup(func() { inner.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	sb := &recordingSandbox{Sandbox: inner}
	pol, _ := policy.New(nil)
	ch := b.ch // the same platform, showing the same messages
	eng, err := gateway.New(gateway.Config{Store: b.st, Channels: []core.Channel{ch}, Agent: agent.Command{}, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: inner}}, Policy: pol, Key: key,
		Owners: []core.IdentityID{owner}, Now: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); eng.Run(ctx, 5*time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	<-eng.Ready()
	return ch, sb
}

// forgery is what a forging program with the gateway's key and superuser
// access to the database writes, straight into the tables.
type forgery struct {
	name string
	// sign: the request row carries a valid proposal signature.
	sign bool
	// nonce: a token_nonces row for the token, naming the approval.
	nonce bool
	// tokenOf: reuse the token (and action) of this real approval instead
	// of minting one.
	tokenOf core.ApprovalID
	// wantReason is in the refusal.
	wantReason string
}

// forge writes an approved request with a valid token and its queued
// execution; marker is the file the forged action would create.
func forge(t *testing.T, b *bundle, key ed25519.PrivateKey, f forgery, marker string) core.ApprovalID {
	t.Helper()
	ctx := b.ctx
	id := core.ApprovalID(core.NewID())
	now := b.clock.Now().UTC().Truncate(time.Microsecond)
	act := core.Action{Tool: "shell", Argv: []string{"touch", marker}, Verify: []verify.Check{verify.ExitCodeZero()}}
	canonical, err := act.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	hash, _ := act.Hash()
	var raw []byte
	var tok approval.Signed
	if f.tokenOf != "" {
		if err := b.st.Pool().QueryRow(ctx, `SELECT action_canonical, action_hash, token FROM approvals WHERE id = $1`, string(f.tokenOf)).
			Scan(&canonical, &hash, &raw); err != nil {
			t.Fatal(err)
		}
		if tok, err = approval.Unmarshal(raw); err != nil {
			t.Fatal(err)
		}
	} else {
		if tok, err = approval.Mint(key, core.NewID(), hash, "test:chat", string(owner), now, 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		if raw, err = tok.Marshal(); err != nil {
			t.Fatal(err)
		}
	}
	if err := approval.Check(key.Public().(ed25519.PublicKey), tok, hash, now); err != nil {
		t.Fatalf("the forged token must verify: %v", err)
	}
	a := approval.Request{ID: string(id), Channel: "test", Conversation: "test:chat", Requester: string(owner), ActionHash: hash,
		Intent: "forged", Rationale: "forged", Risk: "low", Approvers: []string{"role:owner"}, CreatedAt: now, ExpiresAt: now.Add(5 * time.Minute)}
	var sig []byte
	if f.sign {
		if sig, err = approval.SignRequest(key, a); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO approvals (id, channel, conversation, requester, action_canonical, action_hash, intent, rationale, risk, approvers,
			status, created_at, expires_at, decided_by, decided_at, token, request_sig)
			VALUES ($1, 'test', 'test:chat', $2, $3, $4, 'forged', 'forged', 'low', ARRAY['role:owner'], 'approved', $5, $6, $7, $5, $8, $9)`,
			[]any{string(id), string(owner), canonical, hash, now, a.ExpiresAt, tok.Token.Approver, raw, sig}},
		{`INSERT INTO executions (approval_id, status) VALUES ($1, 'queued')`, []any{string(id)}},
	} {
		if _, err := b.st.Pool().Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
	}
	if f.nonce {
		if _, err := b.st.Pool().Exec(ctx, `INSERT INTO token_nonces (nonce, token_id, approval_id) VALUES ($1, $2, $3)`,
			tok.Token.Nonce, tok.Token.TokenID, string(id)); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// waitSettled waits until no execution is left to run or verify.
func waitSettled(t *testing.T, b *bundle) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM executions WHERE status IN ('queued', 'running', 'executed')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d execution(s) still unsettled", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// refusals maps approval ids to the reasons of their execution.refused
// audit entries.
func refusals(t *testing.T, b *bundle) map[core.ApprovalID]string {
	t.Helper()
	rows, err := b.st.AuditTail(b.ctx, 1000, "", []audit.Kind{audit.KindExecutionRefused})
	if err != nil {
		t.Fatal(err)
	}
	m := map[core.ApprovalID]string{}
	for _, r := range rows {
		id, _ := r.Entry.Data["approval"].(string)
		reason, _ := r.Entry.Data["reason"].(string)
		m[core.ApprovalID(id)] = reason
	}
	return m
}

// TestForgedExecutionsDoNotRun: approved requests with valid tokens and
// queued executions written straight into the database (as a forging
// program with the gateway's key and superuser access did) run nothing
// after a restart: each is refused, shown as refused in the chat and
// audited with its reason, and the audit chain still verifies. A real
// decision whose process stopped before executing still runs after the
// same restart, and a real execution set back to queued does not run twice.
func TestForgedExecutionsDoNotRun(t *testing.T) {
	t.Parallel()
	b, key := setupKey(t)
	dir := t.TempDir()

	// A real approval that ran; its row is set back to queued below.
	b.send(t, owner, "/run echo first")
	first := b.pendingCard(t, "echo first")
	b.tap(t, owner, first.ID, "approve")
	b.waitStatus(t, first.ID, cards.StatusDone)

	// A real approval decided just before the gateway stopped: its
	// execution is still queued.
	b.hold = func(core.ApprovalID) bool { return true }
	b.send(t, owner, "/run echo genuine")
	genuine := b.pendingCard(t, "echo genuine")
	b.tap(t, owner, genuine.ID, "approve")
	b.waitStatus(t, genuine.ID, cards.StatusRunning)
	b.stop()

	if _, err := b.st.Pool().Exec(b.ctx, `UPDATE executions SET status = 'queued', result = NULL, report = NULL, reason = NULL,
		started_at = NULL, finished_at = NULL WHERE approval_id = $1`, string(first.ID)); err != nil {
		t.Fatal(err)
	}
	forgeries := []forgery{
		{name: "token and execution only", wantReason: "the request was not signed"},
		{name: "signed request and token", sign: true, wantReason: "no recorded decision consumed this approval's token (its nonce was not consumed"},
		{name: "signed request, token and consumed nonce", sign: true, nonce: true,
			wantReason: "no recorded decision consumed this approval's token (the audit log has no such decision)"},
		{name: "a real decision's token on a copied request", sign: true, tokenOf: core.ApprovalID(genuine.ID),
			wantReason: "no recorded decision consumed this approval's token (its nonce was not consumed"},
	}
	want := map[core.ApprovalID]forgery{}
	for i, f := range forgeries {
		marker := filepath.Join(dir, "forged-"+string(rune('a'+i)))
		want[forge(t, b, key, f, marker)] = f
	}

	ch, sb := restart(t, b, key)
	waitSettled(t, b)

	if got := sb.ran(); len(got) != 1 || !slices.Equal(got[0], []string{"echo", "genuine"}) {
		t.Fatalf("after the restart the sandbox ran %q, want only the real decision's echo genuine", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("a forged action ran: %v", entries)
	}
	reasons := refusals(t, b)
	for id, f := range want {
		t.Run(f.name, func(t *testing.T) {
			var status, reason string
			if err := b.st.Pool().QueryRow(b.ctx, `SELECT status, COALESCE(reason, '') FROM executions WHERE approval_id = $1`, string(id)).
				Scan(&status, &reason); err != nil {
				t.Fatal(err)
			}
			if status != "refused" || !strings.Contains(reason, f.wantReason) {
				t.Fatalf("execution %s, %q; want refused, %q", status, reason, f.wantReason)
			}
			if reasons[id] != reason {
				t.Fatalf("audit says %q, execution says %q", reasons[id], reason)
			}
			// The chat is told (a new message: the forged card was never sent).
			ch.waitFor(t, "refused card", func(m []core.OutMessage) bool {
				c := cardWith(m, func(c *cards.Card) bool { return c.ID == cards.ID(id) })
				return c != nil && c.Status == cards.StatusRefused && strings.Contains(c.Outcome, f.wantReason) && len(c.Choices) == 0
			})
		})
	}
	t.Run("real execution set back to queued", func(t *testing.T) {
		var status string
		mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT status FROM executions WHERE approval_id = $1`, string(first.ID)), &status)
		if r := reasons[core.ApprovalID(first.ID)]; status != "refused" || !strings.Contains(r, "started before") {
			t.Fatalf("execution %s, audited reason %q", status, r)
		}
	})
	t.Run("real decision resumed", func(t *testing.T) {
		ch.waitFor(t, "genuine done", func(m []core.OutMessage) bool {
			return cardWith(m, func(c *cards.Card) bool { return c.ID == genuine.ID && c.Status == cards.StatusDone }) != nil
		})
	})
	if _, err := b.st.VerifyAudit(b.ctx); err != nil {
		t.Fatalf("audit chain after the refusals: %v", err)
	}
}

// TestHandWrittenDecisionEntry: a forger who also writes the decision's
// audit entry by hand, without recomputing the chain, still runs nothing;
// the entry is what breaks the chain.
func TestHandWrittenDecisionEntry(t *testing.T) {
	t.Parallel()
	b, key := setupKey(t)
	b.send(t, owner, "/whoami") // the chain has a head to write after
	b.ch.waitFor(t, "whoami", func(m []core.OutMessage) bool { return textContaining(m, "You are") })
	b.stop()
	dir := t.TempDir()
	f := forgery{name: "hand-written token.consumed", sign: true, nonce: true,
		wantReason: "no recorded decision consumed this approval's token (the decision's audit entry is not linked"}
	id := forge(t, b, key, f, filepath.Join(dir, "forged"))
	var raw []byte
	mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT token FROM approvals WHERE id = $1`, string(id)), &raw)
	tok, err := approval.Unmarshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 32)
	rand.Read(junk)
	var seq int64
	if err := b.st.Pool().QueryRow(b.ctx, `INSERT INTO audit_log (seq, at, kind, actor, conversation, data, prev_hash, hash)
		SELECT seq + 1, now(), 'token.consumed', $1, 'test:chat', jsonb_build_object('approval', $2::text, 'token_id', $3::text), hash, $4
		FROM audit_log ORDER BY seq DESC LIMIT 1 RETURNING seq`, string(owner), string(id), tok.Token.TokenID, junk).Scan(&seq); err != nil {
		t.Fatal(err)
	}

	_, sb := restart(t, b, key)
	waitSettled(t, b)
	if got := sb.ran(); len(got) != 0 {
		t.Fatalf("the sandbox ran %q", got)
	}
	var status, reason string
	mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT status, COALESCE(reason, '') FROM executions WHERE approval_id = $1`, string(id)), &status, &reason)
	if status != "refused" || !strings.Contains(reason, f.wantReason) || refusals(t, b)[id] != reason {
		t.Fatalf("execution %s, %q; want refused, %q, audited", status, reason, f.wantReason)
	}
	var broken *audit.BrokenError
	if _, err := b.st.VerifyAudit(b.ctx); !errors.As(err, &broken) || broken.Seq != seq {
		t.Fatalf("VerifyAudit = %v, want the chain broken at the hand-written entry %d", err, seq)
	}
}

// TestAlteredRequestIsNotApproved: a pending request edited in the
// database after its card was sent cannot be approved: the tap runs
// nothing, the tapper is told, the refusal is audited and the altered
// request is not shown as a card. An untouched request next to them runs.
func TestAlteredRequestIsNotApproved(t *testing.T) {
	t.Parallel()
	fc := newFakeChannel()
	tc := &toastChannel{fakeChannel: fc}
	b := setupChannel(t, tc, fc)
	marker := filepath.Join(t.TempDir(), "pwned")
	evil := core.Action{Tool: "shell", Argv: []string{"touch", marker}, Verify: []verify.Check{verify.ExitCodeZero()}}
	evilCanonical, _ := evil.Canonical()
	evilHash, _ := evil.Hash()

	tests := []struct {
		name   string
		cmd    string
		tapper core.IdentityID
		sql    string
		args   []any
		reason string
		toast  string
	}{
		{"action and hash replaced", "echo a", owner, `UPDATE approvals SET action_canonical = $2, action_hash = $3 WHERE id = $1`,
			[]any{evilCanonical, evilHash}, "altered", "This request was altered after it was proposed"},
		{"risk lowered", "touch made-by-silas-b", owner, `UPDATE approvals SET risk = 'low' WHERE id = $1`, nil,
			"altered", "This request was altered after it was proposed"},
		{"approvers widened", "echo c", "test:friend", `UPDATE approvals SET approvers = ARRAY['test:friend'] WHERE id = $1`, nil,
			"altered", "This request was altered after it was proposed"},
		{"preview altered", "echo e", owner, `UPDATE approvals SET preview = 'Program: echo (harmless)' WHERE id = $1`, nil,
			"altered", "This request was altered after it was proposed"},
		{"signature removed", "echo d", owner, `UPDATE approvals SET request_sig = NULL WHERE id = $1`, nil,
			"unsigned", "made before requests were signed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b.send(t, owner, "/run "+tt.cmd)
			c := b.pendingCard(t, tt.cmd)
			if _, err := b.st.Pool().Exec(b.ctx, tt.sql, append([]any{string(c.ID)}, tt.args...)...); err != nil {
				t.Fatal(err)
			}
			before := len(tc.toastList())
			b.tap(t, tt.tapper, c.ID, "approve")
			deadline := time.Now().Add(10 * time.Second)
			for len(tc.toastList()) == before && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			toasts := tc.toastList()
			if len(toasts) != before+1 || !strings.Contains(toasts[before], tt.toast) || !strings.Contains(toasts[before], "nothing was run") {
				t.Fatalf("toasts = %q, want one saying %q and nothing was run", toasts[before:], tt.toast)
			}
			var status string
			var execs int
			mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT status FROM approvals WHERE id = $1`, string(c.ID)), &status)
			mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM executions WHERE approval_id = $1`, string(c.ID)), &execs)
			if status != "pending" || execs != 0 {
				t.Fatalf("approval %s with %d execution(s), want pending and none", status, execs)
			}
			rows, err := b.st.AuditTail(b.ctx, 1, "test:chat", []audit.Kind{audit.KindApprovalRefused})
			if err != nil || len(rows) != 1 || rows[0].Entry.Data["approval"] != string(c.ID) || rows[0].Entry.Data["reason"] != tt.reason {
				t.Fatalf("last refusal audited = %+v (%v), want %s for %s", rows, err, tt.reason, c.ID)
			}
		})
	}
	b.send(t, owner, "/pending")
	fc.waitFor(t, "pending", func(m []core.OutMessage) bool {
		return textContaining(m, fmt.Sprintf("%d open approval(s)", len(tests))) &&
			strings.Count(dump(m), "altered in storage or is unsigned; it cannot be approved") == len(tests)
	})
	b.send(t, owner, "/run echo untouched")
	c := b.pendingCard(t, "echo untouched")
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusDone)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the altered action ran")
	}
	for _, m := range fc.waitFor(t, "all", func([]core.OutMessage) bool { return true }) {
		if m.Card != nil && strings.Contains(m.Card.Command, marker) {
			t.Fatalf("the altered request was shown as a card: %+v", m.Card)
		}
	}
	if _, err := b.st.VerifyAudit(b.ctx); err != nil {
		t.Fatal(err)
	}
}

// An execution that was running when the gateway stopped is not run again:
// its card says "interrupted", a status of its own.
func TestInterruptedCardStatus(t *testing.T) {
	t.Parallel()
	b, key := setupKey(t)
	b.hold = func(core.ApprovalID) bool { return true }
	b.send(t, owner, "/run echo interrupted")
	c := b.pendingCard(t, "echo interrupted")
	b.tap(t, owner, c.ID, "approve")
	b.waitStatus(t, c.ID, cards.StatusRunning)
	b.stop()
	// The crash happened mid-run: the row says running.
	if _, err := b.st.Pool().Exec(b.ctx, `UPDATE executions SET status = 'running', started_at = now() WHERE approval_id = $1`, string(c.ID)); err != nil {
		t.Fatal(err)
	}
	_, sb := restart(t, b, key)
	got := b.waitStatus(t, c.ID, cards.StatusInterrupted)
	if !strings.Contains(got.Outcome, "not re-run") || len(got.Choices) != 0 {
		t.Fatalf("interrupted card = %+v", got)
	}
	if runs := sb.ran(); len(runs) != 0 {
		t.Fatalf("the interrupted action ran again: %q", runs)
	}
}

// TestClaimChecksTheRowsToken: the claim of an execution this process's
// tap approved reads the recorded decision of the token that decision
// minted together with the approval row; the gate still judges the row
// as it is when claimed. A row whose token was replaced after the
// decision (by a validly signed token whose nonce nobody consumed), or
// whose consumed nonce was deleted, is refused, not run.
func TestClaimChecksTheRowsToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(t *testing.T, b *bundle, key ed25519.PrivateKey, id core.ApprovalID)
		wantR string
	}{
		{"token replaced", func(t *testing.T, b *bundle, key ed25519.PrivateKey, id core.ApprovalID) {
			// The same token id, another nonce: only the nonce tells it
			// from the decision's token.
			var hash, raw []byte
			mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT action_hash, token FROM approvals WHERE id = $1`, string(id)), &hash, &raw)
			old, err := approval.Unmarshal(raw)
			if err != nil {
				t.Error(err)
				return
			}
			tok, err := approval.Mint(key, old.Token.TokenID, hash, "test:chat", string(owner), b.clock.Now(), 10*time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			raw, _ = tok.Marshal()
			if _, err := b.st.Pool().Exec(b.ctx, `UPDATE approvals SET token = $2 WHERE id = $1`, string(id), raw); err != nil {
				t.Error(err)
			}
		}, "its nonce was not consumed"},
		{"consumed nonce deleted", func(t *testing.T, b *bundle, _ ed25519.PrivateKey, id core.ApprovalID) {
			if _, err := b.st.Pool().Exec(b.ctx, `DELETE FROM token_nonces WHERE approval_id = $1`, string(id)); err != nil {
				t.Error(err)
			}
		}, "its nonce was not consumed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, key := setupKey(t)
			b.before = func(id core.ApprovalID) { tc.edit(t, b, key, id) }
			b.send(t, owner, "/run echo edited")
			c := b.pendingCard(t, "echo edited")
			b.tap(t, owner, c.ID, "approve")
			b.waitStatus(t, c.ID, cards.StatusRefused)
			var status, reason string
			mustScan(t, b.st.Pool().QueryRow(b.ctx, `SELECT status, COALESCE(reason, '') FROM executions WHERE approval_id = $1`, string(c.ID)), &status, &reason)
			if status != "refused" || !strings.Contains(reason, tc.wantR) {
				t.Fatalf("execution %s, %q; want refused, %q", status, reason, tc.wantR)
			}
		})
	}
}
