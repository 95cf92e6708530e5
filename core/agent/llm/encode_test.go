package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
)

// refBody is the body openai-go v3.96.0 (the SDK the client used
// before) wrote for req, written by encoding/json from structs whose
// members are in the SDK's order: the reference encodeRequest is held to
// for any request. TestEncodeRequestMatchesSDK holds refBody to bodies the
// SDK itself wrote (testdata/sdk_bodies.json).
func refBody(req Request) ([]byte, error) {
	type refFunction struct {
		Arguments string `json:"arguments"`
		Name      string `json:"name"`
	}
	type refCall struct {
		ID       string      `json:"id"`
		Function refFunction `json:"function"`
		Type     string      `json:"type"`
	}
	type refMessage struct {
		Content    *string   `json:"content,omitempty"`
		ToolCalls  []refCall `json:"tool_calls,omitempty"`
		ToolCallID string    `json:"tool_call_id,omitempty"`
		Role       Role      `json:"role"`
	}
	type refToolFunction struct {
		Name        string         `json:"name"`
		Description string         `json:"description,omitempty"`
		Parameters  map[string]any `json:"parameters,omitzero"`
	}
	type refTool struct {
		Function refToolFunction `json:"function"`
		Type     string          `json:"type"`
	}
	type refRequest struct {
		Messages   []refMessage `json:"messages"`
		Model      string       `json:"model"`
		ToolChoice any          `json:"tool_choice,omitempty"`
		Tools      []refTool    `json:"tools,omitempty"`
	}
	if strings.TrimSpace(req.Model) == "" {
		return nil, errors.New("llm: chat completions: no model named")
	}
	if len(req.Messages) == 0 {
		return nil, errors.New("llm: chat completions: no messages")
	}
	r := refRequest{Model: req.Model}
	for i, m := range req.Messages {
		rm := refMessage{Role: m.Role}
		switch m.Role {
		case RoleSystem, RoleUser:
			rm.Content = &m.Content
		case RoleTool:
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("llm: chat completions: message %d is a tool result without a tool call id", i)
			}
			rm.Content, rm.ToolCallID = &m.Content, m.ToolCallID
		case RoleAssistant:
			if m.Content != "" {
				rm.Content = &m.Content
			}
			for _, tc := range m.ToolCalls {
				rm.ToolCalls = append(rm.ToolCalls, refCall{ID: tc.ID, Function: refFunction{Arguments: tc.Arguments, Name: tc.Name}, Type: "function"})
			}
		default:
			return nil, fmt.Errorf("llm: chat completions: message %d has unknown role %q", i, m.Role)
		}
		r.Messages = append(r.Messages, rm)
	}
	for _, t := range req.Tools {
		r.Tools = append(r.Tools, refTool{Function: refToolFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}, Type: "function"})
	}
	switch req.ToolChoice {
	case "":
	case "auto", "none", "required":
		r.ToolChoice = req.ToolChoice
	default:
		r.ToolChoice = map[string]any{"function": map[string]string{"name": req.ToolChoice}, "type": "function"}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// encodeCases are requests of every shape Chat sends: each role, empty
// texts, tool calls with and without text, every tool choice, the tool
// sets the roles offer (MCP tools and http_get included) and text that
// needs escaping.
func encodeCases() []Request {
	tricky := "quotes \" backslash \\ <html> & 'apos' \u2028 \u2029 é 日本 😀 \x00 \x01 \x08 \x0c \x1f \x7f \n\r\t bad utf8 \xff\xfe \xe2\x82 end"
	mcp := []MCPTool{{Server: "files", Name: "search", Description: "Search <files> & folders\nquickly", InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)},
		{Server: "web", Name: "fetch", Description: "", InputSchema: json.RawMessage(`not json`)}}
	calls := []ToolCall{{ID: "call_1", Name: "shell", Arguments: `{"argv":["echo","<hi>"],"intent":"Say \"hi\""}`}, {ID: "call_2", Name: "read_file", Arguments: "{}"}}
	return []Request{
		{Model: "m", Messages: []Message{{Role: RoleUser, Content: "hi"}}},
		{Model: "gpt-4o-mini", Messages: []Message{{Role: RoleSystem, Content: ProxyPrompt}, {Role: RoleUser, Content: tricky}}, Tools: offeredTools(ToolOptions{Planner: true}), ToolChoice: "auto"},
		{Model: "m", Messages: []Message{{Role: RoleSystem, Content: ExecutorPrompt}, {Role: RoleUser, Content: "step"},
			{Role: RoleAssistant, ToolCalls: calls}, {Role: RoleTool, ToolCallID: "call_1", Content: tricky}, {Role: RoleTool, ToolCallID: "call_2", Content: ""},
			{Role: RoleAssistant, Content: "text and a call", ToolCalls: calls[:1]}, {Role: RoleTool, ToolCallID: "call_1", Content: "ok"},
			{Role: RoleAssistant, Content: tricky}, {Role: RoleUser, Content: ""}, {Role: RoleSystem, Content: ""}},
			Tools: offeredTools(ToolOptions{Task: true, HTTPAllowDomains: []string{"example.com", "docs.<x>.org"}, MCP: mcp}), ToolChoice: "required"},
		{Model: "m", Messages: []Message{{Role: RoleUser, Content: "x"}}, Tools: Tools(ToolOptions{}), ToolChoice: "none"},
		{Model: "m\"<odd>", Messages: []Message{{Role: RoleUser, Content: "x"}}, Tools: []Tool{{Name: "only"},
			{Name: "t", Description: tricky, Parameters: map[string]any{"type": "object", "b": 1.5, "a": []string{"<", "&"}, "n": nil, "z": true}}}, ToolChoice: "only"},
		{Model: "m", Messages: []Message{{Role: RoleUser, Content: "x"}}, Tools: []Tool{}},
	}
}

