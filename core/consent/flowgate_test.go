package consent

import (
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

var runLim = Limits{TTL: time.Hour, MaxTTL: 24 * time.Hour, MaxUses: 20}

func runConsent(t testing.TB, key ed25519.PrivateKey, now time.Time) Consent {
	t.Helper()
	c, err := ForRun("crun-a-0001", RunGrant{Run: "run-a", Flow: "restart", FlowVersion: "v3", Nodes: []string{"restart", "check"},
		Tool: "shell", Programs: []string{"systemctl", "curl"}, MaxRisk: cards.RiskMedium, Lanes: []string{LaneOffline},
		MaxUses: 20, CostCap: 100}, "web:1", "web:owner", now, runLim)
	if err != nil {
		t.Fatal(err)
	}
	if err := Sign(key, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// okRun is a run whose step "restart" may run now.
func okRun() RunFacts {
	return RunFacts{Found: true, InProgress: true, Flow: "restart", FlowVersion: "v3", FlowFound: true,
		Step: StepFacts{Found: true, Automatable: true, Ready: true}}
}

func okRequest() Request {
	return Request{Op: OpRun, Run: "run-a", Node: "restart", Step: "restart/0/1",
		Action: core.Action{Tool: "shell", Argv: []string{"systemctl", "restart", "web"}}, Risk: cards.RiskMedium}
}

// TestGate is the gate's table: one row for each refusal code (and a few
// more for the ways to reach one), plus the rows it allows.
func TestGate(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	now := time.Date(2026, 11, 26, 19, 0, 0, 0, time.UTC)
	on := Switches{RunWrites: true, Automatable: true}
	otherKey := func() ed25519.PrivateKey { _, k, _ := ed25519.GenerateKey(nil); return k }()
	resign := func(c *Consent, k ed25519.PrivateKey) {
		if err := Sign(k, c); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		sw      *Switches
		req     func(r *Request)
		run     func(f *RunFacts)
		consent func(c *Consent)
		none    bool // no consent at all
		at      time.Duration
		want    Code
	}{
		{name: "allowed", want: ""},
		{name: "allowed: skip for a bounded reason", req: func(r *Request) { r.Op, r.SkipReason, r.Action = OpSkip, "blocked_dependency", core.Action{} }, none: true},
		{name: "allowed: done with verified evidence", req: func(r *Request) { r.Op = OpDone },
			run: func(f *RunFacts) { f.Step.EvidenceRequired, f.Step.Verified, f.Step.Busy = true, true, true }, none: true},

		{name: "execution forbidden by policy: blocked", req: func(r *Request) { r.PolicyBlocked = true }, want: PolicyForbids},
		{name: "execution forbidden by policy: high risk", req: func(r *Request) { r.Risk = cards.RiskHigh }, want: PolicyForbids},
		{name: "execution forbidden by policy: a shell", req: func(r *Request) { r.Action.Argv = []string{"sh", "-c", "systemctl restart web"} }, want: PolicyForbids},
		{name: "execution forbidden by policy: medium above a low consent", consent: func(c *Consent) { c.MaxRisk = cards.RiskLow; resign(c, key) }, want: PolicyForbids},
		{name: "run writes disabled", sw: &Switches{Automatable: true}, want: RunWritesDisabled},
		{name: "run writes disabled: skip", sw: &Switches{}, req: func(r *Request) { r.Op, r.SkipReason = OpSkip, "policy" }, want: RunWritesDisabled},
		{name: "automatable execution disabled", sw: &Switches{RunWrites: true}, want: AutomatableDisabled},
		{name: "consent required: none", none: true, want: Required},
		{name: "consent required: node not covered", req: func(r *Request) { r.Node = "deploy" }, want: Required},
		{name: "consent required: program not covered", req: func(r *Request) { r.Action.Argv = []string{"rm", "-rf", "/srv"} }, want: Required},
		{name: "consent required: secret not covered", req: func(r *Request) { r.Action.Secrets = []string{"db_password"} }, want: Required},
		{name: "consent required: an external agent's grant never stands in", req: func(r *Request) { r.ExternalGrant = true }, want: Required},
		{name: "consent required: another consent named", req: func(r *Request) { r.Consent = "crun-b-0002" }, want: Required},
		{name: "consent required: expired", at: time.Hour, want: Expired},
		{name: "consent required: revoked", consent: func(c *Consent) { c.RevokedAt = now }, want: Revoked},
		{name: "consent run mismatch", req: func(r *Request) { r.Run = "run-b" }, want: RunMismatch},
		{name: "consent run mismatch: a conversation consent", consent: func(c *Consent) { c.Scope, c.Run = ScopeConversation, ""; resign(c, key) }, want: RunMismatch},
		{name: "consent run mismatch: another pinned version", run: func(f *RunFacts) { f.FlowVersion = "v4" }, want: RunMismatch},
		{name: "bad signature: edited nodes", consent: func(c *Consent) { c.Nodes = append(c.Nodes, "deploy") }, req: func(r *Request) { r.Node = "deploy" }, want: BadSignature},
		{name: "bad signature: edited cap", consent: func(c *Consent) { c.CostCap = 1000 }, want: BadSignature},
		{name: "bad signature: edited expiry", consent: func(c *Consent) { c.ExpiresAt = c.ExpiresAt.Add(time.Hour) }, want: BadSignature},
		{name: "bad signature: signed by another key", consent: func(c *Consent) { resign(c, otherKey) }, want: BadSignature},
		{name: "lane denied", req: func(r *Request) { r.Action.Network = true }, want: LaneDenied},
		{name: "lane denied: a model endpoint", req: func(r *Request) { r.Lane = "model:big" }, want: LaneDenied},
		{name: "cost capped", consent: func(c *Consent) { c.Units = 100 }, want: CostCapped},
		{name: "cost capped: a step costing more than is left", consent: func(c *Consent) { c.Units = 90 }, req: func(r *Request) { r.Cost = 11 }, want: CostCapped},
		{name: "uses exhausted", consent: func(c *Consent) { c.Uses = 20 }, want: UsesExhausted},
		{name: "step not automatable", run: func(f *RunFacts) { f.Step.Automatable = false }, want: NotAutomatable},
		{name: "step out of order (frontier)", run: func(f *RunFacts) { f.Step.Ready = false }, want: OutOfOrder},
		{name: "step out of order: done on a step not reached", req: func(r *Request) { r.Op = OpDone },
			run: func(f *RunFacts) { f.Step.Ready, f.Step.Verified = false, true }, none: true, want: OutOfOrder},
		{name: "step out of order: skip of a step not reached", req: func(r *Request) { r.Op, r.SkipReason = OpSkip, "policy" },
			run: func(f *RunFacts) { f.Step.Ready = false }, none: true, want: OutOfOrder},
		{name: "another step in progress", run: func(f *RunFacts) { f.Step.Busy = true }, want: InProgress},
		{name: "another step in progress: skip of a step executing", req: func(r *Request) { r.Op, r.SkipReason = OpSkip, "policy" },
			run: func(f *RunFacts) { f.Step.Busy = true }, none: true, want: InProgress},
		{name: "verification unsatisfied: done on a gate (a person's review)", req: func(r *Request) { r.Op = OpDone },
			run: func(f *RunFacts) { f.Step.EvidenceRequired, f.Step.HumanReview = true, true }, none: true, want: VerificationUnsatisfied},
		{name: "verification unsatisfied: human review", run: func(f *RunFacts) { f.Step.HumanReview = true }, want: VerificationUnsatisfied},
		{name: "verification unsatisfied: done without evidence", req: func(r *Request) { r.Op = OpDone },
			run: func(f *RunFacts) { f.Step.EvidenceRequired = true }, none: true, want: VerificationUnsatisfied},
		{name: "run not in progress", run: func(f *RunFacts) { f.InProgress = false }, want: RunNotInProgress},
		{name: "unknown run", run: func(f *RunFacts) { *f = RunFacts{} }, want: UnknownRun},
		{name: "unknown flow", run: func(f *RunFacts) { f.FlowFound = false }, want: UnknownFlow},
		{name: "bad request: unknown step", run: func(f *RunFacts) { f.Step = StepFacts{} }, want: BadRequest},
		{name: "bad request: free-text skip reason", req: func(r *Request) { r.Op, r.SkipReason = OpSkip, "felt like it" }, want: BadRequest},
		{name: "bad request: skip without a reason", req: func(r *Request) { r.Op = OpSkip }, want: BadRequest},
		{name: "bad request: unknown op", req: func(r *Request) { r.Op = "force" }, want: BadRequest},
		{name: "bad request: no run", req: func(r *Request) { r.Run = "" }, want: BadRequest},
		{name: "bad request: control characters", req: func(r *Request) { r.Node = "restart\n" }, want: BadRequest},
		{name: "bad request: negative cost", req: func(r *Request) { r.Cost = -1 }, want: BadRequest},
	}
	seen := map[Code]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sw := on
			if tt.sw != nil {
				sw = *tt.sw
			}
			r, f, c := okRequest(), okRun(), runConsent(t, key, now)
			if tt.req != nil {
				tt.req(&r)
			}
			if tt.run != nil {
				tt.run(&f)
			}
			if tt.consent != nil {
				tt.consent(&c)
			}
			cs := []Consent{c}
			if tt.none {
				cs = nil
			}
			got, code := Gate(sw, pub, r, f, cs, now.Add(time.Minute+tt.at))
			if code != tt.want {
				t.Fatalf("Gate = %q, want %q", code, tt.want)
			}
			if code == "" && r.Op == OpRun && got.ID != c.ID {
				t.Fatalf("allowed under %q, want %q", got.ID, c.ID)
			}
			if code != "" && got.ID != "" {
				t.Fatalf("refused %q but returned consent %q", code, got.ID)
			}
			seen[code] = true
		})
	}
	for _, code := range Codes {
		if !seen[code] {
			t.Errorf("no row refuses with %q", code)
		}
		if w := code.Words(); w == string(code) || w == "" {
			t.Errorf("code %q has no plain words", code)
		}
	}
}

