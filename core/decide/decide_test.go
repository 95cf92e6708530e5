package decide_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/taskjob"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	owner core.IdentityID     = "test:owner"
	conv  core.ConversationID = "test:chat"
)

type bundle struct {
	ctx context.Context
	st  *store.Store
	key ed25519.PrivateKey
	d   *decide.Decider
	now time.Time
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	d := decide.New(decide.Config{Key: key, TokenTTL: 10 * time.Minute, Preview: 2000})
	return &bundle{ctx: ctx, st: st, key: key, d: d, now: time.Now()}
}

// propose stores a signed request for argv with risk and approvers, as the
// engine does when an action needs approval.
func (b *bundle) propose(t *testing.T, risk cards.Risk, argv ...string) core.ApprovalRequest {
	t.Helper()
	a := signedRequest(t, b.key, time.Now(), risk, argv...)
	if err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) { tx.QueueApproval(a); return nil, nil }); err != nil {
		t.Fatal(err)
	}
	return a
}

// signedRequest is a signed request for argv with risk, proposed at now
// in conv by the owner, as the engine builds one.
func signedRequest(t testing.TB, key ed25519.PrivateKey, now time.Time, risk cards.Risk, argv ...string) core.ApprovalRequest {
	t.Helper()
	act := core.Action{Tool: "shell", Argv: argv, Verify: []verify.Check{verify.ExitCodeZero()}}
	canonical, _ := act.Canonical()
	hash, _ := act.Hash()
	now = now.UTC().Truncate(time.Microsecond)
	a := core.ApprovalRequest{ID: core.ApprovalID(core.NewID()), Channel: "test", Conversation: conv, Requester: owner,
		ActionCanonical: canonical, ActionHash: hash, Intent: "test", Rationale: "test", Risk: risk,
		Approvers: []string{"role:owner"}, Status: core.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(5 * time.Minute)}
	if err := decide.SignRequest(key, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// countingTx counts the reads of approval rows.
type countingTx struct {
	*store.Tx
	reads int
}

func (c *countingTx) GetApproval(ctx context.Context, id core.ApprovalID) (core.ApprovalRequest, error) {
	c.reads++
	return c.Tx.GetApproval(ctx, id)
}

// GetApprovalRoute reads the row too (with its route, in one round trip).
func (c *countingTx) GetApprovalRoute(ctx context.Context, id core.ApprovalID, conv core.ConversationID) (core.ApprovalRequest, core.ApprovalRoute, error, error) {
	c.reads++
	return c.Tx.GetApprovalRoute(ctx, id, conv)
}

// tap decides a tap in a transaction of its own, writing the decision's
// notes; reads is how often an approval row was read.
func (b *bundle) tap(t *testing.T, who core.IdentityID, trust core.Trust, inConv core.ConversationID, card core.ApprovalID, choice string) (r decide.Result, reads int, err error) {
	t.Helper()
	turn := core.Turn{Channel: "test", Conversation: inConv, Sender: who, Tap: &core.Tap{Card: cards.ID(card), Choice: choice}}
	derr := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		c := &countingTx{Tx: tx}
		r, err = b.d.Tap(ctx, c, turn, trust)
		reads = c.reads
		if err != nil {
			return nil, nil // an answer of the test, not a failed transaction
		}
		var entries []audit.Entry
		for _, n := range r.Notes {
			entries = append(entries, audit.Entry{Kind: n.Kind, Actor: string(who), Conversation: string(inConv), Data: n.Data})
		}
		return entries, nil
	})
	if derr != nil {
		t.Fatal(derr)
	}
	return r, reads, err
}