// oddCases are requests a strict endpoint refuses, which are encoded as
// the SDK encoded them all the same.
func oddCases() []Request {
	return []Request{
		{Model: "m", Messages: []Message{{Role: RoleUser, Content: "x"}}, ToolChoice: "auto"},
		{Model: "m", Messages: []Message{{Role: RoleUser, Content: "x"}}, Tools: []Tool{{Name: "empty", Parameters: map[string]any{}}}},
		{Model: "m", Messages: []Message{{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "", Name: "", Arguments: "not json"}}}}},
		{Model: "m", Messages: []Message{{Role: RoleUser, Content: "x"}, {Role: RoleAssistant}}},
	}
}

// fixedCases are requests of every shape whose bodies openai-go v3.96.0
// wrote into testdata/sdk_bodies.json (fixed texts and tools, unlike
// encodeCases, whose prompts and tool set change with the code).
func fixedCases() []Request {
	tricky := "quotes \" backslash \\ <html> & 'apos' \u2028 \u2029 é 日本 😀 \x00 \x01 \x08 \x0c \x1f \x7f \n\r\t bad utf8 \xff\xfe \xe2\x82 end"
	calls := []ToolCall{{ID: "call_1", Name: "shell", Arguments: `{"argv":["echo","<hi>"],"intent":"Say \"hi\""}`}, {ID: "call_2", Name: "read_file", Arguments: "{}"}}
	schema := map[string]any{"type": "object", "required": []any{"argv", "intent"}, "additionalProperties": false,
		"properties": map[string]any{"argv": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 1.0, "maxItems": 64},
			"intent": map[string]any{"type": "string", "description": "Why, in <one> line & \u2028 no more", "pattern": "^[^\\n]+$"}}}
	tools := []Tool{{Name: "shell", Description: "Run a command <argv> & report.\nQuoted \"x\"", Parameters: schema},
		{Name: "only"}, {Name: "empty", Parameters: map[string]any{}},
		{Name: "t", Description: tricky, Parameters: map[string]any{"type": "object", "b": 1.5, "a": []string{"<", "&"}, "n": nil, "z": true, "big": 1e21, "small": 1e-7, "neg": 0.0}}}
	return append([]Request{
		{Model: "gpt-4o-mini", Messages: []Message{{Role: RoleSystem, Content: "You are <the proxy>.\n"}, {Role: RoleUser, Content: tricky}}, Tools: tools[:1], ToolChoice: "auto"},
		{Model: "m", Messages: []Message{{Role: RoleSystem, Content: "exec"}, {Role: RoleUser, Content: "step"},
			{Role: RoleAssistant, ToolCalls: calls}, {Role: RoleTool, ToolCallID: "call_1", Content: tricky}, {Role: RoleTool, ToolCallID: "call_2", Content: ""},
			{Role: RoleAssistant, Content: "text and a call", ToolCalls: calls[:1]}, {Role: RoleTool, ToolCallID: "call_1", Content: "ok"},
			{Role: RoleAssistant, Content: tricky}, {Role: RoleUser, Content: ""}, {Role: RoleSystem, Content: ""}},
			Tools: tools, ToolChoice: "required"},
		{Model: "m\"<odd>", Messages: []Message{{Role: RoleUser, Content: "x"}}, Tools: tools[1:], ToolChoice: "only"},
		{Model: "m", Messages: []Message{{Role: RoleUser, Content: "x"}}, Tools: tools, ToolChoice: "none"},
	}, oddCases()...)
}

