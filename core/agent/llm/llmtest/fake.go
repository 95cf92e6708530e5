// Package llmtest is a local fake of an OpenAI-compatible endpoint for
// tests: GET /v1/models and POST /v1/chat/completions with tool calls, on an
// httptest.Server. Answers are scripted (or computed by a Responder), errors
// such as 429 and 500 can be injected, and every request is checked the
// way a strict server would check it — a malformed request fails the test
// and gets the 400 a real endpoint would send.
package llmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Reply is one scripted answer to a chat-completions request.
type Reply struct {
	// Status, when not 0 or 200, answers with that HTTP status and an
	// OpenAI-style error body carrying ErrorMessage.
	Status       int
	ErrorMessage string
	// RetryAfterMs sets the Retry-After-Ms header on an error answer.
	RetryAfterMs int
	// Raw, when set, is sent verbatim as a 200 body (for malformed answers).
	Raw string

	Content      string
	ToolCalls    []ToolCall
	FinishReason string // default "stop", or "tool_calls" when ToolCalls is set
	Usage        Usage  // default: 10 prompt, 5 completion tokens
}

// ToolCall is a scripted function call; ID defaults to call_<n>.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Usage is the reported token usage.
type Usage struct {
	PromptTokens, CompletionTokens int
}

// Responder computes a reply from the request when the script is empty.
type Responder func(req ChatRequest) Reply

// ChatRequest is a chat-completions request as the fake received it.
type ChatRequest struct {
	Model      string          `json:"model"`
	Messages   []Message       `json:"messages"`
	Tools      []Tool          `json:"tools,omitempty"`
	ToolChoice json.RawMessage `json:"tool_choice,omitempty"`
	// Authorization is the header as received.
	Authorization string `json:"-"`
	// Header holds every request header.
	Header http.Header `json:"-"`
	// Body is the request body as received, for checks that something
	// never reached the model in any form.
	Body string `json:"-"`
}

// Message is one message of a received request.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []wireToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Name       string          `json:"name,omitempty"`
}

// Text returns the message's content as text (string or text parts).
func (m Message) Text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(m.Content, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return ""
}

