package llmtest

import (
	"encoding/json"
	"strings"
	"testing"
)

// The fake refuses what a strict OpenAI-compatible server refuses.
func TestCheck(t *testing.T) {
	s := &Server{ModelIDs: []string{"m"}}
	tool := `"tools":[{"type":"function","function":{"name":"shell","parameters":{"type":"object"}}}]`
	tests := []struct {
		name, body, want string
	}{
		{"ok", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, ""},
		{"ok with tool round", `{"model":"m",` + tool + `,"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"shell","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"out"}]}`, ""},
		{"unknown model", `{"model":"x","messages":[{"role":"user","content":"hi"}]}`, "does not exist"},
		{"no messages", `{"model":"m","messages":[]}`, "must not be empty"},
		{"bad role", `{"model":"m","messages":[{"role":"root","content":"hi"}]}`, "role"},
		{"unanswered call", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"shell","arguments":"{}"}}]},{"role":"user","content":"x"}]}`, "not answered"},
		{"orphan tool message", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"c9","content":"x"}]}`, "no preceding"},
		{"arguments not json", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"shell","arguments":"{"}}]},{"role":"tool","tool_call_id":"c1","content":"x"}]}`, "not JSON"},
		{"bad tool name", `{"model":"m","tools":[{"type":"function","function":{"name":"rm -rf"}}],"messages":[{"role":"user","content":"x"}]}`, "is invalid"},
		{"duplicate tool", `{"model":"m","tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"a"}}],"messages":[{"role":"user","content":"x"}]}`, "duplicate"},
		{"tool_choice without tools", `{"model":"m","tool_choice":"auto","messages":[{"role":"user","content":"x"}]}`, "only allowed when tools"},
		{"tool_choice names no tool", `{"model":"m",` + tool + `,"tool_choice":{"type":"function","function":{"name":"other"}},"messages":[{"role":"user","content":"x"}]}`, "names no offered tool"},
		{"empty assistant", `{"model":"m","messages":[{"role":"assistant"}]}`, "needs content or tool_calls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req ChatRequest
			if err := json.Unmarshal([]byte(tt.body), &req); err != nil {
				t.Fatal(err)
			}
			err := s.check(req)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("check = %v, want %q", err, tt.want)
			}
		})
	}
}