func (b *bundle) status(t *testing.T, id core.ApprovalID) (approval core.ApprovalStatus, executions int) {
	t.Helper()
	a, err := b.st.GetApproval(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM executions WHERE approval_id = $1`, string(id)).Scan(&executions); err != nil {
		t.Fatal(err)
	}
	return a.Status, executions
}

func kinds(r decide.Result) string {
	var ks []string
	for _, n := range r.Notes {
		ks = append(ks, string(n.Kind))
	}
	return strings.Join(ks, " ")
}

// TestApproveLowRisk: one tap mints and consumes a token and queues the
// execution, reading the approval row once.
func TestApproveLowRisk(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.propose(t, cards.RiskLow, "echo", "hi")
	r, reads, err := b.tap(t, owner, core.TrustOwner, conv, a.ID, "approve")
	if err != nil {
		t.Fatal(err)
	}
	if reads != 1 {
		t.Errorf("the approval row was read %d times, want 1", reads)
	}
	if r.Queued != a.ID || r.Refused != "" || r.Outcome() != "approved" || !strings.HasPrefix(r.Toast, "Approved") {
		t.Fatalf("result = %+v", r)
	}
	if got := kinds(r); got != "approval.approved token.minted token.consumed" {
		t.Fatalf("notes = %s", got)
	}
	if len(r.Updates) != 1 || r.Updates[0].Status != cards.StatusRunning {
		t.Fatalf("updates = %+v", r.Updates)
	}
	if st, n := b.status(t, a.ID); st != core.ApprovalApproved || n != 1 {
		t.Fatalf("approval %s with %d executions", st, n)
	}
	var nonces int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM token_nonces WHERE approval_id = $1`, string(a.ID)).Scan(&nonces); err != nil || nonces != 1 {
		t.Fatalf("nonces = %d (%v), want 1", nonces, err)
	}
}

// TestMediumRiskConfirms: approve asks for confirmation; confirm approves.
func TestMediumRiskConfirms(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.propose(t, cards.RiskMedium, "touch", "x")
	r, _, err := b.tap(t, owner, core.TrustOwner, conv, a.ID, "confirm")
	if err != nil || r.Refused != "bad_choice" {
		t.Fatalf("confirm before approve = %+v, %v", r, err)
	}
	r, _, err = b.tap(t, owner, core.TrustOwner, conv, a.ID, "approve")
	if err != nil || r.Refused != "" || r.Queued != "" || len(r.Updates) != 1 || r.Updates[0].Status != cards.StatusConfirming || r.Outcome() != "" {
		t.Fatalf("approve = %+v, %v", r, err)
	}
	if st, n := b.status(t, a.ID); st != core.ApprovalConfirming || n != 0 {
		t.Fatalf("approval %s with %d executions before the confirmation", st, n)
	}
	r, _, err = b.tap(t, owner, core.TrustOwner, conv, a.ID, "confirm")
	if err != nil || r.Queued != a.ID {
		t.Fatalf("confirm = %+v, %v", r, err)
	}
}

