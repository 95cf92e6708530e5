package stepup_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/stepup"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/core/tracing"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/softauthn"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	owner  core.IdentityID     = "test:owner"
	conv   core.ConversationID = "test:chat"
	origin                     = "https://localhost:8443"
)

// runs records what the step-up started.
type runs struct {
	mu      sync.Mutex
	started []core.ApprovalID
}

func (r *runs) RefuseUnready(context.Context, execute.Tx, core.ApprovalRequest, core.IdentityID) (*execute.Unready, error) {
	return nil, nil
}

func (r *runs) Start(id core.ApprovalID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, id)
}

func (r *runs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.started)
}

type bundle struct {
	ctx  context.Context
	st   *store.Store
	key  ed25519.PrivateKey
	d    *decide.Decider
	s    *stepup.Service
	runs *runs
	auth *softauthn.Authenticator
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	s, err := stepup.New(stepup.Config{PublicURL: origin, Key: key.Public().(ed25519.PublicKey), Logger: slog.New(slog.DiscardHandler)}, st)
	if err != nil {
		t.Fatal(err)
	}
	d := decide.New(decide.Config{Key: key, TokenTTL: 10 * time.Minute, Preview: 2000, StepUp: s})
	b := &bundle{ctx: ctx, st: st, key: key, d: d, s: s, runs: &runs{}}
	s.Bind(d, b.runs, nil)
	b.auth, err = softauthn.New(origin)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func refToken(t *testing.T, link, path string) (ref, token string) {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil || !strings.HasPrefix(u.Path, path) || u.Scheme+"://"+u.Host != origin {
		t.Fatalf("link %q is not under %s%s", link, origin, path)
	}
	return strings.TrimPrefix(u.Path, path), u.Query().Get("t")
}

// enroll registers b.auth as the owner's passkey through an enrollment link.
func (b *bundle) enroll(t *testing.T) {
	t.Helper()
	link, _, err := b.s.Enroll(b.ctx, owner, "test key")
	if err != nil {
		t.Fatal(err)
	}
	ref, token := refToken(t, link, stepup.EnrollPath)
	v, err := b.s.EnrollPage(b.ctx, ref, token)
	if err != nil {
		t.Fatal(err)
	}
	body, err := b.auth.Register(v.Options)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.s.FinishEnroll(b.ctx, ref, token, body); err != nil {
		t.Fatalf("FinishEnroll: %v", err)
	}
	if err := b.s.FinishEnroll(b.ctx, ref, token, body); !isRefusal(err, "link_used") {
		t.Fatalf("a second registration through the same link: %v, want link_used", err)
	}
}

func isRefusal(err error, reason string) bool {
	var r *stepup.Refusal
	return errors.As(err, &r) && r.Reason == reason
}

// propose stores a signed irreversible request, as the engine does.
func (b *bundle) propose(t *testing.T, argv ...string) core.ApprovalRequest {
	t.Helper()
	act := core.Action{Tool: "shell", Argv: argv, Verify: []verify.Check{verify.ExitCodeZero()}}
	canonical, _ := act.Canonical()
	hash, _ := act.Hash()
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := core.ApprovalRequest{ID: core.ApprovalID(core.NewID()), Channel: "test", Conversation: conv, Requester: owner,
		ActionCanonical: canonical, ActionHash: hash, Intent: "wipe the disk", Rationale: "asked for", Risk: cards.RiskIrreversible,
		Approvers: []string{"role:owner"}, Status: core.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(10 * time.Minute)}
	if err := decide.SignRequest(b.key, &a); err != nil {
		t.Fatal(err)
	}
	if err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) { tx.QueueApproval(a); return nil, nil }); err != nil {
		t.Fatal(err)
	}
	return a
}

