package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// The request body is written here directly: building the SDK's
// parameters (openai-go, which the client used before) and letting their
// MarshalJSON walk them, every tool schema's maps included, by reflection
// cost more CPU per model call than the rest of the client (BENCHMARKS.md
// "Issue 26 — LLM path"). The bytes are exactly what that SDK wrote — same
// member order, same escaping (none of HTML, \u2028/\u2029 and control
// characters escaped, invalid UTF-8 as \ufffd) — which
// TestEncodeRequestMatchesSDK checks against bodies the SDK wrote
// (testdata/sdk_bodies.json). The tool definitions, the static part of
// every request, are encoded once per tool (offeredTools caches them), not
// once per call.

// encodeRequest writes req as the JSON body of POST /chat/completions,
// byte for byte what the SDK wrote for the same request.
func encodeRequest(req Request) ([]byte, error) {
	if strings.TrimSpace(req.Model) == "" {
		return nil, errors.New("llm: chat completions: no model named")
	}
	if len(req.Messages) == 0 {
		return nil, errors.New("llm: chat completions: no messages")
	}
	size := 64 + len(req.Model)
	for _, m := range req.Messages {
		size += 48 + len(m.Content) + len(m.ToolCallID)
		for _, tc := range m.ToolCalls {
			size += 80 + len(tc.ID) + len(tc.Name) + len(tc.Arguments)
		}
	}
	tools := make([][]byte, len(req.Tools))
	for i, t := range req.Tools {
		w, err := t.encoded()
		if err != nil {
			return nil, err
		}
		tools[i] = w
		size += len(w) + 1
	}
	b := make([]byte, 0, size+size/8) // room for escapes
	b = append(b, `{"messages":[`...)
	for i, m := range req.Messages {
		if i > 0 {
			b = append(b, ',')
		}
		switch m.Role {
		case RoleSystem, RoleUser:
			b = append(b, `{"content":`...)
			b = appendJSONString(b, m.Content)
			b = append(b, `,"role":"`...)
			b = append(b, m.Role...)
			b = append(b, `"}`...)
		case RoleTool:
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("llm: chat completions: message %d is a tool result without a tool call id", i)
			}
			b = append(b, `{"content":`...)
			b = appendJSONString(b, m.Content)
			b = append(b, `,"tool_call_id":`...)
			b = appendJSONString(b, m.ToolCallID)
			b = append(b, `,"role":"tool"}`...)
		case RoleAssistant:
			b = append(b, '{')
			if m.Content != "" {
				b = append(b, `"content":`...)
				b = appendJSONString(b, m.Content)
				b = append(b, ',')
			}
			if len(m.ToolCalls) > 0 {
				b = append(b, `"tool_calls":[`...)
				for j, tc := range m.ToolCalls {
					if j > 0 {
						b = append(b, ',')
					}
					b = append(b, `{"id":`...)
					b = appendJSONString(b, tc.ID)
					b = append(b, `,"function":{"arguments":`...)
					b = appendJSONString(b, tc.Arguments)
					b = append(b, `,"name":`...)
					b = appendJSONString(b, tc.Name)
					b = append(b, `},"type":"function"}`...)
				}
				b = append(b, "],"...)
			}
			b = append(b, `"role":"assistant"}`...)
		default:
			return nil, fmt.Errorf("llm: chat completions: message %d has unknown role %q", i, m.Role)
		}
	}
	b = append(b, `],"model":`...)
	b = appendJSONString(b, req.Model)
	switch req.ToolChoice {
	case "":
	case "auto", "none", "required":
		b = append(b, `,"tool_choice":"`...)
		b = append(b, req.ToolChoice...)
		b = append(b, '"')
	default:
		b = append(b, `,"tool_choice":{"function":{"name":`...)
		b = appendJSONString(b, req.ToolChoice)
		b = append(b, `},"type":"function"}`...)
	}
	if len(tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i, w := range tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, w...)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// encoded is the tool's definition as encodeTool writes it: the copy
// offeredTools made when it built the tool, or encoded now for a tool
// built elsewhere.
func (t Tool) encoded() ([]byte, error) {
	if t.wire != nil {
		return t.wire, nil
	}
	return encodeTool(t)
}

// encodeTool writes one tool definition as the SDK did: name,
// description (when there is one), parameters (when not nil, with
// encoding/json's sorted keys and no HTML escaping, as the SDK's encoder
// — a copy of encoding/json — wrote them).
func encodeTool(t Tool) ([]byte, error) {
	b := append(make([]byte, 0, 256), `{"function":{"name":`...)
	b = appendJSONString(b, t.Name)
	if t.Description != "" {
		b = append(b, `,"description":`...)
		b = appendJSONString(b, t.Description)
	}
	if t.Parameters != nil {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(t.Parameters); err != nil {
			return nil, fmt.Errorf("llm: chat completions: tool %q: %w", t.Name, err)
		}
		b = append(b, `,"parameters":`...)
		b = append(b, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
	}
	return append(b, `},"type":"function"}`...), nil
}

// appendJSONString appends s as a JSON string the way the SDK's encoder
// (a copy of encoding/json with HTML escaping off) wrote it, which is
// encoding/json's Encoder with SetEscapeHTML(false).
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// maxToolSets bounds offeredTools' cache: the proxy's and the executor's
// sets, times the MCP tools pinned over a run (a re-pin is a new set).
const maxToolSets = 64

// toolSets caches offeredTools by toolSetKey.
var toolSets struct {
	sync.Mutex
	m map[string][]Tool
}

// offeredTools is Tools(o) with each definition's encoding made once
// and kept: the same tools are offered on every call of a role. The slice
// and its tools are shared, never to be changed.
func offeredTools(o ToolOptions) []Tool {
	key := toolSetKey(o)
	toolSets.Lock()
	ts, ok := toolSets.m[key]
	toolSets.Unlock()
	if ok {
		return ts
	}
	ts = Tools(o)
	for i := range ts {
		// A tool that cannot be encoded keeps no encoding: Chat then
		// encodes it per call and reports the error there.
		ts[i].wire, _ = encodeTool(ts[i])
	}
	toolSets.Lock()
	if toolSets.m == nil || len(toolSets.m) >= maxToolSets {
		toolSets.m = make(map[string][]Tool)
	}
	toolSets.m[key] = ts
	toolSets.Unlock()
	return ts
}

// toolSetKey is everything of o that Tools reads, each part
// length-prefixed so that no two options share a key.
func toolSetKey(o ToolOptions) string {
	var b strings.Builder
	part := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	fmt.Fprintf(&b, "%t %t %d %d ", o.Planner, o.Task, len(o.HTTPAllowDomains), len(o.MCP))
	for _, d := range o.HTTPAllowDomains {
		part(d)
	}
	for _, t := range o.MCP {
		part(t.Server)
		part(t.Name)
		part(t.Description)
		part(string(t.InputSchema))
	}
	return b.String()
}
