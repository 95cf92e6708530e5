package llm_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/background/backgroundtest"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/tasks"
	"github.com/silas-gateway/silas/core/verify"
	"github.com/silas-gateway/silas/internal/taskwire"
)

// benchSteps is the length of each benchmark task's plan (the parser's
// maximum): one step is one proposed call, one tap, one result.
const benchSteps = 20

// stepClock collects the instants the benchmark measures between. The
// fake model answers instantly, so what is left is the runtime's own
// overhead: HTTP to the model and back, PostgreSQL, the outbox, the
// engine's gate and (for a tap) the sandbox running `echo`.
type stepClock struct {
	replied chan time.Time // the model's answer with a tool call is on its way back
	asked   chan time.Time // a model call with a tool result has arrived
	cards   chan cardSeen  // a step's approval card reached the channel
	done    chan struct{}  // a task's summary reached the channel
}

type cardSeen struct {
	id cards.ID
	at time.Time
}

// benchChannel is a platform that only notes when things arrive.
type benchChannel struct {
	clk *stepClock
	mu  sync.Mutex
	n   int
}

func (c *benchChannel) Name() core.ChannelName { return "test" }
func (c *benchChannel) Run(ctx context.Context, _ core.Inbox) error {
	<-ctx.Done()
	return nil
}

func (c *benchChannel) Send(_ context.Context, m core.OutMessage) (core.MessageRef, error) {
	now := time.Now()
	c.mu.Lock()
	c.n++
	ref := core.MessageRef(fmt.Sprintf("m%d", c.n))
	c.mu.Unlock()
	switch {
	case m.Card != nil && m.Card.Status == cards.StatusPending && strings.HasPrefix(m.Card.Command, "echo "):
		c.clk.cards <- cardSeen{id: m.Card.ID, at: now}
	case m.Card == nil && strings.HasPrefix(m.Text, "Done: "):
		c.clk.done <- struct{}{}
	}
	return ref, nil
}

func (c *benchChannel) Update(context.Context, core.MessageRef, core.OutMessage) error { return nil }

// benchResponder is the model: the proxy hands every message to the
// planner, the planner writes a benchSteps-step plan, the executor
// proposes one `echo` per step and says the step is done once it has the
// result.
func benchResponder(clk *stepClock) llmtest.Responder {
	var steps strings.Builder
	for i := 1; i <= benchSteps; i++ {
		fmt.Fprintf(&steps, "  - Say %d\n", i)
	}
	plan := "---\ntitle: Say things\nsteps:\n" + steps.String() + "---\n# Context\nA benchmark plan."
	return func(req llmtest.ChatRequest) llmtest.Reply {
		sys := req.Messages[0].Text()
		switch {
		case strings.Contains(sys, "You are the proxy"):
			return llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "plan_task", Arguments: `{"goal":"say things"}`}}}
		case strings.Contains(sys, "You are the planner"):
			return llmtest.Reply{Content: plan}
		}
		if req.Messages[len(req.Messages)-1].Role == "tool" {
			clk.asked <- time.Now()
			return llmtest.Reply{Content: "STEP DONE: said it"}
		}
		r := llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "shell", Arguments: `{"argv":["echo","step"],"intent":"Say it"}`}}}
		clk.replied <- time.Now()
		return r
	}
}

