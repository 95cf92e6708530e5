package task

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core/agent/llm/plan"
)

func TestMachine(t *testing.T) {
	ready := func(steps int, checks bool) Event { return Event{Kind: PlanReady, Steps: steps, HasChecks: checks} }
	fail := Event{Kind: StepFailed, Detail: "exit code 1"}
	ok := Event{Kind: StepSucceeded}
	type want struct {
		dir     DirectiveKind
		state   State
		step    int
		attempt int
		errHas  string
	}
	tests := []struct {
		name   string
		pol    Policy
		events []Event
		want   []want // one per event
	}{
		{"happy path with checks", Policy{}, []Event{ready(2, true), ok, ok, {Kind: VerifyPassed}},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoRunStep, Running, 1, 1, ""}, {DoVerify, Verifying, 1, 1, ""}, {DoFinish, Done, 1, 1, ""}}},
		{"no checks: done after the last step", Policy{}, []Event{ready(1, false), ok},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoFinish, Done, 0, 1, ""}}},
		{"retry then success", Policy{}, []Event{ready(1, false), fail, fail, ok},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoRunStep, Running, 0, 2, ""}, {DoRunStep, Running, 0, 3, ""}, {DoFinish, Done, 0, 3, ""}}},
		{"full cascade: retry, consult, replan twice, escalate", Policy{MaxAttempts: 2}, []Event{
			ready(1, false), fail, fail, {Kind: GuidanceReady, Detail: "use du -x"}, fail, fail,
			ready(1, false), fail, fail, {Kind: GuidanceFailed}, ready(1, false), fail, fail, {Kind: GuidanceFailed}},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoRunStep, Running, 0, 2, ""}, {DoConsult, Consulting, 0, 2, ""},
				{DoRunStep, Running, 0, 1, ""}, {DoRunStep, Running, 0, 2, ""}, {DoReplan, Replanning, 0, 2, ""},
				{DoRunStep, Running, 0, 1, ""}, {DoRunStep, Running, 0, 2, ""}, {DoConsult, Consulting, 0, 2, ""},
				{DoReplan, Replanning, 0, 2, ""}, {DoRunStep, Running, 0, 1, ""}, {DoRunStep, Running, 0, 2, ""},
				{DoConsult, Consulting, 0, 2, ""}, {DoEscalate, Escalated, 0, 2, ""}}},
		{"events the state does not expect are refused", Policy{MaxAttempts: 1}, []Event{ready(1, false), fail, fail, ready(1, false)},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoConsult, Consulting, 0, 1, ""},
				{"", Consulting, 0, 1, "step_failed event while consulting"}, {"", Consulting, 0, 1, "plan_ready event while consulting"}}},
		{"guidance failure goes on to replan, then escalate", Policy{MaxAttempts: 1, MaxReplans: 1}, []Event{
			ready(2, false), ok, fail, {Kind: GuidanceFailed}, ready(2, false), ok, fail, {Kind: GuidanceFailed}},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoRunStep, Running, 1, 1, ""}, {DoConsult, Consulting, 1, 1, ""},
				{DoReplan, Replanning, 1, 1, ""}, {DoRunStep, Running, 0, 1, ""}, {DoRunStep, Running, 1, 1, ""},
				{DoConsult, Consulting, 1, 1, ""}, {DoEscalate, Escalated, 1, 1, ""}}},
		{"on_stuck replan skips the consultation", Policy{MaxAttempts: 1, OnStuck: plan.Replan}, []Event{ready(1, false), fail},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoReplan, Replanning, 0, 1, ""}}},
		{"on_stuck escalate goes straight to the user", Policy{MaxAttempts: 1, OnStuck: plan.Escalate}, []Event{ready(1, false), fail},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoEscalate, Escalated, 0, 1, ""}}},
		{"verify failure retries the last step", Policy{}, []Event{ready(1, true), ok, {Kind: VerifyFailed, Detail: "disk 95%"}, ok, {Kind: VerifyPassed}},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoVerify, Verifying, 0, 1, ""}, {DoRunStep, Running, 0, 2, ""}, {DoVerify, Verifying, 0, 2, ""}, {DoFinish, Done, 0, 2, ""}}},
		{"escalation: user retries", Policy{MaxAttempts: 1, OnStuck: plan.Escalate}, []Event{ready(1, false), fail, {Kind: UserRetry}, ok},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoEscalate, Escalated, 0, 1, ""}, {DoRunStep, Running, 0, 1, ""}, {DoFinish, Done, 0, 1, ""}}},
		{"escalation: user re-plans past the limit", Policy{MaxAttempts: 1, MaxReplans: -1}, []Event{ready(1, false), fail, {Kind: GuidanceFailed}, {Kind: UserReplan}, ready(1, false)},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoConsult, Consulting, 0, 1, ""}, {DoEscalate, Escalated, 0, 1, ""}, {DoReplan, Replanning, 0, 1, ""}, {DoRunStep, Running, 0, 1, ""}}},
		{"planner fails: escalate", Policy{}, []Event{{Kind: PlanFailed, Detail: "no front matter"}},
			[]want{{DoEscalate, Escalated, 0, 0, ""}}},
		{"budget stops at any point", Policy{}, []Event{ready(1, false), {Kind: BudgetExhausted, Detail: "tokens"}, ok},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoStop, Stopped, 0, 1, ""}, {"", Stopped, 0, 1, "on a stopped task"}}},
		{"user stop while escalated", Policy{MaxAttempts: 1, OnStuck: plan.Escalate}, []Event{ready(1, false), fail, {Kind: UserStop}},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoEscalate, Escalated, 0, 1, ""}, {DoStop, Stopped, 0, 1, ""}}},
		{"stale events are refused", Policy{}, []Event{{Kind: StepSucceeded}, {Kind: VerifyPassed}, {Kind: UserRetry}, ready(0, false)},
			[]want{{"", Planning, 0, 0, "while planning"}, {"", Planning, 0, 0, "while planning"}, {"", Planning, 0, 0, "while planning"}, {"", Planning, 0, 0, "without steps"}}},
		{"done is final", Policy{}, []Event{ready(1, false), ok, {Kind: UserStop}},
			[]want{{DoRunStep, Running, 0, 1, ""}, {DoFinish, Done, 0, 1, ""}, {"", Done, 0, 1, "on a done task"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, d := Start()
			if d.Kind != DoPlan || m.State != Planning {
				t.Fatalf("Start = %+v %+v", m, d)
			}
			if len(tt.events) != len(tt.want) {
				t.Fatalf("test has %d events and %d wants", len(tt.events), len(tt.want))
			}
			for i, ev := range tt.events {
				next, d, err := Next(m, ev, tt.pol)
				w := tt.want[i]
				if w.errHas != "" {
					if err == nil || !strings.Contains(err.Error(), w.errHas) {
						t.Fatalf("event %d (%s): err = %v, want %q", i, ev.Kind, err, w.errHas)
					}
					if next != m {
						t.Fatalf("event %d: a refused event changed the machine: %+v → %+v", i, m, next)
					}
					continue
				}
				if err != nil {
					t.Fatalf("event %d (%s): %v", i, ev.Kind, err)
				}
				m = next
				if d.Kind != w.dir || m.State != w.state || m.Step != w.step || m.Attempt != w.attempt {
					t.Fatalf("event %d (%s): directive %s state %s step %d attempt %d; want %s %s %d %d",
						i, ev.Kind, d.Kind, m.State, m.Step, m.Attempt, w.dir, w.state, w.step, w.attempt)
				}
			}
		})
	}
}