// TestRefusals: every refusal changes nothing, says why, and re-sends the
// card only where showing it is right.
func TestRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	evil := core.Action{Tool: "shell", Argv: []string{"touch", "/tmp/pwned"}}
	evilCanonical, _ := evil.Canonical()
	evilHash, _ := evil.Hash()
	tests := []struct {
		name   string
		risk   cards.Risk
		before func(a core.ApprovalRequest) // runs before the tap
		who    core.IdentityID
		trust  core.Trust
		conv   core.ConversationID
		choice string
		reason string
		toast  string
		card   bool // the open card is re-sent
		status core.ApprovalStatus
	}{
		{name: "not an approver", who: "test:friend", trust: core.TrustAuth, reason: "not_approver", toast: "(test:friend) may not decide", card: true},
		{name: "external trust", who: "test:stranger", trust: core.TrustExternal, reason: "not_approver", toast: "may not decide", card: true},
		{name: "another conversation", conv: "test:other", reason: "unknown_card", toast: "Unknown card"},
		{name: "unknown choice", choice: "maybe", reason: "bad_choice", toast: "Unknown choice", card: true},
		{name: "irreversible", risk: cards.RiskIrreversible, reason: "step_up_unavailable", toast: "step-up", card: true},
		{name: "action and hash replaced", before: func(a core.ApprovalRequest) {
			b.exec(t, `UPDATE approvals SET action_canonical = $2, action_hash = $3 WHERE id = $1`, string(a.ID), evilCanonical, evilHash)
		}, reason: "altered", toast: "altered after it was proposed"},
		{name: "risk lowered", risk: cards.RiskMedium, before: func(a core.ApprovalRequest) {
			b.exec(t, `UPDATE approvals SET risk = 'low' WHERE id = $1`, string(a.ID))
		}, reason: "altered", toast: "altered after it was proposed"},
		{name: "approvers widened", who: "test:friend", trust: core.TrustAuth, before: func(a core.ApprovalRequest) {
			b.exec(t, `UPDATE approvals SET approvers = ARRAY['test:friend'] WHERE id = $1`, string(a.ID))
		}, reason: "altered", toast: "altered after it was proposed"},
		{name: "signature removed", before: func(a core.ApprovalRequest) {
			b.exec(t, `UPDATE approvals SET request_sig = NULL WHERE id = $1`, string(a.ID))
		}, reason: "unsigned", toast: "made before requests were signed"},
		{name: "expired", before: func(a core.ApprovalRequest) {
			b.exec(t, `UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1`, string(a.ID))
		}, reason: "expired", toast: "expired", card: true, status: core.ApprovalExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			risk := tt.risk
			if risk == "" {
				risk = cards.RiskLow
			}
			a := b.propose(t, risk, "echo", tt.name)
			if tt.before != nil {
				tt.before(a)
			}
			who, trust, in, choice := owner, core.TrustOwner, conv, "approve"
			if tt.who != "" {
				who, trust = tt.who, tt.trust
			}
			if tt.conv != "" {
				in = tt.conv
			}
			if tt.choice != "" {
				choice = tt.choice
			}
			r, reads, err := b.tap(t, who, trust, in, a.ID, choice)
			if err != nil {
				t.Fatal(err)
			}
			if reads != 1 {
				t.Errorf("the approval row was read %d times, want 1", reads)
			}
			if r.Refused != tt.reason || !strings.Contains(r.Toast, tt.toast) || r.Queued != "" || r.Outcome() != "refused_"+tt.reason {
				t.Fatalf("result = %+v, want refused %s saying %q", r, tt.reason, tt.toast)
			}
			if got := r.Notes[len(r.Notes)-1]; got.Kind != audit.KindApprovalRefused || got.Data["reason"] != tt.reason {
				t.Fatalf("last note = %+v", got)
			}
			if (len(r.Updates) == 1) != tt.card || len(r.Updates) > 1 {
				t.Fatalf("updates = %+v, want the card re-sent: %v", r.Updates, tt.card)
			}
			for _, c := range r.Updates {
				if strings.Contains(c.Command, "pwned") {
					t.Fatalf("an altered request was shown as a card: %+v", c)
				}
			}
			want := tt.status
			if want == "" {
				want = core.ApprovalPending
			}
			if st, n := b.status(t, a.ID); st != want || n != 0 {
				t.Fatalf("approval %s with %d executions, want %s and none", st, n, want)
			}
		})
	}
}

