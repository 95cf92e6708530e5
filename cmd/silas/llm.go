package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/silas-gateway/silas/adapters/kit"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/agent"
	"github.com/silas-gateway/silas/core/agent/llm"
	"github.com/silas-gateway/silas/core/agent/llm/task"
	"github.com/silas-gateway/silas/core/engine"
	"github.com/silas-gateway/silas/core/gateway"
	"github.com/silas-gateway/silas/core/mcptools"
	"github.com/silas-gateway/silas/core/secrets"
	"github.com/silas-gateway/silas/core/tasks"
	"github.com/silas-gateway/silas/internal/config"
	"github.com/silas-gateway/silas/internal/doctor"
	"github.com/silas-gateway/silas/internal/taskwire"
)

// llmConfig maps the llm.* keys onto the client's config, reading a
// file: key. Planner and executor default to the proxy model.
func llmConfig(cfg *config.Config, log *slog.Logger) (llm.Config, error) {
	l := cfg.LLM
	key, err := kit.ReadSecret("llm.api_key", l.APIKey)
	if err != nil {
		return llm.Config{}, fmt.Errorf("config: %w", err)
	}
	m := llm.Models{Proxy: l.Models.Proxy, Planner: l.Models.Planner, Executor: l.Models.Executor}
	if m.Planner == "" {
		m.Planner = m.Proxy
	}
	if m.Executor == "" {
		m.Executor = m.Proxy
	}
	return llm.Config{BaseURL: l.BaseURL, APIKey: key, Models: m, Timeout: l.Timeout.Duration,
		MaxRetries: l.MaxRetries, MaxRetryDelay: l.MaxRetryDelay.Duration, Logger: log}, nil
}

// newAgent returns the agent agent.kind names: the command agent, or the
// one-step LLM agent with the command agent as its fallback.
func newAgent(cfg *config.Config, log *slog.Logger) (core.Agent, error) {
	if cfg.Agent.Kind != "llm" {
		return agent.Command{}, nil
	}
	lc, err := llmConfig(cfg, log)
	if err != nil {
		return nil, err
	}
	c, err := llm.New(lc)
	if err != nil {
		return nil, fmt.Errorf("config: llm.base_url: %w", err)
	}
	tools := llm.ToolOptions{HTTPAllowDomains: cfg.LLM.HTTPAllowDomains}
	log.Info("agent: llm", slog.String("base_url", lc.BaseURL), slog.String("proxy", lc.Models.Proxy),
		slog.String("planner", lc.Models.Planner), slog.String("executor", lc.Models.Executor))
	hist := cfg.LLM.History.Messages
	if hist == 0 {
		hist = -1 // the key's 0 means no history; the agent reads 0 as the default
	}
	return &llm.Agent{Proxy: llm.Proxy{Client: c, Tools: tools}, Planner: llm.Planner{Client: c}, Fallback: agent.Command{},
		Timeout: cfg.LLM.TurnTimeout.Duration, Log: log, Tasks: true,
		HistoryMessages: hist, HistoryChars: cfg.LLM.History.MaxChars}, nil
}

// withHistory lets the LLM agent's proxy read the conversation's recent
// messages from storage (llm.history.*); other agents need none.
//
// The store also reads the secrets' names withSecretNames lists in the
// history's round trip: one query per message for both.
func withHistory(ag core.Agent, h llm.HistorySource) {
	if la, ok := ag.(*llm.Agent); ok {
		la.History = h
		_, la.SecretNamesWithHistory = h.(llm.HistoryAndSecretNames)
	}
}

// withSecretNames tells the LLM agent's proxy the stored secrets' names
// (never values), as the task executor is told.
func withSecretNames(ag core.Agent, list func(context.Context) ([]secrets.Info, error)) {
	if la, ok := ag.(*llm.Agent); ok {
		la.SecretNames = func(ctx context.Context) ([]string, error) {
			infos, err := list(ctx)
			if err != nil {
				return nil, err
			}
			names := make([]string, 0, len(infos))
			for _, i := range infos {
				names = append(names, i.Name)
			}
			return names, nil
		}
	}
}

// newTasks configures the task runtime (core/tasks) when agent.kind is llm
// (nil otherwise), as the gateway builds it (gateway.Config.Tasks): planner
// and executor on the same endpoint, the llm.budget.* limits and recovery;
// the executor is offered the pinned tools of mcp (nil: none).
func newTasks(cfg *config.Config, log *slog.Logger, mcp *mcptools.Tools) (func(gateway.TaskPorts) (engine.Tasks, error), error) {
	if cfg.Agent.Kind != "llm" {
		return nil, nil
	}
	lc, err := llmConfig(cfg, log)
	if err != nil {
		return nil, err
	}
	c, err := llm.New(lc)
	if err != nil {
		return nil, fmt.Errorf("config: llm.base_url: %w", err)
	}
	b := cfg.LLM.Budget
	replans := b.MaxReplans
	if replans == 0 {
		replans = -1 // task.Policy reads 0 as "the default"; the key's 0 means none
	}
	return taskwire.Runtime(tasks.Config{
		Planner:  llm.Planner{Client: c},
		Executor: llm.Executor{Client: c, Tools: llm.ToolOptions{HTTPAllowDomains: cfg.LLM.HTTPAllowDomains}},
		MCPTools: pinnedForModel(mcp),
		Limits: task.Limits{Tokens: b.MaxTokens, ModelCalls: b.MaxModelCalls, ToolCalls: b.MaxToolCalls, WallTime: b.MaxWallTime.Duration,
			CostUSD: b.MaxCostUSD},
		Recovery: task.Policy{MaxAttempts: b.MaxAttempts, MaxReplans: replans},
	}), nil
}

// doctorLLM checks the model endpoint when agent.kind is llm and returns
// the number of problems found.
func doctorLLM(ctx context.Context, cfg *config.Config, out io.Writer, timeout time.Duration) int {
	fmt.Fprintln(out, "Model (agent.kind: "+cfg.Agent.Kind+")")
	if cfg.Agent.Kind != "llm" {
		fmt.Fprintln(out, "  · the command agent needs no model: skipped")
		return 0
	}
	lc, err := llmConfig(cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		lc.Timeout = min(lc.Timeout, timeout)
		lc.MaxRetries = 0
	}
	var c *llm.Client
	if err == nil {
		c, err = llm.New(lc)
	}
	if err != nil {
		fmt.Fprintf(out, "  ✗ %-12s %v\n", "config", err)
		return 1
	}
	return doctor.Print(out, llm.Doctor(ctx, c))
}
