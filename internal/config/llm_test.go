package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/configs"
)

func TestExampleLLMIsTheDefault(t *testing.T) {
	p := filepath.Join(t.TempDir(), "silas.yaml")
	if err := os.WriteFile(p, []byte(configs.Example), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	if c.Agent != d.Agent || c.LLM.Timeout != d.LLM.Timeout || c.LLM.MaxRetries != d.LLM.MaxRetries || c.LLM.MaxRetryDelay != d.LLM.MaxRetryDelay ||
		c.LLM.TurnTimeout != d.LLM.TurnTimeout || c.LLM.Budget != d.LLM.Budget {
		t.Fatalf("example llm values differ from defaults:\n%+v\n%+v", c.LLM, d.LLM)
	}
}

func TestLLMValidation(t *testing.T) {
	llm := func(extra ...string) []string {
		return append([]string{"SILAS_AGENT_KIND=llm", "SILAS_LLM_BASE_URL=http://127.0.0.1:11434/v1", "SILAS_LLM_MODELS_PROXY=qwen3"}, extra...)
	}
	tests := []struct {
		name string
		env  []string
		want string // "" = valid
	}{
		{"command agent ignores llm keys", []string{"SILAS_LLM_BASE_URL=nonsense"}, ""},
		{"minimal llm", llm(), ""},
		{"key from env", llm("SILAS_LLM_API_KEY=sk-abc"), ""},
		{"bad kind", []string{"SILAS_AGENT_KIND=gpt"}, "agent.kind"},
		{"no base url", []string{"SILAS_AGENT_KIND=llm", "SILAS_LLM_MODELS_PROXY=m"}, "llm.base_url: required"},
		{"base url scheme", llm("SILAS_LLM_BASE_URL=ftp://x/v1"), "llm.base_url: must be an http"},
		{"base url credentials", llm("SILAS_LLM_BASE_URL=https://u:secret@x/v1"), "llm.base_url: must not contain credentials"},
		{"no proxy model", []string{"SILAS_AGENT_KIND=llm", "SILAS_LLM_BASE_URL=http://x/v1"}, "llm.models.proxy: required"},
		{"model with space", llm("SILAS_LLM_MODELS_PLANNER=gpt 5"), "llm.models.planner"},
		{"timeout", llm("SILAS_LLM_TIMEOUT=10ms"), "llm.timeout"},
		{"retries", llm("SILAS_LLM_MAX_RETRIES=11"), "llm.max_retries"},
		{"retry delay", llm("SILAS_LLM_MAX_RETRY_DELAY=1ms"), "llm.max_retry_delay"},
		{"turn timeout below timeout", llm("SILAS_LLM_TURN_TIMEOUT=5s"), "llm.turn_timeout"},
		{"domain", llm("SILAS_LLM_HTTP_ALLOW_DOMAINS=https://x.org"), "llm.http_allow_domains"},
		{"tokens", llm("SILAS_LLM_BUDGET_MAX_TOKENS=0"), "llm.budget.max_tokens"},
		{"wall time", llm("SILAS_LLM_BUDGET_MAX_WALL_TIME=1s"), "llm.budget.max_wall_time"},
		{"attempts", llm("SILAS_LLM_BUDGET_MAX_ATTEMPTS=0"), "llm.budget.max_attempts"},
		{"replans", llm("SILAS_LLM_BUDGET_MAX_REPLANS=9"), "llm.budget.max_replans"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("", tt.env)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("error repeats the credential: %v", err)
			}
		})
	}
}
