package llm_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
)

func TestDoctor(t *testing.T) {
	t.Parallel()
	ping := llmtest.Reply{ToolCalls: []llmtest.ToolCall{{Name: "ping", Arguments: `{"word":"pong"}`}}}
	tests := []struct {
		name   string
		key    string // the fake's key
		models []string
		script []llmtest.Reply
		no404  bool
		want   []string // "check:severity" in order
	}{
		{"all good, one call per distinct model", testKey, []string{"small", "big"}, []llmtest.Reply{ping, ping}, false,
			[]string{"endpoint:0", "tools small:0", "tools big:0"}},
		{"wrong key", "sk-other", []string{"small"}, nil, false, []string{"endpoint:3"}},
		{"model missing", testKey, []string{"small"}, []llmtest.Reply{ping}, false, []string{"endpoint:0", "tools small:0", "model planner:3"}},
		{"no tool call", testKey, []string{"small", "big"}, []llmtest.Reply{{Content: "pong"}, ping}, false, []string{"endpoint:0", "tools small:2", "tools big:0"}},
		{"tools refused", testKey, []string{"small", "big"}, []llmtest.Reply{{Status: 400, ErrorMessage: "tools are not supported"}, ping}, false,
			[]string{"endpoint:0", "tools small:3", "tools big:0"}},
		{"no model list", testKey, nil, []llmtest.Reply{ping, ping}, true, []string{"endpoint:2", "tools small:0", "tools big:0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := llmtest.New(t, tt.key, tt.models...)
			if tt.no404 {
				h := f.Config.Handler
				f.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/v1/models" {
						http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
						return
					}
					h.ServeHTTP(w, r)
				})
			}
			f.Script(tt.script...)
			c, _ := newClient(t, f)
			var got []string
			for _, fd := range llm.Doctor(context.Background(), c) {
				got = append(got, fd.Check+":"+string(rune('0'+fd.Severity)))
				if strings.Contains(fd.Message, testKey) {
					t.Fatalf("finding shows the key: %s", fd.Message)
				}
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("findings = %v, want %v", got, tt.want)
			}
			if f.Pending() != 0 {
				t.Fatalf("%d scripted replies unused", f.Pending())
			}
		})
	}
}