// A consent minted for run A and used on run B is refused, even when the
// request names it.
func TestGateRunAConsentOnRunB(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	now := time.Now()
	c := runConsent(t, key, now)
	r := okRequest()
	r.Run, r.Consent = "run-b", c.ID
	if _, code := Gate(Switches{RunWrites: true, Automatable: true}, pub, r, okRun(), []Consent{c}, now); code != RunMismatch {
		t.Fatalf("Gate = %q, want %q", code, RunMismatch)
	}
}

func TestForRunRefuses(t *testing.T) {
	now := time.Now()
	ok := RunGrant{Run: "r", Flow: "f", FlowVersion: "1", Nodes: []string{"n"}, Tool: "shell", Programs: []string{"ls"},
		MaxRisk: cards.RiskLow, Lanes: []string{LaneOffline}, MaxUses: 1, CostCap: 1}
	if _, err := ForRun("c", ok, "w", "o", now, runLim); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(g *RunGrant){
		"high risk":        func(g *RunGrant) { g.MaxRisk = cards.RiskHigh },
		"a shell program":  func(g *RunGrant) { g.Programs = []string{"ls", "bash"} },
		"a shell argv":     func(g *RunGrant) { g.Programs, g.Argv, g.Prefix = nil, []string{"python3"}, true },
		"no nodes":         func(g *RunGrant) { g.Nodes = nil },
		"nothing runnable": func(g *RunGrant) { g.Programs = nil },
		"no run":           func(g *RunGrant) { g.Run = "" },
		"no uses":          func(g *RunGrant) { g.MaxUses = 0 },
	} {
		g := ok
		edit(&g)
		if _, err := ForRun("c", g, "w", "o", now, runLim); err == nil {
			t.Errorf("%s: minted", name)
		}
	}
	g := ok
	g.TTL = 72 * time.Hour
	c, _ := ForRun("c", g, "w", "o", now, runLim)
	if c.ExpiresAt.Sub(now) > 24*time.Hour+time.Second {
		t.Fatalf("ttl %s above the maximum", c.ExpiresAt.Sub(now))
	}
}