// BenchmarkTaskStepOverhead measures the task runtime's own overhead per
// step on the real engine, PostgreSQL and sandbox, with a model that
// answers instantly. One op is one step: the executor's tool call → its
// approval card → a tap → the execution → the executor's next call.
// Reported, over all steps: card-p50/p99-ms, from the model's answer
// leaving the model to the card delivered to the channel;
// tap-p50/p99-ms, from the tap delivered to the gateway to the next model
// call arriving at the model; and exec-p50/p99-ms, the part of the latter
// spent in the execution itself; go-cpu-ms/step is this process's CPU
// per step.
func BenchmarkTaskStepOverhead(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	st, sb := openStoreSandbox(b, ctx)
	clk := &stepClock{replied: make(chan time.Time, 4), asked: make(chan time.Time, 4), cards: make(chan cardSeen, 4), done: make(chan struct{}, 4)}
	fake := llmtest.New(b, testKey, "m")
	fake.Respond(benchResponder(clk))
	client, err := llm.New(llm.Config{BaseURL: fake.BaseURL(), APIKey: testKey, Models: llm.Models{Proxy: "m", Planner: "m", Executor: "m"},
		Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	pol, err := policy.New([]policy.Rule{{Name: "default", Tool: "*", Decision: policy.AuthRequired, Risk: cards.RiskLow}})
	if err != nil {
		b.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	log := slog.New(slog.DiscardHandler)
	ch := &benchChannel{clk: clk}
	ag := &llm.Agent{Proxy: llm.Proxy{Client: client}, Planner: llm.Planner{Client: client}, Fallback: agent.Command{}, Tasks: true}
	eng, err := gateway.New(gateway.Config{Store: st, Channels: []core.Channel{ch}, Agent: ag, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}}, Policy: pol, Key: key,
		Owners: []core.IdentityID{owner}, Logger: log,
		Tasks: taskwire.Runtime(tasks.Config{Planner: llm.Planner{Client: client}, Executor: llm.Executor{Client: client},
			Limits: task.Limits{Tokens: 1 << 40, ModelCalls: 1000, ToolCalls: 1000, WallTime: 24 * time.Hour}})})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Run(ctx, time.Second) }()
	<-eng.Ready()
	stopRoom := backgroundtest.Start(b, st.Pool(), eng.Jobs) // works the task steps
	defer func() {
		cancel()
		<-done
		stopRoom()
		sb.Close()
		st.Close()
	}()

	events := 0
	deliver := func(text string, tap *core.Tap) time.Time {
		events++
		at := time.Now()
		if _, err := eng.Deliver(ctx, core.Turn{Channel: "test", Conversation: "test:chat", Sender: owner, EventID: fmt.Sprintf("b%d", events),
			Text: text, Tap: tap, Evidence: core.Evidence{Authenticated: true, Method: "test"}}); err != nil {
			b.Fatalf("Deliver: %v", err)
		}
		return at
	}
	wait := func(what string, c <-chan time.Time) time.Time {
		select {
		case t := <-c:
			return t
		case <-time.After(30 * time.Second):
			b.Fatalf("no %s within 30s", what)
			return time.Time{}
		}
	}
	toCard := make([]time.Duration, 0, b.N)
	toCall := make([]time.Duration, 0, b.N)
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%benchSteps == 0 {
			if i > 0 {
				select {
				case <-clk.done:
				case <-time.After(30 * time.Second):
					b.Fatal("the task did not finish within 30s")
				}
			}
			deliver("say things", nil)
		}
		replied := wait("tool call", clk.replied)
		var c cardSeen
		select {
		case c = <-clk.cards:
		case <-time.After(30 * time.Second):
			b.Fatal("no approval card within 30s")
		}
		toCard = append(toCard, c.at.Sub(replied))
		tapped := deliver("", &core.Tap{Card: c.id, Choice: "approve"})
		toCall = append(toCall, wait("model call after the tap", clk.asked).Sub(tapped))
	}
	b.StopTimer()
	// CPU of this process per step (engine, runtime, outbox, the fake model
	// and the driver; not PostgreSQL, not the sandboxed program): less
	// sensitive than the latencies to what else the machine is doing.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Millisecond)/float64(b.N), "go-cpu-ms/step")
	report := func(name string, ds []time.Duration) {
		slices.Sort(ds)
		at := func(q float64) float64 {
			return float64(ds[min(len(ds)-1, int(q*float64(len(ds))))]) / float64(time.Millisecond)
		}
		b.ReportMetric(at(0.50), name+"-p50-ms")
		b.ReportMetric(at(0.99), name+"-p99-ms")
	}
	report("card", toCard)
	report("tap", toCall)
	// The share of tap → call spent in the execution itself (the engine's
	// running → done: the sandbox run of `echo`, its output stored, its
	// check judged).
	var p50, p99 float64
	if err := st.Pool().QueryRow(context.Background(), `SELECT
			percentile_disc(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at)),
			percentile_disc(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at))
		FROM executions WHERE finished_at IS NOT NULL`).Scan(&p50, &p99); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(p50*1000, "exec-p50-ms")
	b.ReportMetric(p99*1000, "exec-p99-ms")
}

// processCPU is the user + system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
