package llm_test

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
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/policy"
	"github.com/silas-gateway/silas/core/verify"
)

// answerChannel is a platform that signals every text message it is sent
// (the LLM agent's answers).
type answerChannel struct{ sent chan struct{} }

func (c *answerChannel) Name() core.ChannelName { return "test" }
func (c *answerChannel) Run(ctx context.Context, _ core.Inbox) error {
	<-ctx.Done()
	return nil
}

func (c *answerChannel) Send(_ context.Context, m core.OutMessage) (core.MessageRef, error) {
	if m.Card == nil {
		c.sent <- struct{}{}
	}
	return core.MessageRef(core.NewID()), nil
}

func (c *answerChannel) Update(context.Context, core.MessageRef, core.OutMessage) error { return nil }

// cannedEndpoint answers every chat completion at once with the same
// text, as silas-load's model does: it reads the request and nothing else,
// so nearly all the CPU a benchmark measures is the gateway's.
func cannedEndpoint(b *testing.B) string {
	answer, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "m",
		"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": "Noted: the disk is 42 % full and nothing needs doing."}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 900, "completion_tokens": 12, "total_tokens": 912},
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	b.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// benchEndpoints are the model endpoints the LLM path is measured
// against: the canned one (what the gateway costs) and llmtest, the
// project's strict fake, which decodes and checks every request (what a
// test costs; its own decoding is in the figure).
var benchEndpoints = []struct {
	name string
	url  func(b *testing.B) string
}{
	{"endpoint=canned", cannedEndpoint},
	{"endpoint=llmtest", func(b *testing.B) string {
		fake := llmtest.New(b, testKey, "m")
		fake.Respond(func(llmtest.ChatRequest) llmtest.Reply {
			return llmtest.Reply{Content: "Noted: the disk is 42 % full and nothing needs doing."}
		})
		return fake.BaseURL()
	}},
}

// llmBench is the real engine on PostgreSQL with the LLM agent wired as
// silas serve wires it (history from the store, the stored secrets'
// names), its conversation's history filled to the default window.
type llmBench struct {
	eng   *gateway.Gateway
	ag    *llm.Agent
	ch    *answerChannel
	ctx   context.Context
	seq   int
	close func()
}

func newLLMBench(b *testing.B, baseURL string) *llmBench {
	ctx, cancel := context.WithCancel(context.Background())
	st, sb := openStoreSandbox(b, ctx)
	client, err := llm.New(llm.Config{BaseURL: baseURL, APIKey: testKey, Models: llm.Models{Proxy: "m", Planner: "m", Executor: "m"},
		Timeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ag := &llm.Agent{Proxy: llm.Proxy{Client: client}, Planner: llm.Planner{Client: client}, Fallback: agent.Command{}, Tasks: true,
		History: st, SecretNamesWithHistory: true, SecretNames: func(ctx context.Context) ([]string, error) {
			infos, err := st.ListSecrets(ctx)
			names := make([]string, 0, len(infos))
			for _, i := range infos {
				names = append(names, i.Name)
			}
			return names, err
		}}
	pol, _ := policy.New(nil)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	ch := &answerChannel{sent: make(chan struct{}, 16)}
	eng, err := gateway.New(gateway.Config{Store: st, Channels: []core.Channel{ch}, Agent: ag, Sandbox: sb,
		Verifier: &verify.Runner{Commands: execute.SandboxChecks{Sandbox: sb}}, Policy: pol, Key: key,
		Owners: []core.IdentityID{owner}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Run(ctx, time.Second) }()
	<-eng.Ready()
	h := &llmBench{eng: eng, ag: ag, ch: ch, ctx: ctx, close: func() {
		cancel()
		<-done
		sb.Close()
		st.Close()
	}}
	// Twice the history window of exchanges: every measured message is
	// answered with a full history, as in a running conversation.
	for range 2 * llm.DefaultHistoryMessages {
		h.answer(b)
	}
	return h
}

// answer delivers one message and waits for the agent's answer to reach
// the channel.
func (h *llmBench) answer(b *testing.B) {
	h.seq++
	if _, err := h.eng.Deliver(h.ctx, core.Turn{Channel: "test", Conversation: "test:chat", Sender: owner, EventID: fmt.Sprintf("e%d", h.seq),
		Text:     fmt.Sprintf("message %d: how full is the disk, and should I <clean> anything up & when?", h.seq),
		Evidence: core.Evidence{Authenticated: true, Method: "test"}}); err != nil {
		b.Fatalf("Deliver: %v", err)
	}
	select {
	case <-h.ch.sent:
	case <-time.After(30 * time.Second):
		b.Fatal("no answer within 30s")
	}
}

// BenchmarkLLMAnswer is issue 26 point 5's path in the gateway, one op per
// answered message: the turn stored, the worker's Respond (history read
// and rendered, the stored secrets' names, the model call), the answer
// stored and sent by the outbox. cpu-µs/msg is this process's CPU per
// message (engine, agent, pgx, and the endpoint, which for
// endpoint=canned only reads the request); PostgreSQL's own CPU is not in
// it. One message at a time, so background work (the engine's polls) is
// in the figure too: compare runs of equal -benchtime.
func BenchmarkLLMAnswer(b *testing.B) {
	for _, ep := range benchEndpoints {
		b.Run(ep.name, func(b *testing.B) {
			h := newLLMBench(b, ep.url(b))
			defer h.close()
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.ResetTimer()
			for range b.N {
				h.answer(b)
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/msg")
		})
	}
}

// BenchmarkRespond is the LLM agent's own share of that path, one op per
// Agent.Respond on a conversation with a full history window: the
// history read in one query and rendered (redaction, fencing), the stored
// secrets' names, the request encoded, the model call over a kept-alive
// connection and its answer decoded. cpu-µs/op is this process's CPU per
// op (the endpoint's included, as above).
func BenchmarkRespond(b *testing.B) {
	for _, ep := range benchEndpoints {
		b.Run(ep.name, func(b *testing.B) {
			h := newLLMBench(b, ep.url(b))
			defer h.close()
			in := core.AgentInput{Channel: "test", Conversation: "test:chat", Sender: owner, Trust: core.TrustOwner,
				Text: "and how full is the disk now, and should I <clean> anything up & when?", Seq: 1 << 40}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.ResetTimer()
			for range b.N {
				p, err := h.ag.Respond(h.ctx, in)
				if err != nil || !strings.HasPrefix(p.Reply, "Noted") {
					b.Fatalf("Respond = %+v, %v", p, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		})
	}
}