// The body Chat writes is, byte for byte, the one the SDK wrote from the
// same request (its own bodies for fixedCases, refBody for every shape of
// request with today's prompts and tools); and a bad request fails with
// the same error.
func TestEncodeRequestMatchesSDK(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/sdk_bodies.json")
	if err != nil {
		t.Fatal(err)
	}
	var sdk []string
	if err := json.Unmarshal(raw, &sdk); err != nil {
		t.Fatal(err)
	}
	fixed := fixedCases()
	if len(sdk) != len(fixed) {
		t.Fatalf("%d recorded bodies for %d fixed cases", len(sdk), len(fixed))
	}
	for i, req := range fixed {
		for name, enc := range map[string]func(Request) ([]byte, error){"encodeRequest": encodeRequest, "refBody": refBody} {
			got, err := enc(req)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != sdk[i] {
				t.Errorf("fixed case %d: %s differs from the SDK's body:\n got %s\nwant %s", i, name, got, sdk[i])
			}
		}
	}
	for i, req := range encodeCases() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			want, err := refBody(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := encodeRequest(req)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("body differs from the SDK's:\n got %s\nwant %s", got, want)
			}
		})
	}
	bad := []struct {
		req  Request
		want string
	}{
		{Request{Model: " ", Messages: []Message{{Role: RoleUser, Content: "x"}}}, "llm: chat completions: no model named"},
		{Request{Model: "m"}, "llm: chat completions: no messages"},
		{Request{Model: "m", Messages: []Message{{Role: RoleUser, Content: "x"}, {Role: RoleTool, Content: "no id"}}}, "llm: chat completions: message 1 is a tool result without a tool call id"},
		{Request{Model: "m", Messages: []Message{{Role: "developer", Content: "x"}}}, `llm: chat completions: message 0 has unknown role "developer"`},
	}
	for i, tt := range bad {
		_, rerr := refBody(tt.req)
		_, gerr := encodeRequest(tt.req)
		if rerr == nil || gerr == nil || gerr.Error() != tt.want || rerr.Error() != tt.want {
			t.Errorf("bad request %d: error %v (reference %v), want %s", i, gerr, rerr, tt.want)
		}
	}
}

// Through the client and the fake endpoint: what the endpoint receives is
// the SDK's body, and the answer is decoded as before.
func TestChatSendsTheSDKsBody(t *testing.T) {
	t.Parallel()
	fake := llmtest.New(t, "sk-test-key-1234", "m", "gpt-4o-mini", "m\"<odd>")
	c, err := New(Config{BaseURL: fake.BaseURL(), APIKey: "sk-test-key-1234", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cases := encodeCases()
	for _, req := range cases {
		fake.Script(llmtest.Reply{Content: "ok", Usage: llmtest.Usage{PromptTokens: 3, CompletionTokens: 1}})
		res, err := c.Chat(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Content != "ok" || res.Usage.TotalTokens != 4 {
			t.Fatalf("answer decoded as %+v", res)
		}
	}
	reqs := fake.Requests()
	got := map[string]bool{}
	for _, r := range reqs {
		got[r.Body] = true
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
	}
	for i, req := range cases {
		want, _ := refBody(req)
		if !got[string(want)] {
			t.Errorf("case %d: the endpoint never received the SDK's body %s", i, want)
		}
	}
}

// Any text is escaped as the SDK escaped it: as encoding/json's Encoder
// with HTML escaping off (the SDK's encoder is a copy of it; the seeds run
// as a test).
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\/", "<>&", "\u2028\u2029", "\xff", "\xe2\x80", "é😀", "\x00\x1f\x7f", "\b\f\n\r\t"} {
		f.Add(s)
	}
	for c := range 256 {
		f.Add(string([]byte{byte(c)}))
		f.Add("x" + string([]byte{byte(c), 0x80, byte(255 - c)}) + "\u2028y")
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		got := string(appendJSONString(nil, s)) + "\n"
		if got != want.String() {
			t.Fatalf("%q: got %s, want %s", s, got, want.String())
		}
	})
}