// A conversation consent signs the same bytes with the Programs field
// added (omitted when empty): consents minted before it still verify.
func TestConversationSigningBytesUnchanged(t *testing.T) {
	b, err := (Consent{ID: "x"}).SigningBytes()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "programs") {
		t.Fatalf("signing bytes name programs: %s", b)
	}
}

// FuzzGate: any request, any run — the gate answers with "" or one of
// Codes, never panics, and allows a run only under one of the run's own
// valid consents, for a listed node, at low or medium risk.
func FuzzGate(f *testing.F) {
	pub, key, _ := ed25519.GenerateKey(nil)
	now := time.Date(2026, 11, 26, 19, 0, 0, 0, time.UTC)
	c := runConsent(f, key, now)
	f.Add("run", "run-a", "restart", "restart/0/1", "", "", "systemctl restart web", "medium", "", 0, uint8(0xff))
	f.Add("skip", "run-a", "check", "check/0/1", "", "policy", "", "low", "", 0, uint8(0xff))
	f.Add("run", "run-b", "restart", "s", "crun-a-0001", "", "sh -c x", "high", "model:x", -3, uint8(0x0f))
	f.Fuzz(func(t *testing.T, op, run, node, step, cons, skip, argv, risk, lane string, cost int, bits uint8) {
		r := Request{Op: Op(op), Run: run, Node: node, Step: step, Consent: cons, SkipReason: skip, Risk: cards.Risk(risk), Lane: lane, Cost: cost,
			Action: core.Action{Tool: "shell", Argv: strings.Fields(argv), Network: bits&1 == 0}, PolicyBlocked: bits&2 == 0, ExternalGrant: bits&4 == 0}
		facts := RunFacts{Found: bits&8 != 0, InProgress: bits&16 != 0, Flow: "restart", FlowVersion: "v3", FlowFound: bits&32 != 0,
			Step: StepFacts{Found: bits&64 != 0, Automatable: bits&128 != 0, Ready: true}}
		sw := Switches{RunWrites: true, Automatable: true}
		got, code := Gate(sw, pub, r, facts, []Consent{c}, now)
		if code != "" && !slices.Contains(Codes, code) {
			t.Fatalf("unnamed code %q", code)
		}
		if code == "" && r.Op == OpRun {
			if got.ID != c.ID || r.Run != c.Run || !slices.Contains(c.Nodes, r.Node) || r.PolicyBlocked || r.ExternalGrant ||
				(r.Risk != cards.RiskLow && r.Risk != cards.RiskMedium) || !facts.Step.Automatable {
				t.Fatalf("allowed %+v under %+v", r, got)
			}
		}
		if code == "" && r.Op == OpSkip && !slices.Contains(SkipReasons, r.SkipReason) {
			t.Fatalf("skipped for %q", r.SkipReason)
		}
	})
}

// BenchmarkGate is the gate's own CPU per step (the signature check
// dominates): what a step under consent adds before the database's part.
func BenchmarkGate(b *testing.B) {
	pub, key, _ := ed25519.GenerateKey(nil)
	now := time.Date(2026, 11, 26, 19, 0, 0, 0, time.UTC)
	cs := []Consent{runConsent(b, key, now)}
	sw, r, f := Switches{RunWrites: true, Automatable: true}, okRequest(), okRun()
	lat := make([]time.Duration, 0, 1024)
	for b.Loop() {
		start := time.Now()
		if _, code := Gate(sw, pub, r, f, cs, now); code != "" {
			b.Fatal(code)
		}
		lat = append(lat, time.Since(start))
	}
	// The target is per decision (≤ 2 ms p99), so the tail is reported.
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
}