func TestRetryCarriesFailureAndGuidance(t *testing.T) {
	m, _ := Start()
	pol := Policy{MaxAttempts: 2}
	m, _, _ = Next(m, Event{Kind: PlanReady, Steps: 1}, pol)
	m, d, _ := Next(m, Event{Kind: StepFailed, Detail: "permission denied"}, pol)
	if d.Failure != "permission denied" || d.Attempt != 2 {
		t.Fatalf("retry directive = %+v", d)
	}
	m, d, _ = Next(m, Event{Kind: StepFailed, Detail: "still denied"}, pol)
	if d.Kind != DoConsult || d.Failure != "still denied" {
		t.Fatalf("consult directive = %+v", d)
	}
	_, d, _ = Next(m, Event{Kind: GuidanceReady, Detail: "use sudo-less path"}, pol)
	if d.Kind != DoRunStep || d.Guidance != "use sudo-less path" || d.Failure != "still denied" || d.Attempt != 1 {
		t.Fatalf("guided directive = %+v", d)
	}
}

func TestEscalationReasonNamesTheStep(t *testing.T) {
	m, _ := Start()
	pol := Policy{MaxAttempts: 1, OnStuck: plan.Escalate}
	m, _, _ = Next(m, Event{Kind: PlanReady, Steps: 3}, pol)
	m, _, _ = Next(m, Event{Kind: StepSucceeded}, pol)
	m, _, _ = Next(m, Event{Kind: StepSucceeded}, pol)
	_, d, _ := Next(m, Event{Kind: StepFailed, Detail: "nginx -t failed"}, pol)
	if d.Kind != DoEscalate || d.Reason != "stuck on step 3: nginx -t failed" {
		t.Fatalf("directive = %+v", d)
	}
}