// stepJobs counts the task step jobs queued for task-1.
func (b *bundle) stepJobs(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.st.Pool().QueryRow(b.ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'task' = 'task-1'`,
		taskjob.Args{}.Kind()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.st.Pool().Exec(b.ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// TestDecidedCards: a decline is final; a later tap is told so and shown
// the card as it stands. A card that is no approval request is the
// caller's to recognise.
func TestDecidedCards(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.propose(t, cards.RiskLow, "echo", "no")
	b.exec(t, `UPDATE approvals SET task_id = 'task-1' WHERE id = $1`, a.ID) // a task's call
	r, _, err := b.tap(t, owner, core.TrustOwner, conv, a.ID, "decline")
	if err != nil || r.Declined != a.ID || r.Outcome() != "declined" || len(r.Updates) != 1 || r.Updates[0].Status != cards.StatusDeclined {
		t.Fatalf("decline = %+v, %v", r, err)
	}
	// The task learns of it by a step job committed with the decline.
	if n := b.stepJobs(t); n != 1 {
		t.Fatalf("%d step jobs after declining a task's call, want 1", n)
	}
	r, _, err = b.tap(t, owner, core.TrustOwner, conv, a.ID, "approve")
	if err != nil || r.Refused != "already_decided" || !strings.Contains(r.Toast, "Already decided (declined)") ||
		len(r.Updates) != 1 || r.Updates[0].Status != cards.StatusDeclined {
		t.Fatalf("tap after decline = %+v, %v", r, err)
	}
	if st, n := b.status(t, a.ID); st != core.ApprovalDeclined || n != 0 {
		t.Fatalf("approval %s with %d executions", st, n)
	}

	ok := b.propose(t, cards.RiskLow, "echo", "yes")
	if _, _, err := b.tap(t, owner, core.TrustOwner, conv, ok.ID, "approve"); err != nil {
		t.Fatal(err)
	}
	r, _, err = b.tap(t, owner, core.TrustOwner, conv, ok.ID, "approve")
	if err != nil || r.Refused != "already_decided" || len(r.Updates) != 1 || r.Updates[0].Status != cards.StatusRunning {
		t.Fatalf("second approve = %+v, %v", r, err)
	}
	if _, n := b.status(t, ok.ID); n != 1 {
		t.Fatalf("executions = %d, want exactly 1", n)
	}
	if n := b.stepJobs(t); n != 1 {
		t.Fatalf("%d step jobs, want still 1 (a decline after it, an approval: none)", n)
	}

	if _, _, err := b.tap(t, owner, core.TrustOwner, conv, "aaaaaaaaaaaaaaaaaaaaaaaaaa", "approve"); !errors.Is(err, decide.ErrNoApproval) {
		t.Fatalf("unknown card: %v, want ErrNoApproval", err)
	}
}

// TestApproveOnPolicysBehalf: a policy approval checks the request's
// signature like a tap.
func TestApproveOnPolicysBehalf(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.propose(t, cards.RiskLow, "echo", "auto")
	b.exec(t, `UPDATE approvals SET intent = 'edited' WHERE id = $1`, string(a.ID))
	var r decide.Result
	var err error
	approve := func(id core.ApprovalID) {
		if derr := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			stored, gerr := tx.GetApproval(ctx, id)
			if gerr != nil {
				return nil, gerr
			}
			r, err = b.d.Approve(ctx, tx, stored, "policy:test")
			return nil, nil
		}); derr != nil {
			t.Fatal(derr)
		}
	}
	approve(a.ID)
	if err == nil || !strings.Contains(err.Error(), "altered") {
		t.Fatalf("approving an altered request: %+v, %v", r, err)
	}
	good := b.propose(t, cards.RiskLow, "echo", "auto")
	approve(good.ID)
	if err != nil || r.Queued != good.ID {
		t.Fatalf("policy approval = %+v, %v", r, err)
	}
}

func TestMayDecide(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		risk      cards.Risk
		approvers []string
		who       core.IdentityID
		trust     core.Trust
		want      bool
	}{
		{"owner role, owner", cards.RiskLow, []string{"role:owner"}, owner, core.TrustOwner, true},
		{"owner role, auth", cards.RiskLow, []string{"role:owner"}, "test:friend", core.TrustAuth, false},
		{"auth role, auth", cards.RiskLow, []string{"role:auth"}, "test:friend", core.TrustAuth, true},
		{"auth role, owner", cards.RiskMedium, []string{"role:auth"}, owner, core.TrustOwner, true},
		{"listed identity", cards.RiskLow, []string{"test:friend"}, "test:friend", core.TrustAuth, true},
		{"listed identity, external", cards.RiskLow, []string{"test:friend"}, "test:friend", core.TrustExternal, false},
		{"high risk needs an owner", cards.RiskHigh, []string{"role:auth"}, "test:friend", core.TrustAuth, false},
		{"high risk, owner", cards.RiskHigh, []string{"role:owner"}, owner, core.TrustOwner, true},
		{"nobody listed", cards.RiskLow, nil, owner, core.TrustOwner, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := core.ApprovalRequest{Risk: tt.risk, Approvers: tt.approvers}
			if got := decide.MayDecide(a, tt.who, tt.trust); got != tt.want {
				t.Fatalf("MayDecide = %v, want %v", got, tt.want)
			}
		})
	}
}
