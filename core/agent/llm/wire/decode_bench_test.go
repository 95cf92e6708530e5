package wire

import (
	"encoding/json"
	"testing"
)

// BenchmarkDecodeChat is the decoding of an answer like the canned
// endpoint's (respond_bench_test.go) and of one with two tool calls.
func BenchmarkDecodeChat(b *testing.B) {
	text, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "m",
		"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": "Noted: the disk is 42 % full and nothing needs doing."}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 900, "completion_tokens": 12, "total_tokens": 912},
	})
	calls, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "m",
		"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": nil, "tool_calls": []map[string]any{
			{"id": "call_1", "type": "function", "function": map[string]any{"name": "shell", "arguments": `{"argv":["df","-h"],"intent":"See how full the disks are"}`}},
			{"id": "call_2", "type": "function", "function": map[string]any{"name": "read_file", "arguments": `{"path":"/etc/hostname","intent":"Name the host"}`}},
		}}, "finish_reason": "tool_calls"}},
		"usage": map[string]any{"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940},
	})
	for _, c := range []struct {
		name string
		body []byte
	}{{"text", text}, {"tool_calls", calls}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d, err := DecodeChat(c.body); err != nil || d.Choices != 1 {
					b.Fatal(d, err)
				}
			}
		})
	}
}
