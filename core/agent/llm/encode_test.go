package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
)

// sdkBody is the body the client sent before encodeRequest: the SDK's
// parameters built from req (buildParams) and encoded by their
// MarshalJSON, which the SDK sent as it was.
func sdkBody(req Request) ([]byte, error) {
	p, err := buildParams(req)
	if err != nil {
		return nil, err
	}
	return p.MarshalJSON()
}

// buildParams maps a Request onto the SDK's parameters, as Chat did before
// it wrote the body itself: the reference encodeRequest is held to.
func buildParams(req Request) (openai.ChatCompletionNewParams, error) {
	var p openai.ChatCompletionNewParams
	if strings.TrimSpace(req.Model) == "" {
		return p, errors.New("llm: chat completions: no model named")
	}
	if len(req.Messages) == 0 {
		return p, errors.New("llm: chat completions: no messages")
	}
	p.Model = shared.ChatModel(req.Model)
	for i, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			p.Messages = append(p.Messages, openai.SystemMessage(m.Content))
		case RoleUser:
			p.Messages = append(p.Messages, openai.UserMessage(m.Content))
		case RoleTool:
			if m.ToolCallID == "" {
				return p, fmt.Errorf("llm: chat completions: message %d is a tool result without a tool call id", i)
			}
			p.Messages = append(p.Messages, openai.ToolMessage(m.Content, m.ToolCallID))
		case RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		default:
			return p, fmt.Errorf("llm: chat completions: message %d has unknown role %q", i, m.Role)
		}
	}
	for _, t := range req.Tools {
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(t.Parameters)}
		if t.Description != "" {
			fd.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	switch req.ToolChoice {
	case "":
	case "auto", "none", "required":
		p.ToolChoice.OfAuto = openai.String(req.ToolChoice)
	default:
		p.ToolChoice.OfFunctionToolChoice = &openai.ChatCompletionNamedToolChoiceParam{
			Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: req.ToolChoice},
		}
	}
	return p, nil
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

// The body Chat writes is, byte for byte, the one the SDK wrote from the
// same request; and a bad request fails with the same error.
func TestEncodeRequestMatchesSDK(t *testing.T) {
	t.Parallel()
	for i, req := range append(encodeCases(), oddCases()...) {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			want, err := sdkBody(req)
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
	bad := []Request{
		{Model: " ", Messages: []Message{{Role: RoleUser, Content: "x"}}},
		{Model: "m"},
		{Model: "m", Messages: []Message{{Role: RoleUser, Content: "x"}, {Role: RoleTool, Content: "no id"}}},
		{Model: "m", Messages: []Message{{Role: "developer", Content: "x"}}},
	}
	for i, req := range bad {
		_, werr := sdkBody(req)
		_, gerr := encodeRequest(req)
		if werr == nil || gerr == nil || werr.Error() != gerr.Error() {
			t.Errorf("bad request %d: error %v, want %v", i, gerr, werr)
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
		want, _ := sdkBody(req)
		if !got[string(want)] {
			t.Errorf("case %d: the endpoint never received the SDK's body %s", i, want)
		}
	}
}

// Any text is escaped as the SDK escapes it (the seeds run as a test).
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\/", "<>&", "\u2028\u2029", "\xff", "\xe2\x80", "é😀", "\x00\x1f\x7f", "\b\f\n\r\t"} {
		f.Add(s)
	}
	for c := range 256 {
		f.Add(string([]byte{byte(c)}))
		f.Add("x" + string([]byte{byte(c), 0x80, byte(255 - c)}) + "\u2028y")
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := openai.UserMessage(s).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got := `{"content":` + string(appendJSONString(nil, s)) + `,"role":"user"}`
		if got != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
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
// — the key as a bearer token, or no Authorization without one — and the
// same body.
func TestChatSendsTheSDKsHeaders(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"sk-test-key-1234", ""} {
		fake := llmtest.New(t, key, "m")
		c, err := New(Config{BaseURL: fake.BaseURL(), APIKey: key, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		opts := []option.RequestOption{option.WithBaseURL(fake.BaseURL() + "/"), option.WithMaxRetries(0)}
		if key != "" {
			opts = append(opts, option.WithAPIKey(key))
		}
		req := Request{Model: "m", Messages: []Message{{Role: RoleUser, Content: "hi <there>"}}, Tools: offeredTools(ToolOptions{}), ToolChoice: "auto"}
		params, err := buildParams(req)
		if err != nil {
			t.Fatal(err)
		}
		fake.Script(llmtest.Reply{Content: "one"}, llmtest.Reply{Content: "two"})
		svc := openai.NewChatCompletionService(opts...)
		if _, err := svc.New(context.Background(), params); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Chat(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		reqs := fake.Requests()
		sdk, ours := reqs[0], reqs[1]
		if ours.Body != sdk.Body {
			t.Fatalf("key %q: body %s, the SDK's %s", key, ours.Body, sdk.Body)
		}
		for _, h := range []http.Header{sdk.Header, ours.Header} {
			h.Del("X-Stainless-Timeout") // llm.timeout, set by New only
		}
		if fmt.Sprint(ours.Header) != fmt.Sprint(sdk.Header) {
			t.Fatalf("key %q: headers\n%v\nthe SDK's\n%v", key, ours.Header, sdk.Header)
		}
		if got := ours.Header.Get("Authorization"); (key == "") != (got == "") {
			t.Fatalf("key %q: Authorization %q", key, got)
		}
	}
}