// offeredTools hands out the tools Tools builds, each with the SDK's
// encoding of it, and a different option set never gets another's tools.
func TestOfferedToolsCached(t *testing.T) {
	t.Parallel()
	opts := []ToolOptions{{}, {Planner: true}, {Task: true}, {HTTPAllowDomains: []string{"a.example"}}, {HTTPAllowDomains: []string{"b.example"}},
		{MCP: []MCPTool{{Server: "s", Name: "n", InputSchema: json.RawMessage(`{"type":"object"}`)}}},
		{MCP: []MCPTool{{Server: "s", Name: "n", Description: "changed", InputSchema: json.RawMessage(`{"type":"object"}`)}}}}
	for i, o := range opts {
		for range 2 {
			got, want := offeredTools(o), Tools(o)
			if len(got) != len(want) {
				t.Fatalf("options %d: %d tools, want %d", i, len(got), len(want))
			}
			for j := range want {
				w, err := encodeTool(want[j])
				if err != nil {
					t.Fatal(err)
				}
				if string(got[j].wire) != string(w) || got[j].Name != want[j].Name || got[j].Description != want[j].Description {
					t.Fatalf("options %d tool %d: %s, want %s", i, j, got[j].wire, w)
				}
			}
		}
	}
}

// The request Chat makes carries the headers the SDK's chat service sent
// (recorded from openai-go v3.96.0) — the key as a bearer token, or no
// Authorization without one — and the same body.
func TestChatSendsTheSDKsHeaders(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"sk-test-key-1234", ""} {
		fake := llmtest.New(t, key, "m")
		c, err := New(Config{BaseURL: fake.BaseURL(), APIKey: key, Timeout: 90 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		req := Request{Model: "m", Messages: []Message{{Role: RoleUser, Content: "hi <there>"}}, Tools: offeredTools(ToolOptions{}), ToolChoice: "auto"}
		fake.Script(llmtest.Reply{Content: "one"})
		if _, err := c.Chat(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		got := fake.Requests()[0]
		if want, _ := refBody(req); got.Body != string(want) {
			t.Fatalf("key %q: body %s, the SDK's %s", key, got.Body, want)
		}
		want := http.Header{
			"Accept":                      {"application/json"},
			"Accept-Encoding":             {"gzip"},
			"Content-Length":              {fmt.Sprint(len(got.Body))},
			"Content-Type":                {"application/json"},
			"User-Agent":                  {"OpenAI/Go 3.96.0"},
			"X-Stainless-Arch":            {map[string]string{"amd64": "x64", "386": "x32", "arm64": "arm64", "arm": "arm"}[runtime.GOARCH]},
			"X-Stainless-Lang":            {"go"},
			"X-Stainless-Os":              {map[string]string{"linux": "Linux", "darwin": "MacOS", "windows": "Windows", "freebsd": "FreeBSD"}[runtime.GOOS]},
			"X-Stainless-Package-Version": {"3.96.0"},
			"X-Stainless-Retry-Count":     {"0"},
			"X-Stainless-Runtime":         {"go"},
			"X-Stainless-Runtime-Version": {runtime.Version()},
			"X-Stainless-Timeout":         {"90"},
		}
		if key != "" {
			want.Set("Authorization", "Bearer "+key)
		}
		if fmt.Sprint(got.Header) != fmt.Sprint(want) {
			t.Fatalf("key %q: headers\n%v\nthe SDK's\n%v", key, got.Header, want)
		}
	}
}
