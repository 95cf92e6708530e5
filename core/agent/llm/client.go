package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/silas-gateway/silas/core/agent/llm/wire"
	"github.com/silas-gateway/silas/core/tracing"
)

// Models names the model of each role. One model may serve all three.
type Models struct {
	// Proxy answers simple messages and routes tasks (cheap, fast).
	Proxy string
	// Planner writes plans (the strongest reasoning).
	Planner string
	// Executor proposes tool calls step by step (tool-capable, cost-optimised).
	Executor string
}

// Config configures a Client. cmd/silas maps the llm.* configuration keys
// onto it; internal/config validates them and documents the defaults.
type Config struct {
	// BaseURL is the endpoint's OpenAI-compatible API root, e.g.
	// https://api.openai.com/v1 or http://127.0.0.1:11434/v1.
	BaseURL string
	// APIKey is sent as a bearer token. It is never logged and never put
	// into an error; empty sends no Authorization header (local servers).
	APIKey string
	Models Models
	// Timeout bounds one HTTP attempt (0: 60s). The caller's context bounds
	// the whole call, retries included.
	Timeout time.Duration
	// MaxRetries is how often a connection error, 408, 409, 429 or 5xx is
	// retried, with exponential backoff that honours Retry-After. An
	// attempt that runs out of Timeout is not retried.
	MaxRetries int
	// MaxRetryDelay caps one backoff wait (0: 8s). A server asking to wait
	// longer than this ends the retries with its error.
	MaxRetryDelay time.Duration
	// HTTPClient is injected by tests; nil uses an http.Client whose
	// transport keeps connections to the endpoint open (keepAliveTransport).
	HTTPClient *http.Client
	// Logger gets one debug line per call (model, time, tokens); nil
	// discards.
	Logger *slog.Logger
}

// Role is who wrote a message.
type Role string

// The four roles of a chat-completions conversation.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one message of a conversation sent to the model.
type Message struct {
	Role    Role
	Content string
	// ToolCalls are the calls an assistant message made (RoleAssistant).
	ToolCalls []ToolCall
	// ToolCallID answers that call (RoleTool).
	ToolCallID string
}

// ToolCall is one function call the model asked for. Arguments is the raw
// JSON text the model wrote: untrusted, decoded strictly by DecodeArgs.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Tool is a function the model may call; Parameters is its JSON Schema.
type Tool struct {
	Name        string
	Description string
	Parameters  map[string]any
	// wire is the JSON encoding of the definition, made once by
	// offeredTools (which never hands out a tool to change); nil: Chat
	// encodes the tool on each call.
	wire []byte
}

// Request is one chat-completions call.
type Request struct {
	Model    string
	Messages []Message
	Tools    []Tool
	// ToolChoice is "" or "auto" (the model decides), "none", "required",
	// or the name of one tool the model must call.
	ToolChoice string
}

// Usage is what the endpoint reported the call cost in tokens.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	TotalTokens      int64
	// Calls is how many model calls this usage sums (0 counts as one): a
	// call that needed its repair round-trip is two calls for a budget.
	Calls int64
}

// ModelCalls is the number of model calls u covers (at least one).
func (u Usage) ModelCalls() int64 { return max(u.Calls, 1) }

// Response is the model's answer: text, tool calls, or both.
type Response struct {
	Model        string
	Content      string
	Refusal      string
	ToolCalls    []ToolCall
	FinishReason string
	Usage        Usage
}

// APIError is an error answer from the endpoint (after retries). Message is
// the server's own text, shortened, with the API key cut out in case a
// server echoes it.
type APIError struct {
	Op      string
	Status  int
	Code    string
	Type    string
	Message string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("llm: %s: the endpoint answered %d %s", e.Op, e.Status, http.StatusText(e.Status))
	if e.Message != "" {
		s += ": " + e.Message
	}
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden:
		s += " (check llm.api_key)"
	case http.StatusNotFound:
		s += " (check llm.base_url and the model names in llm.models)"
	}
	return s
}

