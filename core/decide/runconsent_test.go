package decide_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/consent"
	"github.com/silas-gateway/silas/core/decide"
	"github.com/silas-gateway/silas/core/store"
	"github.com/silas-gateway/silas/internal/gcdefault"
	"github.com/silas-gateway/silas/internal/storetest"
)

var flowsOn = consent.Switches{RunWrites: true, Automatable: true}

// runBundle is a store with a clock the test moves, and a decider.
type runBundle struct {
	ctx   context.Context
	st    *store.Store
	key   ed25519.PrivateKey
	d     *decide.Decider
	clock atomic.Pointer[time.Time]
}

func setupRun(t testing.TB) *runBundle {
	t.Helper()
	b := &runBundle{ctx: context.Background()}
	now := time.Now()
	b.clock.Store(&now)
	st, err := store.Open(b.ctx, storetest.NewDatabase(t), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return *b.clock.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	b.st = st
	_, b.key, _ = ed25519.GenerateKey(rand.Reader)
	b.d = decide.New(decide.Config{Key: b.key, TokenTTL: 10 * time.Minute, Preview: 2000, Executions: st})
	return b
}

func (b *runBundle) advance(d time.Duration) {
	now := b.clock.Load().Add(d)
	b.clock.Store(&now)
}

// mint stores the owner's run consent for run over nodes, running echo.
func (b *runBundle) mint(t testing.TB, run string, uses int, nodes ...string) consent.Consent {
	t.Helper()
	var c consent.Consent
	err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		var n decide.Note
		var err error
		c, n, err = b.d.MintRun(tx, flowsOn, consent.RunGrant{Run: run, Flow: "nightly", FlowVersion: "7", Nodes: nodes, Tool: "shell",
			Programs: []string{"echo"}, MaxRisk: cards.RiskLow, Lanes: []string{consent.LaneOffline}, MaxUses: uses, CostCap: uses}, conv, owner, core.TrustOwner)
		if err != nil {
			return nil, err
		}
		return []audit.Entry{{Kind: n.Kind, Actor: string(owner), Conversation: string(conv), Data: n.Data}}, tx.InsertConsent(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func facts() consent.RunFacts {
	return consent.RunFacts{Found: true, InProgress: true, Flow: "nightly", FlowVersion: "7", FlowFound: true,
		Step: consent.StepFacts{Found: true, Automatable: true, Ready: true}}
}

// stepResult is what one ask of the port made of a step.
type stepResult struct {
	id    core.ApprovalID
	prior bool
	code  consent.Code
	c     consent.Consent
}

// step asks the port, in one transaction, as the flows runtime does: the
// prior execution, else a proposal and ApproveInRun. crash rolls the
// transaction back at its end (a SIGKILL before commit).
func (b *runBundle) step(t *testing.T, run, node string, crash bool) (stepResult, error) {
	t.Helper()
	var out stepResult
	errCrash := errors.New("crash")
	err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		out = stepResult{}
		id, ok, err := b.d.PriorInRun(ctx, tx, run, node+"/0/1")
		if err != nil || ok {
			out.id, out.prior = id, ok
			return nil, err
		}
		a := b.request(t, tx, "echo", node)
		r, c, code, err := b.d.ApproveInRun(ctx, tx, flowsOn, consent.Request{Run: run, Node: node, Step: node + "/0/1"}, facts(), a)
		if err != nil {
			return nil, err
		}
		out.id, out.code, out.c = a.ID, code, c
		var entries []audit.Entry
		for _, n := range r.Notes {
			entries = append(entries, audit.Entry{Kind: n.Kind, Actor: "flow:" + run, Conversation: string(conv), Data: n.Data})
		}
		if crash {
			return nil, errCrash
		}
		return entries, nil
	})
	if errors.Is(err, errCrash) {
		return out, nil
	}
	return out, err
}

// request stores, in tx, the signed request of a flow node's action.
func (b *runBundle) request(t *testing.T, tx *store.Tx, argv ...string) core.ApprovalRequest {
	t.Helper()
	a := signedRequest(t, b.key, tx.Now(), cards.RiskLow, argv...)
	tx.QueueApproval(a)
	return a
}

func (b *runBundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := b.st.Pool().QueryRow(b.ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A 40-step flow under one consent runs each step with its own token and
// no tap; a revoke after step 10 stops it at step 11 with the refusal
// named and audited; 10 uses are counted.
func TestRunConsentFortySteps(t *testing.T) {
	t.Parallel()
	b := setupRun(t)
	nodes := make([]string, 40)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("n%02d", i+1)
	}
	c := b.mint(t, "run-a", 40, nodes...)
	for i, node := range nodes {
		if i == 10 {
			if _, ok, err := b.st.RevokeConsent(b.ctx, c.ID, owner); err != nil || !ok {
				t.Fatalf("revoke: %v %v", ok, err)
			}
		}
		r, err := b.step(t, "run-a", node, false)
		if err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		if i < 10 {
			if r.code != "" || r.c.Uses != i+1 {
				t.Fatalf("%s: code %q, uses %d", node, r.code, r.c.Uses)
			}
			if st, _ := b.st.GetApproval(b.ctx, r.id); st.Status != core.ApprovalApproved || st.DecidedBy != core.IdentityID("consent:"+c.ID) {
				t.Fatalf("%s: %s by %s", node, st.Status, st.DecidedBy)
			}
			continue
		}
		if r.code != consent.Revoked {
			t.Fatalf("%s after the revoke: code %q", node, r.code)
		}
		break
	}
	got, _ := b.st.GetConsent(b.ctx, c.ID)
	if got.Uses != 10 || got.Units != 10 {
		t.Fatalf("counted %d uses, %d units", got.Uses, got.Units)
	}
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'consent.refused' AND data->>'code' = 'consent_revoked' AND data->>'node' = 'n11'`); n != 1 {
		t.Fatalf("refusal audited %d times", n)
	}
	if n := b.count(t, `SELECT count(*) FROM audit_log WHERE kind = 'token.consumed' AND data->>'consent' = $1`, c.ID); n != 10 {
		t.Fatalf("%d tokens name the consent", n)
	}
}

// The same (run, step) asked again — after a crash between the use and
// the run, or a crash before the commit — runs once and counts once.
func TestRunConsentInFlightIdempotent(t *testing.T) {
	t.Parallel()
	b := setupRun(t)
	c := b.mint(t, "run-a", 5, "build")
	// SIGKILL before the commit: nothing happened.
	if r, err := b.step(t, "run-a", "build", true); err != nil || r.code != "" {
		t.Fatalf("crashed ask: %+v %v", r, err)
	}
	first, err := b.step(t, "run-a", "build", false)
	if err != nil || first.code != "" || first.prior {
		t.Fatalf("first ask: %+v %v", first, err)
	}
	// SIGKILL after the commit, before the run: asked again, the first.
	for range 3 {
		again, err := b.step(t, "run-a", "build", false)
		if err != nil || !again.prior || again.id != first.id {
			t.Fatalf("again: %+v %v, want the prior %s", again, err, first.id)
		}
	}
	if got, _ := b.st.GetConsent(b.ctx, c.ID); got.Uses != 1 {
		t.Fatalf("counted %d uses", got.Uses)
	}
	if n := b.count(t, `SELECT count(*) FROM approvals WHERE status = 'approved'`); n != 1 {
		t.Fatalf("%d approvals", n)
	}
}

// Two asks of one step at once: one runs, the other is told to ask again
// and then answers with the first.
func TestRunConsentInFlightConcurrent(t *testing.T) {
	t.Parallel()
	b := setupRun(t)
	c := b.mint(t, "run-a", 5, "build")
	var wg sync.WaitGroup
	res := make([]stepResult, 4)
	errs := make([]error, 4)
	for i := range res {
		wg.Go(func() { res[i], errs[i] = b.step(t, "run-a", "build", false) })
	}
	wg.Wait()
	var ran core.ApprovalID
	for i, r := range res {
		if errs[i] != nil {
			if !errors.Is(errs[i], decide.ErrInFlightRace) {
				t.Fatal(errs[i])
			}
			r, errs[i] = b.step(t, "run-a", "build", false)
			if errs[i] != nil || !r.prior {
				t.Fatalf("retry: %+v %v", r, errs[i])
			}
		}
		if !r.prior {
			if ran != "" {
				t.Fatalf("ran twice: %s and %s", ran, r.id)
			}
			ran = r.id
		}
	}
	for _, r := range res {
		if r.prior && r.id != ran {
			t.Fatalf("answered %s, ran %s", r.id, ran)
		}
	}
	if got, _ := b.st.GetConsent(b.ctx, c.ID); got.Uses != 1 {
		t.Fatalf("counted %d uses", got.Uses)
	}
}

// A consent minted for run A and used on run B is refused; so is one
// edited in the database (more nodes, a higher cap, a later expiry, other
// programs): its signature no longer verifies. Expiry takes effect before
// the next step.
func TestRunConsentRefusals(t *testing.T) {
	t.Parallel()
	b := setupRun(t)
	c := b.mint(t, "run-a", 5, "build", "test")
	asked := 0
	ask := func(run, node, named string) consent.Code {
		t.Helper()
		asked++
		var code consent.Code
		err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
			a := b.request(t, tx, "echo", node)
			var err error
			_, _, code, err = b.d.ApproveInRun(ctx, tx, flowsOn, consent.Request{Run: run, Node: node, Step: fmt.Sprintf("%s/0/%d", node, asked), Consent: named}, facts(), a)
			return nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	if code := ask("run-b", "build", c.ID); code != consent.RunMismatch {
		t.Fatalf("run A's consent on run B: %q", code)
	}
	if code := ask("run-b", "build", ""); code != consent.Required {
		t.Fatalf("run B without a consent: %q", code)
	}
	for _, edit := range []string{
		`UPDATE consents SET nodes = nodes || '{deploy}'::text[]`,
		`UPDATE consents SET cost_cap = 1000, max_uses = 1000`,
		`UPDATE consents SET expires_at = expires_at + interval '1 day'`,
		`UPDATE consents SET programs = '{echo,rm}'`,
	} {
		if _, err := b.st.Pool().Exec(b.ctx, `UPDATE consents SET nodes = $2, cost_cap = $3, max_uses = $3, expires_at = $4, programs = $5 WHERE id = $1`,
			c.ID, c.Nodes, c.CostCap, c.ExpiresAt, c.Programs); err != nil {
			t.Fatal(err)
		}
		if code := ask("run-a", "build", ""); code != "" {
			t.Fatalf("restored row: %q", code)
		}
		if _, err := b.st.Pool().Exec(b.ctx, edit); err != nil {
			t.Fatal(err)
		}
		if code := ask("run-a", "test", ""); code != consent.BadSignature {
			t.Fatalf("%s: %q", edit, code)
		}
	}
	if _, err := b.st.Pool().Exec(b.ctx, `UPDATE consents SET nodes = $2, cost_cap = $3, max_uses = $3, expires_at = $4, programs = $5 WHERE id = $1`,
		c.ID, c.Nodes, c.CostCap, c.ExpiresAt, c.Programs); err != nil {
		t.Fatal(err)
	}
	b.advance(2 * time.Hour)
	if code := ask("run-a", "test", ""); code != consent.Expired {
		t.Fatalf("after its expiry: %q", code)
	}
}

// A consent whose use counter is reset in the database (to get its uses
// back) is refused: the audit log records each use, and a stored count
// below it no longer verifies. Put back, it runs again.
func TestRunConsentCounterReset(t *testing.T) {
	t.Parallel()
	b := setupRun(t)
	c := b.mint(t, "run-a", 3, "n1", "n2", "n3", "n4")
	for _, node := range []string{"n1", "n2"} {
		if r, err := b.step(t, "run-a", node, false); err != nil || r.code != "" {
			t.Fatalf("%s: %+v %v", node, r, err)
		}
	}
	for _, edit := range []string{
		`UPDATE consents SET uses = 0, units = 0 WHERE id = $1`,
		`UPDATE consents SET uses = 1 WHERE id = $1`,
		`UPDATE consents SET units = 1 WHERE id = $1`,
	} {
		if _, err := b.st.Pool().Exec(b.ctx, edit, c.ID); err != nil {
			t.Fatal(err)
		}
		if r, err := b.step(t, "run-a", "n3", false); err != nil || r.code != consent.BadSignature {
			t.Fatalf("%s: %+v %v", edit, r, err)
		}
		if _, err := b.st.Pool().Exec(b.ctx, `UPDATE consents SET uses = 2, units = 2 WHERE id = $1`, c.ID); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := b.step(t, "run-a", "n3", false); err != nil || r.code != "" || r.c.Uses != 3 {
		t.Fatalf("counter put back: %+v %v", r, err)
	}
	if r, err := b.step(t, "run-a", "n4", false); err != nil || r.code != consent.UsesExhausted {
		t.Fatalf("after its last use: %+v %v", r, err)
	}
}

// With the flow switches off, no run consent is minted (the card is not
// offered); only an owner mints one.
func TestMintRunNotOffered(t *testing.T) {
	t.Parallel()
	b := setupRun(t)
	g := consent.RunGrant{Run: "r", Flow: "f", FlowVersion: "1", Nodes: []string{"n"}, Tool: "shell", Programs: []string{"echo"},
		MaxRisk: cards.RiskLow, Lanes: []string{consent.LaneOffline}, MaxUses: 1, CostCap: 1}
	err := b.st.Do(b.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
		for _, tt := range []struct {
			sw    consent.Switches
			trust core.Trust
		}{{consent.Switches{}, core.TrustOwner}, {consent.Switches{RunWrites: true}, core.TrustOwner}, {flowsOn, core.TrustAuth}} {
			if _, _, err := b.d.MintRun(tx, tt.sw, g, conv, owner, tt.trust); !errors.Is(err, decide.ErrNotOffered) {
				t.Errorf("%+v %s: %v", tt.sw, tt.trust, err)
			}
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkFlowStep is one flow step's decision in its own transaction:
// the request stored and approved on the policy's behalf ("policy", what a
// step without a consent costs once its tap arrives) or under a run
// consent ("consent": the consents read locked, the in-flight check, the
// gate, the use counted, the in-flight row). The difference is what a
// step under consent adds to the transition; p99 is reported.
//
// The "paired" run alternates the two in one loop on one database, so
// both see the same noise of a shared machine: it reports each one's p50
// and p99 and the p99 of what consent added over the policy step next to
// it (added-p99-ms), the figure.
func BenchmarkFlowStep(b *testing.B) {
	// The collector as `silas serve` sets it (internal/gcdefault: GOGC=200
	// unless the environment says otherwise), as core/flowrun's
	// BenchmarkTransition: a test binary would otherwise collect at Go's
	// default of 100, which serve does not, and the slowest steps are the
	// ones a collection lands on. GOGC=100 in the environment measures as
	// before.
	gcdefault.Apply()
	for _, mode := range []string{"policy", "consent", "paired"} {
		b.Run(mode, func(b *testing.B) {
			rb := setupRun(b)
			rb.mint(b, "run-bench", b.N+1, "n")
			var pol, con, added []time.Duration
			step := func(i int, underConsent bool) time.Duration {
				start := time.Now()
				err := rb.st.Do(rb.ctx, func(ctx context.Context, tx *store.Tx) ([]audit.Entry, error) {
					a := signedRequest(b, rb.key, tx.Now(), cards.RiskLow, "echo", "n")
					tx.QueueApproval(a)
					var r decide.Result
					var err error
					if !underConsent {
						r, err = rb.d.Approve(ctx, tx, a, "policy:bench")
					} else {
						var code consent.Code
						r, _, code, err = rb.d.ApproveInRun(ctx, tx, flowsOn, consent.Request{Run: "run-bench", Node: "n", Step: fmt.Sprintf("n/0/%d", i)}, facts(), a)
						if err == nil && code != "" {
							err = fmt.Errorf("refused: %s", code)
						}
					}
					if err != nil {
						return nil, err
					}
					var entries []audit.Entry
					for _, n := range r.Notes {
						entries = append(entries, audit.Entry{Kind: n.Kind, Actor: "bench", Conversation: string(conv), Data: n.Data})
					}
					return entries, nil
				})
				if err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			b.ResetTimer()
			for i := range b.N {
				switch mode {
				case "policy":
					pol = append(pol, step(i, false))
				case "consent":
					con = append(con, step(i, true))
				default:
					p, c := step(i, false), step(i, true)
					pol, con, added = append(pol, p), append(con, c), append(added, c-p)
				}
			}
			b.StopTimer()
			q := func(lat []time.Duration, f float64) float64 {
				slices.Sort(lat)
				return float64(lat[int(float64(len(lat)-1)*f)].Microseconds()) / 1000
			}
			for name, lat := range map[string][]time.Duration{"policy-": pol, "consent-": con} {
				if len(lat) > 0 {
					b.ReportMetric(q(lat, 0.99), name+"p99-ms")
					b.ReportMetric(q(lat, 0.5), name+"p50-ms")
				}
			}
			if len(added) > 0 {
				b.ReportMetric(q(added, 0.99), "added-p99-ms")
				b.ReportMetric(q(added, 0.5), "added-p50-ms")
			}
		})
	}
}
