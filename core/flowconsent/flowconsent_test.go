package flowconsent

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowrun"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/propose"
	"github.com/silas-gateway/silas/core/render"
	"github.com/silas-gateway/silas/core/route"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/pgtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The consent card offers only the steps whose program the flow file
// fixes: never a placeholder program, shell syntax, a shell, an
// interpreter or a wrapper; one use per attempt the retry policy allows.
func TestPlan(t *testing.T) {
	doc := `name: plan
version: "4"
description: what a consent card offers
nodes:
  - id: build
    type: action.shell
    config:
      command: "restic backup"
    policy:
      retry: {max_attempts: 3}
  - id: greet
    type: action.shell
    config:
      command: "echo hello ${{ inputs.who }}"
  - id: pipe
    type: action.shell
    config:
      command: "ls | wc -l"
  - id: shell
    type: action.shell
    config:
      command: "bash -c 'make test'"
  - id: interp
    type: action.shell
    config:
      command: "python3 x.py"
  - id: wrapped
    type: action.shell
    config:
      command: "env restic"
  - id: again
    type: action.shell
    config:
      command: "restic check"
  - id: wait
    type: control.wait
    config:
      duration: 1s
inputs:
  who: {type: string, default: you}
edges:
  - {from: build, to: greet}
`
	g, ok, err := Plan(core.FlowRun{ID: "r1", Flow: "plan", Version: "4", File: "plan.yaml", Document: []byte(doc)})
	if err != nil || !ok {
		t.Fatalf("Plan: %v %v", ok, err)
	}
	if !slices.Equal(g.Nodes, []string{"build", "greet", "again"}) || !slices.Equal(g.Programs, []string{"restic", "echo"}) {
		t.Fatalf("nodes %v, programs %v", g.Nodes, g.Programs)
	}
	if g.MaxUses != 5 || g.CostCap != 5 || g.MaxRisk != "medium" || !slices.Equal(g.Lanes, []string{consent.LaneOffline}) || g.Run != "r1" || g.FlowVersion != "4" {
		t.Fatalf("grant %+v", g)
	}
}

// An offer edited after it was signed (a wider grant, another run or
// conversation) no longer verifies, so a tap on its card mints nothing.
func TestOfferSignature(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	o := consent.Offer{Run: "r1", Conversation: "web:1", Grant: consent.RunGrant{Run: "r1", Flow: "f", FlowVersion: "1", Nodes: []string{"a"},
		Tool: "shell", Programs: []string{"echo"}, MaxRisk: "low", Lanes: []string{consent.LaneOffline}, MaxUses: 2, CostCap: 2}}
	if err := consent.SignOffer(key, &o); err != nil {
		t.Fatal(err)
	}
	if !consent.VerifyOffer(pub, o) {
		t.Fatal("the signed offer does not verify")
	}
	for name, edit := range map[string]func(o *consent.Offer){
		"more uses":          func(o *consent.Offer) { o.Grant.MaxUses = 200 },
		"higher cap":         func(o *consent.Offer) { o.Grant.CostCap = 200 },
		"other programs":     func(o *consent.Offer) { o.Grant.Programs = []string{"echo", "rm"} },
		"more nodes":         func(o *consent.Offer) { o.Grant.Nodes = append(o.Grant.Nodes, "b") },
		"higher risk":        func(o *consent.Offer) { o.Grant.MaxRisk = "medium" },
		"longer":             func(o *consent.Offer) { o.Grant.TTL = 48 * 3600e9 },
		"other run":          func(o *consent.Offer) { o.Run = "r2" },
		"other conversation": func(o *consent.Offer) { o.Conversation = "web:2" },
	} {
		e := o
		e.Grant.Nodes, e.Grant.Programs = slices.Clone(o.Grant.Nodes), slices.Clone(o.Grant.Programs)
		edit(&e)
		if consent.VerifyOffer(pub, e) {
			t.Errorf("%s: still verifies", name)
		}
	}
}

// sink is the tap turn's output.
type sink struct {
	updates []*cards.Card
	audit   []audit.Entry
	replies []string
}

func (s *sink) Reply(format string, a ...any) {
	s.replies = append(s.replies, fmt.Sprintf(format, a...))
}
func (s *sink) Card(c *cards.Card)           {}
func (s *sink) Update(c *cards.Card)         { s.updates = append(s.updates, c) }
func (s *sink) Audit(entries ...audit.Entry) { s.audit = append(s.audit, entries...) }
func (s *sink) After(f func())               {}

