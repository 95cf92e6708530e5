package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/configs"
)

func TestLLMHistoryKeys(t *testing.T) {
	base := []string{"SILAS_AGENT_KIND=llm", "SILAS_LLM_BASE_URL=http://127.0.0.1:11434/v1", "SILAS_LLM_MODELS_PROXY=qwen3"}
	tests := []struct {
		name     string
		env      []string
		want     string // "" = valid
		messages int
		chars    int
	}{
		{name: "defaults", messages: 12, chars: 6000},
		{name: "off", env: []string{"SILAS_LLM_HISTORY_MESSAGES=0"}, messages: 0, chars: 6000},
		{name: "set", env: []string{"SILAS_LLM_HISTORY_MESSAGES=30", "SILAS_LLM_HISTORY_MAX_CHARS=20000"}, messages: 30, chars: 20000},
		{name: "negative", env: []string{"SILAS_LLM_HISTORY_MESSAGES=-1"}, want: "llm.history.messages"},
		{name: "too many", env: []string{"SILAS_LLM_HISTORY_MESSAGES=101"}, want: "llm.history.messages"},
		{name: "too few characters", env: []string{"SILAS_LLM_HISTORY_MAX_CHARS=10"}, want: "llm.history.max_chars"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load("", append(append([]string{}, base...), tt.env...))
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.LLM.History.Messages != tt.messages || c.LLM.History.MaxChars != tt.chars {
				t.Fatalf("history = %+v", c.LLM.History)
			}
		})
	}
}

func TestExampleLLMHistoryIsTheDefault(t *testing.T) {
	p := filepath.Join(t.TempDir(), "silas.yaml")
	if err := os.WriteFile(p, []byte(configs.Example), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := Default(); c.LLM.History != d.LLM.History {
		t.Fatalf("example llm.history %+v, default %+v", c.LLM.History, d.LLM.History)
	}
}
