package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
	"github.com/silas-gateway/silas/internal/config"
)

func llmTestConfig(t *testing.T, base string) *config.Config {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "llm.key")
	if err := os.WriteFile(keyFile, []byte("sk-doctor-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load("", []string{"SILAS_AGENT_KIND=llm", "SILAS_LLM_BASE_URL=" + base, "SILAS_LLM_API_KEY=file:" + keyFile,
		"SILAS_LLM_MODELS_PROXY=small", "SILAS_LLM_MAX_RETRY_DELAY=10ms"})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// silas doctor checks the endpoint, the models and tool calling, reading
// the key from its file and never printing it.
func TestDoctorLLM(t *testing.T) {
	f := llmtest.New(t, "sk-doctor-key", "small")
	f.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "ping", Arguments: `{"word":"pong"}`}}})
	var out bytes.Buffer
	if n := doctorLLM(context.Background(), llmTestConfig(t, f.BaseURL()), &out, 5*time.Second); n != 0 {
		t.Fatalf("%d problems:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "✓ endpoint") || !strings.Contains(out.String(), "✓ tools small") || strings.Contains(out.String(), "sk-doctor-key") {
		t.Fatalf("doctor output:\n%s", out.String())
	}

	bad := llmtest.New(t, "sk-other", "small")
	out.Reset()
	if n := doctorLLM(context.Background(), llmTestConfig(t, bad.BaseURL()), &out, 5*time.Second); n != 1 || !strings.Contains(out.String(), "check llm.api_key") {
		t.Fatalf("wrong key: %d problems:\n%s", n, out.String())
	}

	out.Reset()
	cfg := config.Default()
	if n := doctorLLM(context.Background(), cfg, &out, time.Second); n != 0 || !strings.Contains(out.String(), "skipped") {
		t.Fatalf("command agent: %d\n%s", n, out.String())
	}
}

// agent.kind picks the agent serve wires into the engine.
func TestNewAgent(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	a, err := newAgent(config.Default(), log)
	if _, ok := a.(agent.Command); err != nil || !ok {
		t.Fatalf("default agent = %T, %v", a, err)
	}
	f := llmtest.New(t, "sk-doctor-key", "small")
	f.Script(llmtest.Reply{Content: "hello from the model"})
	a, err = newAgent(llmTestConfig(t, f.BaseURL()), log)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.(*llm.Agent); !ok {
		t.Fatalf("llm agent = %T", a)
	}
	p, err := a.Respond(context.Background(), core.AgentInput{Text: "hi", Trust: core.TrustOwner})
	if err != nil || p.Reply != "hello from the model" {
		t.Fatalf("Respond = %+v, %v", p, err)
	}
	if r := f.Requests()[0]; r.Model != "small" || r.Authorization != "Bearer sk-doctor-key" {
		t.Fatalf("request model %q auth ok %v", r.Model, r.Authorization == "Bearer sk-doctor-key")
	}
	cfg := llmTestConfig(t, f.BaseURL())
	cfg.LLM.APIKey = "file:/nonexistent/key"
	if _, err := newAgent(cfg, log); err == nil || !strings.Contains(err.Error(), "llm.api_key: cannot read") {
		t.Fatalf("missing key file: %v", err)
	}
}