func TestBudget(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	conf := Limits{Tokens: 1000, ModelCalls: 10, ToolCalls: 5, WallTime: time.Hour, CostUSD: 1}
	tests := []struct {
		name  string
		lim   Limits
		spent Spent
		now   time.Time
		want  string
	}{
		{"fresh", conf, Spent{Started: t0}, t0, ""},
		{"tokens reached", conf, Spent{Tokens: 1000, Started: t0}, t0, "1000 tokens"},
		{"tokens below", conf, Spent{Tokens: 999, Started: t0}, t0, ""},
		{"model calls", conf, Spent{ModelCalls: 10, Started: t0}, t0, "10 model calls"},
		{"tool calls", conf, Spent{ToolCalls: 5, Started: t0}, t0, "5 tool calls"},
		{"wall time", conf, Spent{Started: t0}, t0.Add(time.Hour), "time budget of 1h0m0s"},
		{"cost unknown is not enforced", conf, Spent{CostUSD: 5, Started: t0}, t0, ""},
		{"cost known", conf, Spent{CostUSD: 1.5, CostKnown: true, Started: t0}, t0, "$1.00"},
		{"no limits", Limits{}, Spent{Tokens: 1 << 40, Started: t0}, t0.Add(1000 * time.Hour), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.spent.Exhausted(tt.lim, tt.now)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Fatalf("Exhausted = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPlanCanOnlyLowerLimits(t *testing.T) {
	conf := Limits{Tokens: 1000, ModelCalls: 10, ToolCalls: 5, WallTime: time.Hour}
	tests := []struct {
		name string
		b    plan.Budget
		want Limits
	}{
		{"empty budget", plan.Budget{}, conf},
		{"lower", plan.Budget{MaxTokens: 10, MaxModelCalls: 2, MaxToolCalls: 1, MaxWallTimeSeconds: 60, MaxCostUSD: 0.5},
			Limits{Tokens: 10, ModelCalls: 2, ToolCalls: 1, WallTime: time.Minute, CostUSD: 0.5}},
		{"higher is ignored", plan.Budget{MaxTokens: 1 << 30, MaxModelCalls: 99, MaxToolCalls: 99, MaxWallTimeSeconds: 86400}, conf},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := conf.Apply(tt.b); got != tt.want {
				t.Fatalf("Apply = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSpentCounts(t *testing.T) {
	s := Spent{}.ModelCall(100, -1).ModelCall(50, 0.25).ToolCall()
	if s.ModelCalls != 2 || s.Tokens != 150 || s.ToolCalls != 1 || s.CostUSD != 0.25 || !s.CostKnown {
		t.Fatalf("spent = %+v", s)
	}
}

func TestEviction(t *testing.T) {
	stored := map[string]string{}
	save := func(s string) (string, error) {
		p := "out-" + string(rune('a'+len(stored)))
		stored[p] = s
		return p, nil
	}
	load := func(p string) (string, error) {
		s, ok := stored[p]
		if !ok {
			return "", errors.New("no such output")
		}
		return s, nil
	}
	tests := []struct {
		name          string
		out           string
		evicted       bool
		rehydrateOK   bool
		wantSummaryLn int
	}{
		{"small", "hello", false, true, 0},
		{"exactly 10000", strings.Repeat("x", EvictAbove), false, true, 0},
		{"10001 characters", strings.Repeat("x", EvictAbove+1), true, true, SummaryChars},
		{"multibyte counts characters", strings.Repeat("é", EvictAbove), false, true, 0},
		{"50000 rehydrates", strings.Repeat("y", RehydrateMax), true, true, SummaryChars},
		{"50001 does not", strings.Repeat("z", RehydrateMax+1), true, false, SummaryChars},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Interpret("ok", tt.out, save)
			if err != nil {
				t.Fatal(err)
			}
			if r.Evicted != tt.evicted || r.RehydrationAllowed != tt.rehydrateOK || len([]rune(r.Summary)) != tt.wantSummaryLn {
				t.Fatalf("result = evicted %v rehydrate %v summary %d", r.Evicted, r.RehydrationAllowed, len([]rune(r.Summary)))
			}
			if r.SizeChars != len([]rune(tt.out)) {
				t.Fatalf("size = %d", r.SizeChars)
			}
			if tt.evicted && (!strings.HasPrefix(r.Output, "[EVICTED] Content at ") || len(r.Output) > 100) {
				t.Fatalf("output = %q", r.Output)
			}
			back, err := Rehydrate(r, load)
			if tt.rehydrateOK {
				if err != nil || back != tt.out {
					t.Fatalf("Rehydrate: %v (len %d)", err, len(back))
				}
			} else if !errors.Is(err, ErrTooLargeToRehydrate) {
				t.Fatalf("Rehydrate err = %v", err)
			}
		})
	}
	if _, err := Interpret("ok", strings.Repeat("x", EvictAbove+1), func(string) (string, error) { return "", errors.New("disk full") }); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("save failure: %v", err)
	}
	// A result claiming a small size does not rehydrate a huge stored output.
	stored["big"] = strings.Repeat("q", RehydrateMax+1)
	if _, err := Rehydrate(Result{Evicted: true, Pointer: "big", SizeChars: 10, RehydrationAllowed: true}, load); !errors.Is(err, ErrTooLargeToRehydrate) {
		t.Fatalf("lying result: %v", err)
	}
}

func TestRehydrateCapped(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		wantCut bool
	}{
		{"small", "hello", false},
		{"exactly the cap", strings.Repeat("é", RehydrateMax), false},
		{"over the cap", strings.Repeat("é", RehydrateMax) + "tail", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, cut := RehydrateCapped(tt.out)
			if cut != tt.wantCut {
				t.Fatalf("cut = %v", cut)
			}
			if !cut && got != tt.out {
				t.Fatalf("output changed")
			}
			if cut {
				body, note, ok := strings.Cut(got, "\n[CUT] ")
				if !ok || body != strings.Repeat("é", RehydrateMax) || !strings.Contains(note, "50004 characters") {
					t.Fatalf("capped output: %d characters, note %q", len([]rune(body)), note)
				}
			}
		})
	}
}