// Client talks to one OpenAI-compatible endpoint: POST /chat/completions
// and GET /models, nothing else (send.go says why there is no SDK).
type Client struct {
	cfg    Config
	http   *http.Client
	chat   endpoint
	models endpoint
	log    *slog.Logger
}

// New returns a client for cfg. It makes no request.
//
// Only Silas's configuration is used: nothing is read from the
// environment (an SDK would read OPENAI_API_KEY, OPENAI_ORG_ID,
// OPENAI_CUSTOM_HEADERS… and send them to whatever server llm.base_url
// names).
func New(cfg Config) (*Client, error) {
	u, err := checkBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	base, err := url.Parse(u)
	if err != nil {
		return nil, fmt.Errorf("llm: base URL %q: %w", cfg.BaseURL, err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.MaxRetryDelay <= 0 {
		cfg.MaxRetryDelay = 8 * time.Second
	}
	if cfg.MaxRetries < 0 {
		cfg.MaxRetries = 0
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: keepAliveTransport()}
	}
	// A copy, so the caller's client is not changed; its transport (and
	// so its kept-alive connections) is shared.
	own := *hc
	next := own.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	own.Transport = originTransport{origin: base, next: next}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := baseHeader()
	h.Set("X-Stainless-Timeout", strconv.Itoa(int(cfg.Timeout.Seconds())))
	if cfg.APIKey != "" {
		h.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	post := h.Clone()
	post.Set("Content-Type", "application/json")
	c := &Client{cfg: cfg, http: &own, log: log}
	if c.chat, err = newEndpoint(base, "chat/completions", post); err != nil {
		return nil, err
	}
	if c.models, err = newEndpoint(base, "models", h); err != nil {
		return nil, err
	}
	return c, nil
}

// Models returns the configured role models.
func (c *Client) Models() Models { return c.cfg.Models }

// checkBaseURL accepts an http(s) URL without credentials, query or
// fragment and returns it with a trailing slash (paths are joined to it).
func checkBaseURL(s string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("llm: base URL %q must be an http:// or https:// URL such as https://api.openai.com/v1", s)
	}
	if u.User != nil {
		// Credentials in the URL would end up in logs and error messages.
		return "", errors.New("llm: the base URL must not contain credentials: put the key in llm.api_key")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("llm: base URL %q must not have a query or fragment", s)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u.String(), nil
}

// ListModels returns the ids of the models the endpoint serves
// (GET /models).
func (c *Client) ListModels(ctx context.Context) ([]string, error) {
	body, err := c.do(ctx, c.models, nil)
	if err != nil {
		return nil, c.wrap(ctx, "list models", err)
	}
	ids, err := wire.DecodeModels(body)
	if err != nil {
		return nil, c.wrap(ctx, "list models", err)
	}
	return ids, nil
}

// Chat makes one chat-completions call (POST /chat/completions), retried on
// 429 and 5xx as configured, and returns the first choice.
func (c *Client) Chat(ctx context.Context, req Request) (Response, error) {
	body, err := encodeRequest(req)
	if err != nil {
		return Response{}, err
	}
	ctx, span := tracing.Start(ctx, tracing.SpanModel)
	defer span.End()
	start := time.Now()
	raw, err := c.do(ctx, c.chat, body)
	var res wire.Chat
	if err == nil {
		res, err = wire.DecodeChat(raw)
	}
	took := time.Since(start)
	if span.IsRecording() {
		// The model's name and what the call cost; never the prompt or
		// the answer.
		span.SetAttributes(tracing.AttrModel.String(req.Model))
		if err == nil {
			span.SetAttributes(tracing.AttrInputTokens.Int64(res.Usage.PromptTokens), tracing.AttrOutputTokens.Int64(res.Usage.CompletionTokens))
		} else {
			span.SetStatus(codes.Error, "model call failed")
		}
	}
	if err != nil {
		err = c.wrap(ctx, "chat completions", err)
		c.log.Warn("model call failed", slog.String("model", req.Model), slog.Duration("took", took), slog.String("err", err.Error()))
		return Response{}, err
	}
	if res.Choices == 0 {
		return Response{}, fmt.Errorf("llm: chat completions: the answer from %s has no choices", req.Model)
	}
	out := Response{
		Model:        res.Model,
		Content:      res.Content,
		Refusal:      res.Refusal,
		FinishReason: res.FinishReason,
		Usage:        Usage{PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens, TotalTokens: res.Usage.TotalTokens},
	}
	for _, tc := range res.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			return Response{}, fmt.Errorf("llm: chat completions: %s called a %q tool; only function tools are offered", req.Model, tc.Type)
		}
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
	}
	c.log.Debug("model call", slog.String("model", req.Model), slog.Duration("took", took),
		slog.Int64("prompt_tokens", out.Usage.PromptTokens), slog.Int64("completion_tokens", out.Usage.CompletionTokens),
		slog.Int("tool_calls", len(out.ToolCalls)), slog.String("finish_reason", out.FinishReason))
	return out, nil
}