// tap decides a tap by the owner in its own transaction.
func (b *bundle) tap(t *testing.T, id core.ApprovalID, choice string) decide.Result {
	t.Helper()
	var r decide.Result
	turn := core.Turn{Channel: "test", Conversation: conv, Sender: owner, Tap: &core.Tap{Card: cards.ID(id), Choice: choice}}
	err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		var err error
		if r, err = b.d.Tap(ctx, tx, turn, core.TrustOwner); err != nil {
			return nil, err
		}
		var entries []audit.Entry
		for _, n := range r.Notes {
			entries = append(entries, audit.Entry{Kind: n.Kind, Actor: string(owner), Conversation: string(conv), Data: n.Data})
		}
		return entries, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// stepUpLink taps approve on request id and returns the step-up link's
// ref and token from the card.
func (b *bundle) stepUpLink(t *testing.T, id core.ApprovalID) (ref, token string) {
	t.Helper()
	r := b.tap(t, id, "approve")
	if r.Refused != "" || r.Queued != "" || len(r.Updates) != 1 || r.Updates[0].Link == nil {
		t.Fatalf("approve tap on an irreversible card = %+v, want a card with a step-up link and nothing queued", r)
	}
	c := r.Updates[0]
	if c.Link.Label != "Confirm with passkey" || c.Status != cards.StatusConfirming {
		t.Fatalf("card = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return refToken(t, c.Link.URL, stepup.StepUpPath)
}

func (b *bundle) status(t *testing.T, id core.ApprovalID) core.ApprovalStatus {
	t.Helper()
	a, err := b.st.GetApproval(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return a.Status
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.st.Pool().Exec(b.ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// entries returns the data of the audit entries of kind, oldest first.
func (b *bundle) entries(t *testing.T, kind audit.Kind) []map[string]any {
	t.Helper()
	rows, err := b.st.Pool().Query(b.ctx, `SELECT data FROM audit_log WHERE kind = $1 ORDER BY seq`, string(kind))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestStepUpApproves: a registered passkey's assertion over the page's
// challenge approves the irreversible request once, with its token, and
// the audit log says it was a passkey; the tap alone never approves.
func TestStepUpApproves(t *testing.T) {
	b := setup(t)
	a := b.propose(t, "mkfs.ext4", "/dev/sdz")

	// Without a passkey the tap is refused and says how to get one.
	r := b.tap(t, a.ID, "approve")
	if r.Refused != decide.RefusedNoPasskey || !strings.Contains(r.Toast, "silas passkey add") {
		t.Fatalf("tap without a passkey = %+v", r)
	}
	b.enroll(t)
	keys, err := b.st.Passkeys(b.ctx, owner)
	if err != nil || len(keys) != 1 || keys[0].Name != "test key" {
		t.Fatalf("passkeys = %+v, %v", keys, err)
	}

	ref, token := b.stepUpLink(t, a.ID)
	// The confirm chip (and any tap) does not run it.
	if r := b.tap(t, a.ID, "confirm"); r.Refused == "" || r.Queued != "" {
		t.Fatalf("confirm tap on an irreversible card = %+v, want refused", r)
	}
	if got := b.status(t, a.ID); got != core.ApprovalConfirming {
		t.Fatalf("status after taps = %s, want confirming", got)
	}
	v, err := b.s.StepUpPage(b.ctx, ref, token)
	if err != nil {
		t.Fatal(err)
	}
	if v.Command != "mkfs.ext4 /dev/sdz" || v.HashPrefix != stepup.HashPrefix(a.ActionHash) || len(v.HashPrefix) != 16 || v.Approval != string(a.ID) {
		t.Fatalf("page = %+v", v)
	}
	// Opening the page twice uses nothing up.
	if _, err := b.s.StepUpPage(b.ctx, ref, token); err != nil {
		t.Fatal(err)
	}
	if _, err := b.s.StepUpPage(b.ctx, ref, token+"x"); !errors.Is(err, stepup.ErrLinkNotFound) {
		t.Fatalf("page with a wrong token: %v", err)
	}
	body, err := b.auth.Assert(v.Options)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.s.FinishStepUp(b.ctx, ref, token, body); err != nil {
		t.Fatalf("FinishStepUp: %v", err)
	}
	if got := b.status(t, a.ID); got != core.ApprovalApproved {
		t.Fatalf("status = %s, want approved", got)
	}
	if n := b.runs.count(); n != 1 {
		t.Fatalf("executions started = %d, want 1", n)
	}
	stored, _ := b.st.GetApproval(b.ctx, a.ID)
	if len(stored.Token) == 0 || stored.DecidedBy != owner {
		t.Fatalf("approved request = %+v: no token or decider", stored)
	}
	approved := b.entries(t, audit.KindApprovalApproved)
	if len(approved) != 1 || approved[0]["approval_strength"] != "passkey" || approved[0]["credential"] != stepup.CredentialText(b.auth.ID()) || approved[0]["sign_count"] != float64(1) {
		t.Fatalf("approval.approved entries = %v", approved)
	}
	if v := b.entries(t, audit.KindStepUpVerified); len(v) != 1 || v[0]["user_verified"] != true {
		t.Fatalf("stepup.verified entries = %v", v)
	}
	if n := len(b.entries(t, audit.KindTokenConsumed)); n != 1 {
		t.Fatalf("token.consumed entries = %d, want 1", n)
	}

	// The same answer again: the link is used up, nothing runs twice.
	if err := b.s.FinishStepUp(b.ctx, ref, token, body); !isRefusal(err, "link_used") {
		t.Fatalf("replayed assertion: %v, want link_used", err)
	}
	if n := b.runs.count(); n != 1 {
		t.Fatalf("executions started = %d after a replay, want 1", n)
	}
}

// TestStepUpRefusals: every way an assertion or a link can be wrong is
// refused and audited, and the request stays undecided.
func TestStepUpRefusals(t *testing.T) {
	b := setup(t)
	b.enroll(t)
	tests := []struct {
		name   string
		answer func(t *testing.T, a core.ApprovalRequest, ref, token string) []byte
		reason string
	}{
		{name: "assertion for another request's challenge", reason: "challenge_mismatch",
			answer: func(t *testing.T, _ core.ApprovalRequest, _, _ string) []byte {
				other := b.propose(t, "dd", "if=/dev/zero", "of=/dev/sdy")
				oref, otoken := b.stepUpLink(t, other.ID)
				v, err := b.s.StepUpPage(b.ctx, oref, otoken)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := b.auth.Assert(v.Options)
				return body
			}},
		{name: "replayed assertion of an earlier step-up", reason: "challenge_mismatch",
			answer: func(t *testing.T, _ core.ApprovalRequest, _, _ string) []byte {
				other := b.propose(t, "shred", "/dev/sdx")
				oref, otoken := b.stepUpLink(t, other.ID)
				v, _ := b.s.StepUpPage(b.ctx, oref, otoken)
				body, _ := b.auth.Assert(v.Options)
				if err := b.s.FinishStepUp(b.ctx, oref, otoken, body); err != nil {
					t.Fatal(err)
				}
				return body
			}},
		{name: "user verification absent", reason: "user_verification",
			answer: func(t *testing.T, _ core.ApprovalRequest, ref, token string) []byte {
				v, _ := b.s.StepUpPage(b.ctx, ref, token)
				b.auth.NoUV = true
				defer func() { b.auth.NoUV = false }()
				body, _ := b.auth.Assert(v.Options)
				return body
			}},
		{name: "link older than its lifetime", reason: "link_expired",
			answer: func(t *testing.T, _ core.ApprovalRequest, ref, token string) []byte {
				v, _ := b.s.StepUpPage(b.ctx, ref, token)
				b.exec(t, `UPDATE passkey_links SET expires_at = now() - interval '1 second' WHERE ref = $1`, ref)
				if _, err := b.s.StepUpPage(b.ctx, ref, token); !errors.Is(err, stepup.ErrLinkExpired) {
					t.Fatalf("page of an expired link: %v", err)
				}
				body, _ := b.auth.Assert(v.Options)
				return body
			}},
		{name: "link used twice", reason: "link_used",
			answer: func(t *testing.T, _ core.ApprovalRequest, ref, token string) []byte {
				v, _ := b.s.StepUpPage(b.ctx, ref, token)
				b.auth.NoUV = true
				bad, _ := b.auth.Assert(v.Options)
				b.auth.NoUV = false
				if err := b.s.FinishStepUp(b.ctx, ref, token, bad); !isRefusal(err, "user_verification") {
					t.Fatalf("first use: %v", err)
				}
				body, _ := b.auth.Assert(v.Options)
				return body
			}},
		{name: "action edited in the database after the card", reason: "challenge_mismatch",
			answer: func(t *testing.T, a core.ApprovalRequest, ref, token string) []byte {
				v, _ := b.s.StepUpPage(b.ctx, ref, token)
				evil := core.Action{Tool: "shell", Argv: []string{"rm", "-rf", "/"}}
				canonical, _ := evil.Canonical()
				hash, _ := evil.Hash()
				b.exec(t, `UPDATE approvals SET action_canonical = $2, action_hash = $3 WHERE id = $1`, string(a.ID), canonical, hash)
				if _, err := b.s.StepUpPage(b.ctx, ref, token); !errors.Is(err, stepup.ErrAltered) {
					t.Fatalf("page of an altered request: %v", err)
				}
				body, _ := b.auth.Assert(v.Options)
				return body
			}},
		{name: "action edited, assertion over the edited request", reason: "altered",
			answer: func(t *testing.T, a core.ApprovalRequest, ref, token string) []byte {
				evil := core.Action{Tool: "shell", Argv: []string{"rm", "-rf", "/"}}
				canonical, _ := evil.Canonical()
				hash, _ := evil.Hash()
				b.exec(t, `UPDATE approvals SET action_canonical = $2, action_hash = $3 WHERE id = $1`, string(a.ID), canonical, hash)
				l, err := b.st.GetPasskeyLink(b.ctx, ref)
				if err != nil {
					t.Fatal(err)
				}
				edited, _ := b.st.GetApproval(b.ctx, a.ID)
				body, _ := b.auth.AssertChallenge("localhost", stepup.Challenge(edited, l.Nonce))
				return body
			}},
		{name: "sign count regression", reason: "sign_count_regression",
			answer: func(t *testing.T, _ core.ApprovalRequest, ref, token string) []byte {
				v, _ := b.s.StepUpPage(b.ctx, ref, token)
				b.auth.FreezeCounter = true
				defer func() { b.auth.FreezeCounter = false }()
				saved := b.auth.Counter
				b.auth.Counter = 1
				defer func() { b.auth.Counter = saved }()
				body, _ := b.auth.Assert(v.Options)
				return body
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := b.propose(t, "wipefs", "-a", "/dev/"+core.NewID()[:6])
			ref, token := b.stepUpLink(t, a.ID)
			body := tt.answer(t, a, ref, token)
			started := b.runs.count()
			before := len(b.entries(t, audit.KindStepUpRefused))
			err := b.s.FinishStepUp(b.ctx, ref, token, body)
			if !isRefusal(err, tt.reason) {
				t.Fatalf("FinishStepUp = %v, want refusal %s", err, tt.reason)
			}
			if got := b.status(t, a.ID); got != core.ApprovalConfirming {
				t.Fatalf("status = %s, want still confirming", got)
			}
			if n := b.runs.count(); n != started {
				t.Fatalf("an execution started on a refusal")
			}
			refused := b.entries(t, audit.KindStepUpRefused)
			if len(refused) != before+1 || refused[len(refused)-1]["reason"] != tt.reason || refused[len(refused)-1]["approval"] != string(a.ID) {
				t.Fatalf("stepup.refused entries = %v, want one more with reason %s", refused, tt.reason)
			}
		})
	}
}

// TestStepUpNeeded: nothing but a step-up approves an irreversible
// request, and without the step-up set up the tap is refused as before.
func TestStepUpNeeded(t *testing.T) {
	b := setup(t)
	a := b.propose(t, "mkfs", "/dev/sdw")
	err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		a, err := tx.GetApproval(ctx, a.ID)
		if err != nil {
			return nil, err
		}
		_, err = b.d.Approve(ctx, tx, a, owner)
		return nil, err
	})
	if !errors.Is(err, decide.ErrNeedsPasskey) {
		t.Fatalf("Approve of an irreversible request = %v, want ErrNeedsPasskey", err)
	}
	bare := decide.New(decide.Config{Key: b.key, TokenTTL: time.Minute})
	b.d = bare
	if r := b.tap(t, a.ID, "approve"); r.Refused != core.RefusedStepUp || !strings.Contains(r.Toast, "step-up") {
		t.Fatalf("tap without a step-up = %+v", r)
	}
}

func TestNewChecksRPID(t *testing.T) {
	for _, tt := range []struct {
		url, rpid string
		ok        bool
	}{
		{"https://localhost:8443", "", true},
		{"https://secrets.example.com", "", true},
		{"https://secrets.example.com", "example.com", true},
		{"https://127.0.0.1:8443", "", false},
		{"https://secrets.example.com", "other.com", false},
		{"http://secrets.example.com", "", false},
	} {
		_, err := stepup.New(stepup.Config{PublicURL: tt.url, RPID: tt.rpid}, &store.Store{})
		if (err == nil) != tt.ok {
			t.Errorf("New(%s, rp_id %q) = %v, want ok %v", tt.url, tt.rpid, err, tt.ok)
		}
	}
}

// TestSweepDeletesOldLinks: the periodic sweep deletes enrollment and
// step-up links that expired or were used more than LinkRetention ago and
// keeps the rest (a fresh link, one used or expired a moment ago, which
// still answer "used" / "expired"). Two sweeps at once (two instances)
// both finish, and a link whose row another transaction holds (being used
// right now) is skipped, not waited for, and goes at the next sweep.
func TestSweepDeletesOldLinks(t *testing.T) {
	b := setup(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	old := now.Add(-stepup.LinkRetention - time.Minute)
	a := b.propose(t, "mkfs.ext4", "/dev/sdz")
	type link struct {
		kind             string
		created, expires time.Time
		used             time.Time
		keep             bool
		approval         core.ApprovalID
	}
	links := map[string]link{
		"fresh enroll":            {kind: store.PasskeyLinkEnroll, created: now, expires: now.Add(15 * time.Minute), keep: true},
		"fresh step-up":           {kind: store.PasskeyLinkStepUp, created: now, expires: now.Add(5 * time.Minute), keep: true, approval: a.ID},
		"just used":               {kind: store.PasskeyLinkStepUp, created: now.Add(-time.Minute), expires: now.Add(4 * time.Minute), used: now, keep: true, approval: a.ID},
		"just expired":            {kind: store.PasskeyLinkEnroll, created: now.Add(-20 * time.Minute), expires: now.Add(-5 * time.Minute), keep: true},
		"expired long ago":        {kind: store.PasskeyLinkStepUp, created: old.Add(-5 * time.Minute), expires: old, approval: a.ID},
		"enroll expired long ago": {kind: store.PasskeyLinkEnroll, created: old.Add(-15 * time.Minute), expires: old},
		"used long ago":           {kind: store.PasskeyLinkEnroll, created: old.Add(-time.Minute), expires: now.Add(time.Hour), used: old},
		"held by a transaction":   {kind: store.PasskeyLinkStepUp, created: old.Add(-5 * time.Minute), expires: old, approval: a.ID},
	}
	refs := map[string]string{}
	for name, l := range links {
		ref := core.NewID()
		refs[name] = ref
		pl := store.PasskeyLink{Ref: ref, Kind: l.kind, TokenHash: make([]byte, 32), Owner: owner, Approval: l.approval,
			Nonce: make([]byte, 32), CreatedAt: l.created, ExpiresAt: l.expires}
		if err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			return tx.InsertPasskeyLink(ctx, pl, conv)
		}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !l.used.IsZero() {
			b.exec(t, `UPDATE passkey_links SET used_at = $2 WHERE ref = $1`, ref, l.used)
		}
	}
	exists := func(name string) bool {
		t.Helper()
		_, err := b.st.GetPasskeyLink(b.ctx, refs[name])
		if err != nil && !errors.Is(err, core.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	// Another transaction holds one old link's row, as a page using it does.
	hold, err := b.st.Pool().Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(b.ctx)
	if _, err := hold.Exec(b.ctx, `SELECT 1 FROM passkey_links WHERE ref = $1 FOR UPDATE`, refs["held by a transaction"]); err != nil {
		t.Fatal(err)
	}
	// A sweep that waited for the held row would never return while it is
	// held: the deadline turns that into a failure instead of a hang.
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- b.s.Sweep(ctx) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Sweep: %v", err)
		}
	}
	for name, l := range links {
		keep := l.keep || name == "held by a transaction"
		if got := exists(name); got != keep {
			t.Errorf("after the sweep, %q exists = %v, want %v", name, got, keep)
		}
	}
	if err := hold.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.s.Sweep(b.ctx); err != nil {
		t.Fatal(err)
	}
	if exists("held by a transaction") {
		t.Error("the link held during the first sweep survived the next one")
	}
	for name, l := range links {
		if l.keep && !exists(name) {
			t.Errorf("the second sweep deleted %q", name)
		}
	}
}

// TestStepUpSpan: with tracing on, the step-up is the tap of the trace: a
// silas.decide span carrying the approval id and its outcome, linked to
// the proposal's trace (stored traceparent), the wait for it a span in
// that trace, and the execution it queues links back to it (TapOf). Not
// parallel: tracing is process-wide.
func TestStepUpSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Enable(tp)
	t.Cleanup(func() { tracing.Enable(nil); _ = tp.Shutdown(context.Background()) })
	b := setup(t)
	b.enroll(t)
	a := b.propose(t, "mkfs.ext4", "/dev/sdz")
	pctx, proposal := tracing.Start(b.ctx, tracing.SpanPolicy)
	b.exec(t, `UPDATE approvals SET traceparent = $2 WHERE id = $1`, string(a.ID), tracing.Traceparent(pctx))
	proposal.End()

	ref, token := b.stepUpLink(t, a.ID)
	v, err := b.s.StepUpPage(b.ctx, ref, token)
	if err != nil {
		t.Fatal(err)
	}
	body, err := b.auth.Assert(v.Options)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.s.FinishStepUp(b.ctx, ref, token, body); err != nil {
		t.Fatalf("FinishStepUp: %v", err)
	}
	var decided, wait []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch {
		case s.Name == tracing.SpanDecide && attr(s, tracing.AttrApprovalID) == string(a.ID):
			decided = append(decided, s)
		case s.Name == tracing.SpanApprovalWait && s.SpanContext.TraceID() == proposal.SpanContext().TraceID():
			wait = append(wait, s)
		}
	}
	if len(decided) != 1 || attr(decided[0], tracing.AttrOutcome) != "approved" {
		t.Fatalf("decide spans of the step-up = %+v, want one, approved", decided)
	}
	d := decided[0]
	linked := false
	for _, l := range d.Links {
		linked = linked || l.SpanContext.TraceID() == proposal.SpanContext().TraceID()
	}
	if !linked || len(wait) == 0 {
		t.Errorf("the step-up links %+v and %d wait spans, want a link to the proposal's trace and a wait in it", d.Links, len(wait))
	}
	if tap := tracing.TapOf(string(a.ID)); tap.SpanID() != d.SpanContext.SpanID() {
		t.Errorf("the execution would link to %v, want the step-up's span %v", tap, d.SpanContext)
	}
}

func attr(s tracetest.SpanStub, k attribute.Key) string {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value.String()
		}
	}
	return ""
}
