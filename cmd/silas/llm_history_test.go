package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/store"
)

type noHistory struct{}

func (noHistory) Transcript(context.Context, core.ChannelName, core.ConversationID, int) ([]core.TranscriptEntry, error) {
	return nil, nil
}

// llm.history.* reach the agent (the key's 0 turning history off), and
// serve's withHistory gives the LLM agent, and only it, the store.
func TestNewAgentHistory(t *testing.T) {
	tests := []struct {
		name            string
		messages, chars int
		wantMessages    int
	}{
		{name: "defaults", messages: 12, chars: 6000, wantMessages: 12},
		{name: "off", messages: 0, chars: 6000, wantMessages: -1},
		{name: "set", messages: 40, chars: 20000, wantMessages: 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := llmTestConfig(t, "http://127.0.0.1:9/v1")
			cfg.LLM.History.Messages, cfg.LLM.History.MaxChars = tt.messages, tt.chars
			ag, err := newAgent(cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			a := ag.(*llm.Agent)
			if a.HistoryMessages != tt.wantMessages || a.HistoryChars != tt.chars || a.History != nil {
				t.Fatalf("agent history = %d messages, %d chars, source %v", a.HistoryMessages, a.HistoryChars, a.History)
			}
			withHistory(ag, noHistory{})
			if a.History == nil {
				t.Fatal("withHistory did not set the source")
			}
		})
	}
	withHistory(agent.Command{}, noHistory{}) // the command agent has no history: nothing to set, no panic
}

// serve's withSecretNames gives the LLM agent the stored secrets' names.
func TestWithSecretNames(t *testing.T) {
	cfg := llmTestConfig(t, "http://127.0.0.1:9/v1")
	ag, err := newAgent(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	withSecretNames(ag, func(context.Context) ([]secrets.Info, error) {
		return []secrets.Info{{Name: "api_token"}, {Name: "db_password"}}, nil
	})
	names, err := ag.(*llm.Agent).SecretNames(context.Background())
	if err != nil || len(names) != 2 || names[0] != "api_token" || names[1] != "db_password" {
		t.Fatalf("SecretNames = %v, %v", names, err)
	}
	withSecretNames(agent.Command{}, nil) // nothing to set, no panic
}

// serve's store reads the secrets' names in the history's round trip; a
// source that cannot leaves them to SecretNames.
func TestWithHistoryStoreReadsSecretNames(t *testing.T) {
	cfg := llmTestConfig(t, "http://127.0.0.1:9/v1")
	ag, err := newAgent(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	a := ag.(*llm.Agent)
	withHistory(ag, (*store.Store)(nil))
	if !a.SecretNamesWithHistory {
		t.Fatal("the store's history does not read the secrets' names")
	}
	withHistory(ag, noHistory{})
	if a.SecretNamesWithHistory {
		t.Fatal("a history without names is asked for them")
	}
}