// A tap on a run's consent card: only the owner, only in its conversation,
// once; an offer edited in the database after it was sent mints nothing
// (bad_signature); the tap that mints stores exactly the grant the card
// stated, signed, and audits it.
func TestConsentCardTap(t *testing.T) {
	ctx, st, key, d := setupDecider(t)
	pub := key.Public().(ed25519.PublicKey)
	on := consent.Switches{RunWrites: true, Automatable: true}
	taps := Taps{Approver: Approver{Decider: d, Switches: on}}
	doc := []byte("name: two\nversion: \"1\"\ndescription: two steps\nnodes:\n  - id: a\n    type: action.shell\n    config:\n      command: \"echo a\"\n" +
		"  - id: b\n    type: action.shell\n    config:\n      command: \"echo b\"\nedges:\n  - {from: a, to: b}\n")
	f, err := flow.Parse("two.yaml", doc, flow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	origin := core.Turn{Channel: "web", Conversation: "web:1", Sender: "web:owner"}
	offer := func() (core.FlowRun, consent.Offer) {
		t.Helper()
		run, err := flowrun.NewRun(f, doc, origin, nil, 4)
		if err != nil {
			t.Fatal(err)
		}
		g, ok, err := Plan(run)
		if err != nil || !ok {
			t.Fatalf("plan: %v %v", ok, err)
		}
		o, _, err := d.OfferRun(on, g, origin.Conversation)
		if err != nil {
			t.Fatal(err)
		}
		err = st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			tx.QueueInsertFlowRun(run)
			_, err := tx.OfferRunConsent(ctx, o)
			return nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return run, o
	}
	tap := func(run core.FlowRun, conv core.ConversationID, trust core.Trust, choice string) (core.TaskTap, *sink) {
		t.Helper()
		out := &sink{}
		var res core.TaskTap
		err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			var err error
			res, err = taps.Tap(ctx, tx, core.StoredTurn{Turn: core.Turn{Channel: "web", Conversation: conv, Sender: "web:owner"}}, trust,
				core.Tap{Card: cards.ID(render.RunConsentCardPrefix + run.ID), Choice: choice}, out)
			return out.audit, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return res, out
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := st.Pool().QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	run, o := offer()
	if res, _ := tap(run, "web:2", core.TrustOwner, render.RunConsentChoice); res.Handled {
		t.Fatalf("another conversation's card was handled: %+v", res)
	}
	if res, _ := tap(run, "web:1", core.TrustAuth, render.RunConsentChoice); res.Refused != "not_owner" {
		t.Fatalf("not the owner: %+v", res)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE consent_offers SET grant_spec = jsonb_set(grant_spec, '{MaxUses}', '999')`); err != nil {
		t.Fatal(err)
	}
	if res, _ := tap(run, "web:1", core.TrustOwner, render.RunConsentChoice); res.Refused != string(consent.BadSignature) {
		t.Fatalf("edited offer: %+v", res)
	}
	if n := count(`SELECT count(*) FROM consents`); n != 0 {
		t.Fatalf("%d consents minted from an edited offer", n)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE consent_offers SET grant_spec = jsonb_set(grant_spec, '{MaxUses}', $1::text::jsonb)`, fmt.Sprint(o.Grant.MaxUses)); err != nil {
		t.Fatal(err)
	}
	res, out := tap(run, "web:1", core.TrustOwner, render.RunConsentChoice)
	if !res.Handled || res.Refused != "" || len(out.updates) != 1 || out.updates[0].Status != cards.StatusApproved {
		t.Fatalf("allow: %+v %+v", res, out.updates)
	}
	c, err := st.GetConsent(ctx, fmt.Sprint(out.audit[0].Data["consent"]))
	if err != nil {
		t.Fatal(err)
	}
	if !consent.Verify(pub, c) || c.Run != run.ID || !slices.Equal(c.Nodes, []string{"a", "b"}) || !slices.Equal(c.Programs, []string{"echo"}) ||
		c.MaxUses != 2 || c.CostCap != 2 || c.MaxRisk != cards.RiskMedium || c.Conversation != "web:1" || c.CreatedBy != "web:owner" {
		t.Fatalf("minted %+v", c)
	}
	if res, _ := tap(run, "web:1", core.TrustOwner, render.RunConsentChoice); res.Refused != "already_decided" {
		t.Fatalf("second tap: %+v", res)
	}
	if n := count(`SELECT count(*) FROM consents`); n != 1 {
		t.Fatalf("%d consents", n)
	}

	run2, _ := offer()
	if res, _ := tap(run2, "web:1", core.TrustOwner, "decline"); res.Refused != "" || !res.Handled {
		t.Fatalf("decline: %+v", res)
	}
	if n := count(`SELECT count(*) FROM consent_offers WHERE run_id = $1 AND status = 'declined'`, run2.ID); n != 1 {
		t.Fatal("the decline was not recorded")
	}
	if n := count(`SELECT count(*) FROM audit_log WHERE kind IN ('consent.minted', 'consent.declined')`); n != 2 {
		t.Fatalf("%d mint and decline entries", n)
	}
}

type fixedTrust core.Trust

func (f fixedTrust) Of(context.Context, core.Turn) (core.Trust, string) { return core.Trust(f), "test" }

// fixedRouter plans every card as plan, and records what it was asked.
type fixedRouter struct {
	plan  route.Plan
	asked []core.ApprovalRequest
}

func (r *fixedRouter) Plan(_ context.Context, a core.ApprovalRequest, _ core.Trust) (route.Plan, error) {
	r.asked = append(r.asked, a)
	return r.plan, nil
}

// A run started where no owner may give its consent (an allowed person's
// chat): its consent card is routed like an approval card (core/route) —
// to an owner's direct conversation, with a line where the run was
// started — and the tap there mints the consent. When no owner can
// receive it, no consent card is sent at all.
func TestConsentCardRouted(t *testing.T) {
	ctx, st, _, d := setupDecider(t)
	on := consent.Switches{RunWrites: true, Automatable: true}
	doc := []byte("name: one\nversion: \"1\"\ndescription: one step\nnodes:\n  - id: a\n    type: action.shell\n    config:\n      command: \"echo a\"\n")
	f, err := flow.Parse("one.yaml", doc, flow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	origin := core.Turn{Channel: "web", Conversation: "web:guest", Sender: "web:guest"}
	dm := route.Target{Channel: "telegram", Conversation: "telegram:dm-1", Identity: "telegram:1"}
	offer := func(plan route.Plan) (core.FlowRun, *fixedRouter, int) {
		t.Helper()
		run, err := flowrun.NewRun(f, doc, origin, nil, 4)
		if err != nil {
			t.Fatal(err)
		}
		rt := &fixedRouter{plan: plan}
		ap := Approver{Decider: d, Switches: on}
		ap.Steps.Router, ap.Steps.Trust = rt, fixedTrust(core.TrustAuth)
		var n int
		err = st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			tx.QueueInsertFlowRun(run)
			var e *audit.Entry
			var err error
			n, e, err = ap.offer(ctx, tx, flowrun.ActionRequest{Run: run.ID, Flow: run.Flow, Version: run.Version, Node: "a", Attempt: 1, Origin: origin})
			if e != nil {
				return []audit.Entry{*e}, err
			}
			return nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return run, rt, n
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := st.Pool().QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	run, rt, n := offer(route.Plan{Routed: true, Copies: []route.Target{dm}})
	if len(rt.asked) != 1 || rt.asked[0].Requester != "web:guest" || !slices.Equal(rt.asked[0].Approvers, []string{"role:owner"}) {
		t.Fatalf("router asked %+v", rt.asked)
	}
	if n != 2 {
		t.Fatalf("%d messages queued, want the card and the line", n)
	}
	if c := count(`SELECT count(*) FROM consent_offers WHERE run_id = $1 AND conversation = $2`, run.ID, string(dm.Conversation)); c != 1 {
		t.Fatal("the offer is not the owner's conversation's")
	}
	if c := count(`SELECT count(*) FROM outbox WHERE channel = 'telegram' AND conversation = $1 AND message_key = $2`, string(dm.Conversation), render.RunConsentCardPrefix+run.ID); c != 1 {
		t.Fatal("no consent card in the owner's conversation")
	}
	if c := count(`SELECT count(*) FROM outbox WHERE conversation = 'web:guest' AND payload->>'text' LIKE '%consent card went to telegram:1 on telegram%'`); c != 1 {
		t.Fatal("no line where the run was started")
	}
	if c := count(`SELECT count(*) FROM audit_log WHERE kind = 'consent.offered' AND data->>'routed_to' = $1`, string(dm.Conversation)); c != 1 {
		t.Fatal("the offer's audit entry does not say where it went")
	}
	taps := Taps{Approver: Approver{Decider: d, Switches: on}}
	tap := func(conv core.ConversationID) core.TaskTap {
		t.Helper()
		var res core.TaskTap
		err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			out := &sink{}
			var err error
			res, err = taps.Tap(ctx, tx, core.StoredTurn{Turn: core.Turn{Channel: "telegram", Conversation: conv, Sender: "telegram:1"}}, core.TrustOwner,
				core.Tap{Card: cards.ID(render.RunConsentCardPrefix + run.ID), Choice: render.RunConsentChoice}, out)
			return out.audit, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := tap("web:guest"); res.Handled {
		t.Fatalf("tapped where the run started: %+v", res)
	}
	if res := tap(dm.Conversation); !res.Handled || res.Refused != "" {
		t.Fatalf("the owner's tap: %+v", res)
	}
	if c := count(`SELECT count(*) FROM consents WHERE run_id = $1`, run.ID); c != 1 {
		t.Fatalf("%d consents minted", c)
	}

	run, _, n = offer(route.Plan{Refused: "no owner is configured or paired"})
	if n != 0 || count(`SELECT count(*) FROM consent_offers WHERE run_id = $1`, run.ID) != 0 {
		t.Fatalf("a consent card nobody can tap was offered (%d messages)", n)
	}
	run, _, n = offer(route.Plan{})
	if n != 1 || count(`SELECT count(*) FROM consent_offers WHERE run_id = $1 AND conversation = 'web:guest'`, run.ID) != 1 {
		t.Fatalf("not routed: %d messages", n)
	}
}

// A run that outlives its consent is offered its consent card again (the
// same card, edited back to its buttons, with a fresh grant), once per
// expired consent; a declined card is never offered again.
func TestConsentCardOfferedAgainAfterExpiry(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	_, key, _ := ed25519.GenerateKey(nil)
	on := consent.Switches{RunWrites: true, Automatable: true}
	d := decide.New(decide.Config{Key: key, TokenTTL: 10 * time.Minute, Preview: 2000})
	ap := Approver{Decider: d, Switches: on}
	doc := []byte("name: one\nversion: \"1\"\ndescription: one step\nnodes:\n  - id: a\n    type: action.shell\n    config:\n      command: \"echo a\"\n")
	f, err := flow.Parse("one.yaml", doc, flow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	origin := core.Turn{Channel: "web", Conversation: "web:1", Sender: "web:owner"}
	req := func(run core.FlowRun) flowrun.ActionRequest {
		return flowrun.ActionRequest{Run: run.ID, Flow: run.Flow, Version: run.Version, Node: "a", Attempt: 1, Origin: origin}
	}
	do := func(f func(ctx context.Context, tx *store.Tx) (int, *audit.Entry, error)) int {
		t.Helper()
		var n int
		err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			var e *audit.Entry
			var err error
			n, e, err = f(ctx, tx)
			if e != nil {
				return []audit.Entry{*e}, err
			}
			return nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tap := func(run core.FlowRun, choice string) {
		t.Helper()
		err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			out := &sink{}
			res, err := Taps{Approver: ap}.Tap(ctx, tx, core.StoredTurn{Turn: origin}, core.TrustOwner,
				core.Tap{Card: cards.ID(render.RunConsentCardPrefix + run.ID), Choice: choice}, out)
			if err == nil && (!res.Handled || res.Refused != "") {
				err = fmt.Errorf("tap %s: %+v", choice, res)
			}
			return out.audit, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	newRun := func() core.FlowRun {
		t.Helper()
		run, err := flowrun.NewRun(f, doc, origin, nil, 4)
		if err != nil {
			t.Fatal(err)
		}
		if n := do(func(ctx context.Context, tx *store.Tx) (int, *audit.Entry, error) {
			tx.QueueInsertFlowRun(run)
			return ap.offer(ctx, tx, req(run))
		}); n != 1 {
			t.Fatalf("first offer: %d messages", n)
		}
		return run
	}
	reoffer := func(run core.FlowRun) int {
		return do(func(ctx context.Context, tx *store.Tx) (int, *audit.Entry, error) {
			return ap.reoffer(ctx, tx, req(run))
		})
	}
	status := func(run core.FlowRun) string {
		t.Helper()
		var s string
		if err := st.Pool().QueryRow(ctx, `SELECT status FROM consent_offers WHERE run_id = $1`, run.ID).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	run := newRun()
	tap(run, render.RunConsentChoice)
	if n := reoffer(run); n != 0 || status(run) != consent.OfferAccepted {
		t.Fatalf("offered again while the consent lasts: %d", n)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if n := reoffer(run); n != 1 || status(run) != consent.OfferOpen {
		t.Fatalf("not offered again after expiry: %d, %s", n, status(run))
	}
	if n := reoffer(run); n != 0 {
		t.Fatalf("offered again twice: %d", n)
	}
	var kind string
	if err := st.Pool().QueryRow(ctx, `SELECT op FROM outbox WHERE message_key = $1 ORDER BY id DESC LIMIT 1`, render.RunConsentCardPrefix+run.ID).Scan(&kind); err != nil || kind != "update" {
		t.Fatalf("the card was not edited back: %q %v", kind, err)
	}
	tap(run, render.RunConsentChoice)
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM consents WHERE run_id = $1 AND expires_at > $2`, run.ID, clock()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("no fresh consent: %d %v", n, err)
	}

	declined := newRun()
	tap(declined, "decline")
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if n := reoffer(declined); n != 0 || status(declined) != consent.OfferDeclined {
		t.Fatalf("a declined card was offered again: %d", n)
	}
}

// setupDecider is a store on a fresh database and a decider with its key.
func setupDecider(t *testing.T) (context.Context, *store.Store, ed25519.PrivateKey, *decide.Decider) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	_, key, _ := ed25519.GenerateKey(nil)
	return ctx, st, key, decide.New(decide.Config{Key: key, TokenTTL: 10 * time.Minute, Preview: 2000})
}

type ownerBook struct{}

func (ownerBook) Of(context.Context, core.Turn) (core.Trust, string) { return core.TrustOwner, "" }

type noRuns struct{}

func (noRuns) Start(core.ApprovalID)  {}
func (noRuns) Stop([]core.ApprovalID) {}

// A step asked again after it ran under the run's consent (a retried job)
// answers with its first execution, in a transaction that commits: the
// request proposed again is withdrawn, nothing is approved or counted a
// second time. Another step of the run still runs under the consent.
func TestStepAskedAgainAnswersFirst(t *testing.T) {
	ctx, st, key, d := setupDecider(t)
	on := consent.Switches{RunWrites: true, Automatable: true}
	pol, err := policy.New([]policy.Rule{{Name: "default", Tool: "*", Decision: policy.AuthRequired, Risk: cards.RiskLow}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := propose.New(propose.Config{Key: key, Policy: pol, Approver: d})
	if err != nil {
		t.Fatal(err)
	}
	ap := Approver{Steps: propose.Steps{Proposer: p, Trust: ownerBook{}, Runs: noRuns{}}, Decider: d, Switches: on}
	doc := []byte("name: one\nversion: \"1\"\ndescription: one step\nnodes:\n  - id: a\n    type: action.shell\n    config:\n      command: \"echo a\"\n")
	f, err := flow.Parse("one.yaml", doc, flow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	origin := core.Turn{Channel: "web", Conversation: "web:1", Sender: "web:owner"}
	run, err := flowrun.NewRun(f, doc, origin, nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	g, ok, err := Plan(run)
	if err != nil || !ok {
		t.Fatalf("plan: %v %v", ok, err)
	}
	g.MaxUses, g.CostCap = 5, 5
	var c consent.Consent
	err = st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		tx.QueueInsertFlowRun(run)
		var err error
		if c, _, err = d.MintRun(tx, on, g, origin.Conversation, origin.Sender, core.TrustOwner); err != nil {
			return nil, err
		}
		return nil, tx.InsertConsent(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(attempt int) propose.Step {
		t.Helper()
		var s propose.Step
		err := st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			var err error
			s, err = ap.Propose(ctx, tx, flowrun.ActionRequest{Run: run.ID, Flow: run.Flow, Version: run.Version, Node: "a", Attempt: attempt,
				Owner: core.FlowOwner + run.ID, Origin: origin, Action: core.ProposedAction{Action: core.Action{Tool: "shell", Argv: []string{"echo", "a"}}, Intent: "a"}})
			return s.Audit, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := st.Pool().QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	first := ask(1)
	if !first.Approved || first.Approval == "" {
		t.Fatalf("first ask: %+v", first)
	}
	for range 2 {
		if again := ask(1); again.Approval != first.Approval || again.Approved || again.Messages != 0 {
			t.Fatalf("asked again: %+v, want the first %s", again, first.Approval)
		}
	}
	if n := count(`SELECT count(*) FROM approvals`); n != 1 {
		t.Fatalf("%d requests stored", n)
	}
	if got, _ := st.GetConsent(ctx, c.ID); got.Uses != 1 {
		t.Fatalf("counted %d uses", got.Uses)
	}
	if next := ask(2); !next.Approved || next.Approval == first.Approval {
		t.Fatalf("the next attempt: %+v", next)
	}
	if n := count(`SELECT count(*) FROM approvals WHERE status = 'approved'`); n != 2 {
		t.Fatalf("%d requests approved", n)
	}
}