// wrap turns an error of the call into a clear one that never carries
// the key.
func (c *Client) wrap(ctx context.Context, op string, err error) error {
	var f *apiFailure
	if errors.As(err, &f) {
		msg, code, typ := wire.ErrorText(f.body)
		return &APIError{Op: op, Status: f.status, Code: c.scrub(code), Type: c.scrub(typ), Message: c.scrub(shorten(msg, 300))}
	}
	msg := err.Error()
	switch {
	case ctx.Err() != nil:
		msg = "gave up: " + ctx.Err().Error()
	case errors.Is(err, context.DeadlineExceeded):
		// Connection errors and retryable statuses are retried, never an
		// attempt that ran out of time (do returns at once): one request
		// was made, whatever llm.max_retries says.
		msg = fmt.Sprintf("no answer within %s (llm.timeout)", c.cfg.Timeout)
	}
	return &scrubbed{msg: fmt.Sprintf("llm: %s: %s", op, c.scrub(msg)), err: err}
}

// scrub removes the API key from text that came from outside.
func (c *Client) scrub(s string) string {
	if len(c.cfg.APIKey) >= 4 {
		s = strings.ReplaceAll(s, c.cfg.APIKey, "[api key]")
	}
	return s
}

// scrubbed is an error whose text was cleaned but whose cause still
// unwraps (errors.Is(err, context.Canceled) keeps working).
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// shorten cuts s to n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// maxIdlePerHost is how many idle connections to the model endpoint are
// kept for reuse. http.DefaultTransport keeps 2: with more answers in
// flight than that (one per conversation being answered) every extra
// request opened a new TCP (and TLS) connection and closed it afterwards,
// which cost the gateway more CPU than the answer itself with a fast model
// (BENCHMARKS.md "Issue 26 — turns").
const maxIdlePerHost = 64

// writeBuffer is the size of each connection's write buffer. A request
// (headers and body) that fits is sent in one write to the socket: with
// the default 4 kB, a chat-completions request — the prompt, the tool
// definitions and the history, 4–10 kB — took two or three, and each
// write to a local endpoint cost the gateway a system call and the
// kernel's delivery (BENCHMARKS.md "Issue 26 — LLM path"). It is
// allocated per open connection: a few in practice, maxIdlePerHost at
// most.
const writeBuffer = 32 << 10

// keepAliveTransport is http.DefaultTransport's configuration (proxy from
// the environment, timeouts, HTTP/2) with maxIdlePerHost idle connections
// and a write buffer that holds a whole request.
func keepAliveTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.WriteBufferSize = writeBuffer
	t.MaxIdleConnsPerHost = maxIdlePerHost
	if t.MaxIdleConns < maxIdlePerHost {
		t.MaxIdleConns = maxIdlePerHost
	}
	return t
}
