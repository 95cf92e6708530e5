package llm_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
)

const testKey = "sk-test-0123456789abcdef"

func newClient(t *testing.T, f *llmtest.Server, mut ...func(*llm.Config)) (*llm.Client, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	cfg := llm.Config{
		BaseURL: f.BaseURL(), APIKey: testKey,
		Models:     llm.Models{Proxy: "small", Planner: "big", Executor: "small"},
		Timeout:    5 * time.Second,
		MaxRetries: 2, MaxRetryDelay: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, m := range mut {
		m(&cfg)
	}
	c, err := llm.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, &logs
}

func TestChatWithToolCalls(t *testing.T) {
	t.Parallel()
	f := llmtest.New(t, testKey, "small", "big")
	f.Script(llmtest.Reply{ToolCalls: []llmtest.ToolCall{{ID: "call_a", Name: "shell", Arguments: `{"argv":["df","-h"]}`}}, Usage: llmtest.Usage{PromptTokens: 30, CompletionTokens: 7}})
	c, logs := newClient(t, f)
	res, err := c.Chat(context.Background(), llm.Request{
		Model: "small",
		Messages: []llm.Message{
			{Role: llm.RoleSystem, Content: "sys"},
			{Role: llm.RoleUser, Content: "how much disk is free?"},
			{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_0", Name: "shell", Arguments: `{"argv":["uptime"]}`}}},
			{Role: llm.RoleTool, ToolCallID: "call_0", Content: "up 3 days"},
		},
		Tools:      []llm.Tool{{Name: "shell", Description: "run", Parameters: map[string]any{"type": "object", "properties": map[string]any{}}}},
		ToolChoice: "auto",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.ToolCalls) != 1 || res.ToolCalls[0] != (llm.ToolCall{ID: "call_a", Name: "shell", Arguments: `{"argv":["df","-h"]}`}) {
		t.Fatalf("tool calls = %+v", res.ToolCalls)
	}
	if res.FinishReason != "tool_calls" || res.Usage.TotalTokens != 37 || res.Usage.PromptTokens != 30 {
		t.Fatalf("response = %+v", res)
	}
	reqs := f.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Model != "small" || len(r.Messages) != 4 || r.Messages[3].ToolCallID != "call_0" || r.Messages[3].Text() != "up 3 days" ||
		len(r.Tools) != 1 || r.Tools[0].Function.Name != "shell" || string(r.ToolChoice) != `"auto"` {
		t.Fatalf("request = %+v", r)
	}
	if strings.Contains(logs.String(), testKey) {
		t.Fatalf("the API key was logged: %s", logs)
	}
}

// The SDK would read OPENAI_* variables and send them to any server; the
// client must use only its configuration.
func TestEnvironmentIsIgnored(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-leak")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Leak: yes")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	f := llmtest.New(t, testKey, "small")
	f.Script(llmtest.Reply{Content: "hi"})
	c, _ := newClient(t, f)
	if _, err := c.Chat(context.Background(), llm.Request{Model: "small", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	h := f.Requests()[0].Header
	if h.Get("OpenAI-Organization") != "" || h.Get("X-Leak") != "" || h.Get("Authorization") != "Bearer "+testKey {
		t.Fatalf("headers = %v", h)
	}
}

func TestNoKeySendsNoAuthorization(t *testing.T) {
	t.Parallel()
	f := llmtest.New(t, "", "llama")
	f.Script(llmtest.Reply{Content: "hi"})
	c, _ := newClient(t, f, func(c *llm.Config) { c.APIKey = "" })
	if _, err := c.Chat(context.Background(), llm.Request{Model: "llama", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	if a := f.Requests()[0].Authorization; a != "" {
		t.Fatalf("Authorization = %q", a)
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	user := []llm.Message{{Role: llm.RoleUser, Content: "hi"}}
	tests := []struct {
		name      string
		script    []llmtest.Reply
		retries   int
		wantHits  int
		wantErr   string
		wantReply string
	}{
		{"429 then ok", []llmtest.Reply{{Status: 429, RetryAfterMs: 1}, {Status: 429}, {Content: "ok"}}, 2, 3, "", "ok"},
		{"500 then ok", []llmtest.Reply{{Status: 500}, {Content: "ok"}}, 2, 2, "", "ok"},
		{"503 exhausts retries", []llmtest.Reply{{Status: 503}, {Status: 503}, {Status: 503}}, 2, 3, "answered 503 Service Unavailable", ""},
		{"no retries configured", []llmtest.Reply{{Status: 500, ErrorMessage: "boom"}}, 0, 1, "answered 500 Internal Server Error: boom", ""},
		{"400 is not retried", []llmtest.Reply{{Status: 400, ErrorMessage: "bad tool schema"}}, 2, 1, "answered 400 Bad Request: bad tool schema", ""},
		{"404 hints at the config", []llmtest.Reply{{Status: 404, ErrorMessage: "model not found"}}, 2, 1, "check llm.base_url and the model names", ""},
		{"429 asking to wait too long gives up", []llmtest.Reply{{Status: 429, RetryAfterMs: 60000}}, 2, 1, "answered 429", ""},
		{"no choices", []llmtest.Reply{{Raw: `{"id":"x","object":"chat.completion","model":"small","choices":[]}`}}, 2, 1, "has no choices", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := llmtest.New(t, testKey, "small")
			f.Script(tt.script...)
			c, _ := newClient(t, f, func(c *llm.Config) { c.MaxRetries = tt.retries })
			res, err := c.Chat(context.Background(), llm.Request{Model: "small", Messages: user})
			if hits := f.Hits("/v1/chat/completions"); hits != tt.wantHits {
				t.Errorf("hits = %d, want %d", hits, tt.wantHits)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || res.Content != tt.wantReply {
				t.Fatalf("Chat = %+v, %v", res, err)
			}
		})
	}
}

func TestWrongKeyNamesTheSetting(t *testing.T) {
	t.Parallel()
	f := llmtest.New(t, "sk-right-key", "small")
	c, logs := newClient(t, f)
	_, err := c.Chat(context.Background(), llm.Request{Model: "small", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
	var ae *llm.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || !strings.Contains(err.Error(), "check llm.api_key") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), testKey) || strings.Contains(logs.String(), testKey) {
		t.Fatal("the key leaked into the error or the log")
	}
}

// A server that echoes the key in its error text does not get it into our
// error or our log.
func TestKeyEchoedByServerIsScrubbed(t *testing.T) {
	t.Parallel()
	f := llmtest.New(t, testKey, "small")
	f.Script(llmtest.Reply{Status: 400, ErrorMessage: "key " + testKey + " has no access to this model"})
	c, logs := newClient(t, f)
	_, err := c.Chat(context.Background(), llm.Request{Model: "small", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
	if err == nil || strings.Contains(err.Error(), testKey) || !strings.Contains(err.Error(), "[api key]") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(logs.String(), testKey) {
		t.Fatalf("log: %s", logs)
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	defer close(block)
	srv := llmtest.New(t, "", "small")
	var requests atomic.Int32
	// A server that never answers: swap the handler for a stalling one.
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		select {
		case <-block:
		case <-r.Context().Done():
		}
	})
	// Long enough for the request to reach the server on a loaded machine
	// (the count below must see it), short enough for a unit test.
	c, _ := newClient(t, srv, func(c *llm.Config) { c.APIKey = ""; c.Timeout = 2 * time.Second; c.MaxRetries = 1 })
	_, err := c.Chat(context.Background(), llm.Request{Model: "small", Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "llm.timeout") {
		t.Fatalf("err = %v", err)
	}
	// The error says what happened: one request, no retry (a timed-out
	// attempt is not retried), so no "after 1 retries".
	if n := requests.Load(); n != 1 || strings.Contains(err.Error(), "retr") {
		t.Fatalf("%d requests, err = %v", n, err)
	}
}

func TestListModels(t *testing.T) {
	t.Parallel()
	f := llmtest.New(t, testKey, "small", "big")
	c, _ := newClient(t, f)
	ids, err := c.ListModels(context.Background())
	if err != nil || strings.Join(ids, ",") != "small,big" {
		t.Fatalf("ListModels = %v, %v", ids, err)
	}
}

func TestNewRefusesBadBaseURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, url, want string }{
		{"empty", "", "must be an http"},
		{"scheme", "ftp://x/v1", "must be an http"},
		{"credentials", "https://user:pw@x/v1", "must not contain credentials"},
		{"query", "https://x/v1?k=1", "query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := llm.New(llm.Config{BaseURL: tt.url})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New(%q) = %v, want %q", tt.url, err, tt.want)
			}
			if strings.Contains(tt.url, "pw") && strings.Contains(err.Error(), "pw") {
				t.Fatalf("error repeats the password: %v", err)
			}
		})
	}
}
