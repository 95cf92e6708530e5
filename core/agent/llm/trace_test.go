package llm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
	"github.com/silas-gateway/silas/core/tracing"
)

// TestChatSpan: a model call is a silas.model span with the model's name
// and the token counts — never the prompt, the answer or a tool call's
// arguments. Not parallel: tracing is process-wide.
func TestChatSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tracing.Enable(tp)
	t.Cleanup(func() { tracing.Enable(nil); _ = tp.Shutdown(context.Background()) })

	const prompt, answer, args = "pRoMpT-canary", "aNsWeR-canary", `{"argv":["aRgV-canary"]}`
	f := llmtest.New(t, testKey, "small")
	f.Script(llmtest.Reply{Content: answer, ToolCalls: []llmtest.ToolCall{{ID: "c1", Name: "shell", Arguments: args}},
		Usage: llmtest.Usage{PromptTokens: 30, CompletionTokens: 7}})
	c, _ := newClient(t, f)
	if _, err := c.Chat(context.Background(), llm.Request{Model: "small", Messages: []llm.Message{{Role: llm.RoleUser, Content: prompt}}}); err != nil {
		t.Fatal(err)
	}
	var model []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == tracing.SpanModel {
			model = append(model, s)
		}
		if dump := fmt.Sprint(s.Name, s.Attributes, s.Events, s.Status, s.Links); strings.Contains(dump, "canary") {
			t.Errorf("span %s carries the prompt, answer or arguments: %s", s.Name, dump)
		}
	}
	if len(model) != 1 {
		t.Fatalf("%d %s spans, want 1", len(model), tracing.SpanModel)
	}
	want := map[string]string{string(tracing.AttrModel): "small", string(tracing.AttrInputTokens): "30", string(tracing.AttrOutputTokens): "7"}
	got := map[string]string{}
	for _, a := range model[0].Attributes {
		got[string(a.Key)] = a.Value.String()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (attributes %v)", k, got[k], v, got)
		}
	}
}