// Tool is one offered tool of a received request.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description,omitempty"`
		Parameters  map[string]any `json:"parameters,omitempty"`
		Strict      *bool          `json:"strict,omitempty"`
	} `json:"function"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Server is the fake endpoint. BaseURL() is what llm.base_url points at.
type Server struct {
	*httptest.Server
	t testing.TB
	// APIKey, when set, is required as "Authorization: Bearer <key>".
	APIKey string
	// ModelIDs are served by /v1/models and are the only models accepted.
	ModelIDs []string

	mu        sync.Mutex
	script    []Reply
	responder Responder
	requests  []ChatRequest
	calls     int
	hits      map[string]int
}

// New starts a fake serving models, requiring key (if not empty). It is
// closed when the test ends.
func New(t testing.TB, key string, models ...string) *Server {
	t.Helper()
	s := &Server{t: t, APIKey: key, ModelIDs: models, hits: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// BaseURL is the API root, http://127.0.0.1:port/v1.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Script queues replies, answered in order before the Responder is asked.
func (s *Server) Script(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, replies...)
}

// Respond sets the function that answers once the script is used up.
func (s *Server) Respond(r Responder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.responder = r
}

// Requests returns the well-formed chat requests received, in order.
func (s *Server) Requests() []ChatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ChatRequest(nil), s.requests...)
}

// Hits counts the HTTP requests to path ("/v1/chat/completions"), retries
// and refused ones included.
func (s *Server) Hits(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

// Pending reports how many scripted replies are still unused.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.hits[r.URL.Path]++
	s.mu.Unlock()
	if s.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.APIKey {
		writeError(w, http.StatusUnauthorized, "invalid_api_key", "Incorrect API key provided.", 0)
		return
	}
	switch {
	case r.URL.Path == "/v1/models" && r.Method == http.MethodGet:
		data := make([]map[string]any, 0, len(s.ModelIDs))
		for _, id := range s.ModelIDs {
			data = append(data, map[string]any{"id": id, "object": "model", "created": 0, "owned_by": "llmtest"})
		}
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	case r.URL.Path == "/v1/chat/completions" && r.Method == http.MethodPost:
		s.chat(w, r)
	default:
		s.t.Errorf("llmtest: unexpected request %s %s", r.Method, r.URL.Path)
		writeError(w, http.StatusNotFound, "not_found", "no such route "+r.Method+" "+r.URL.Path, 0)
	}
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	bad := func(format string, a ...any) {
		msg := fmt.Sprintf(format, a...)
		s.t.Errorf("llmtest: malformed chat request: %s", msg)
		writeError(w, http.StatusBadRequest, "invalid_request_error", msg, 0)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		bad("Content-Type %q, want application/json", ct)
		return
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, 4<<20)); err != nil {
		bad("body: %v", err)
		return
	}
	var req ChatRequest
	if err := json.Unmarshal(buf.Bytes(), &req); err != nil {
		bad("body is not JSON: %v", err)
		return
	}
	req.Authorization = r.Header.Get("Authorization")
	req.Header = r.Header.Clone()
	req.Body = buf.String()
	if err := s.check(req); err != nil {
		bad("%v", err)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	var rep Reply
	switch {
	case len(s.script) > 0:
		rep, s.script = s.script[0], s.script[1:]
	case s.responder != nil:
		resp := s.responder
		s.mu.Unlock()
		rep = resp(req)
		s.mu.Lock()
	default:
		s.mu.Unlock()
		s.t.Errorf("llmtest: chat request %d with nothing scripted (%s)", len(s.requests), describe(req))
		writeError(w, http.StatusInternalServerError, "server_error", "llmtest: nothing scripted", 0)
		return
	}
	s.calls++
	n := s.calls
	s.mu.Unlock()

	if rep.Status != 0 && rep.Status != http.StatusOK {
		msg := rep.ErrorMessage
		if msg == "" {
			msg = http.StatusText(rep.Status)
		}
		writeError(w, rep.Status, "injected", msg, rep.RetryAfterMs)
		return
	}
	if rep.Raw != "" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(rep.Raw))
		return
	}
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if rep.Content != "" || len(rep.ToolCalls) == 0 {
		msg["content"] = rep.Content
	}
	finish := rep.FinishReason
	if len(rep.ToolCalls) > 0 {
		calls := make([]map[string]any, 0, len(rep.ToolCalls))
		for i, tc := range rep.ToolCalls {
			id := tc.ID
			if id == "" {
				id = fmt.Sprintf("call_%d_%d", n, i)
			}
			calls = append(calls, map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}})
		}
		msg["tool_calls"] = calls
		if finish == "" {
			finish = "tool_calls"
		}
	}
	if finish == "" {
		finish = "stop"
	}
	u := rep.Usage
	if u == (Usage{}) {
		u = Usage{PromptTokens: 10, CompletionTokens: 5}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": 1700000000, "model": req.Model,
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
		"usage":   map[string]any{"prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens, "total_tokens": u.PromptTokens + u.CompletionTokens},
	})
}

var toolNameRe = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// check enforces what OpenAI's endpoint enforces about a request's shape.
func (s *Server) check(req ChatRequest) error {
	if req.Model == "" {
		return fmt.Errorf("model is required")
	}
	known := len(s.ModelIDs) == 0
	for _, m := range s.ModelIDs {
		known = known || m == req.Model
	}
	if !known {
		return fmt.Errorf("model %q does not exist", req.Model)
	}
	if len(req.Messages) == 0 {
		return fmt.Errorf("messages must not be empty")
	}
	tools := map[string]bool{}
	for i, t := range req.Tools {
		if t.Type != "function" {
			return fmt.Errorf("tools[%d].type %q, want function", i, t.Type)
		}
		if !toolNameRe.MatchString(t.Function.Name) {
			return fmt.Errorf("tools[%d].function.name %q is invalid", i, t.Function.Name)
		}
		if tools[t.Function.Name] {
			return fmt.Errorf("tools[%d]: duplicate function name %q", i, t.Function.Name)
		}
		tools[t.Function.Name] = true
		if p := t.Function.Parameters; p != nil && p["type"] != "object" {
			return fmt.Errorf("tools[%d].function.parameters must be a JSON Schema object", i)
		}
	}
	if len(req.ToolChoice) > 0 {
		var mode string
		if json.Unmarshal(req.ToolChoice, &mode) == nil {
			if mode != "auto" && mode != "none" && mode != "required" {
				return fmt.Errorf("tool_choice %q is invalid", mode)
			}
		} else {
			var named struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(req.ToolChoice, &named); err != nil || named.Type != "function" || !tools[named.Function.Name] {
				return fmt.Errorf("tool_choice %s names no offered tool", req.ToolChoice)
			}
		}
		if len(req.Tools) == 0 {
			return fmt.Errorf("tool_choice is only allowed when tools are specified")
		}
	}
	open := map[string]bool{} // tool call ids awaiting their tool message
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user":
			if len(m.ToolCalls) > 0 || m.ToolCallID != "" {
				return fmt.Errorf("messages[%d]: a %s message cannot carry tool calls", i, m.Role)
			}
			if len(open) > 0 {
				return fmt.Errorf("messages[%d]: tool calls %v were not answered by tool messages", i, keys(open))
			}
		case "assistant":
			if len(open) > 0 {
				return fmt.Errorf("messages[%d]: tool calls %v were not answered by tool messages", i, keys(open))
			}
			if len(m.ToolCalls) == 0 && len(m.Content) == 0 {
				return fmt.Errorf("messages[%d]: an assistant message needs content or tool_calls", i)
			}
			for j, tc := range m.ToolCalls {
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
					return fmt.Errorf("messages[%d].tool_calls[%d] needs id, type function and a name", i, j)
				}
				if !json.Valid([]byte(tc.Function.Arguments)) {
					return fmt.Errorf("messages[%d].tool_calls[%d].function.arguments is not JSON", i, j)
				}
				open[tc.ID] = true
			}
		case "tool":
			if !open[m.ToolCallID] {
				return fmt.Errorf("messages[%d]: tool message answers %q, which no preceding assistant message called", i, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
		default:
			return fmt.Errorf("messages[%d].role %q is invalid", i, m.Role)
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("tool calls %v were not answered by tool messages", keys(open))
	}
	return nil
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string, retryAfterMs int) {
	if retryAfterMs > 0 {
		w.Header().Set("Retry-After-Ms", strconv.Itoa(retryAfterMs))
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": code, "param": nil, "code": code}})
}

// describe names an unscripted request by the start of its system prompt
// and its last message, so a test that failed on one says which call of
// the gateway's made it.
func describe(req ChatRequest) string {
	clip := func(s string) string {
		if r := []rune(s); len(r) > 120 {
			return string(r[:120]) + "…"
		}
		return s
	}
	var sys, last string
	for _, m := range req.Messages {
		if m.Role == "system" && sys == "" {
			sys = clip(m.Text())
		}
	}
	if n := len(req.Messages); n > 0 {
		m := req.Messages[n-1]
		last = m.Role + ": " + clip(m.Text())
		if len(m.ToolCalls) > 0 {
			last += fmt.Sprintf(" (%d tool calls)", len(m.ToolCalls))
		}
	}
	return fmt.Sprintf("%d messages; system %q; last %q", len(req.Messages), sys, last)
}
