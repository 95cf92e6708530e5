package config

import (
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"
)

// Agent chooses the agent that answers messages (docs/agent.md).
type Agent struct {
	// Kind is command (the deterministic /run agent, the default) or llm
	// (the model agent configured under llm.*).
	Kind string `yaml:"kind"`
}

// LLM configures the model agent (agent.kind: llm) and its
// OpenAI-compatible endpoint (docs/agent.md). cmd/silas maps it onto
// core/agent/llm.Config.
type LLM struct {
	// BaseURL is the endpoint's API root: https://api.openai.com/v1,
	// https://openrouter.ai/api/v1, http://127.0.0.1:11434/v1 (Ollama),
	// http://127.0.0.1:8000/v1 (vLLM).
	BaseURL string `yaml:"base_url"`
	// APIKey is the bearer key, or file:/path (preferred); "" sends none
	// (local servers). Never logged.
	APIKey string `yaml:"api_key"`
	// Models name the model of each role; planner and executor default to
	// proxy, so one model may serve all three.
	Models struct {
		Proxy    string `yaml:"proxy"`
		Planner  string `yaml:"planner"`
		Executor string `yaml:"executor"`
	} `yaml:"models"`
	// Timeout bounds one HTTP attempt to the endpoint.
	Timeout Duration `yaml:"timeout"`
	// MaxRetries of a call on connection errors, 408, 409, 429 and 5xx,
	// with exponential backoff honouring Retry-After.
	MaxRetries int `yaml:"max_retries"`
	// MaxRetryDelay caps one backoff wait.
	MaxRetryDelay Duration `yaml:"max_retry_delay"`
	// TurnTimeout bounds the model's whole answer to one message, retries
	// included; then the command agent answers.
	TurnTimeout Duration `yaml:"turn_timeout"`
	// HTTPAllowDomains enables the http_get tool for these hosts and their
	// subdomains (empty: no http_get).
	HTTPAllowDomains []string `yaml:"http_allow_domains"`
	// History bounds the conversation's recent messages the proxy is
	// given with each new one: Messages (0: none) and MaxChars in total.
	History struct {
		Messages int `yaml:"messages"`
		MaxChars int `yaml:"max_chars"`
	} `yaml:"history"`
	// Budget is the default per task; a plan may lower it, never raise it.
	Budget struct {
		MaxTokens     int64    `yaml:"max_tokens"`
		MaxModelCalls int64    `yaml:"max_model_calls"`
		MaxToolCalls  int64    `yaml:"max_tool_calls"`
		MaxWallTime   Duration `yaml:"max_wall_time"`
		// MaxCostUSD applies when the endpoint reports prices; 0: no cost cap.
		MaxCostUSD float64 `yaml:"max_cost_usd"`
		// MaxAttempts per step before the planner is consulted.
		MaxAttempts int `yaml:"max_attempts"`
		// MaxReplans per task before the user is asked.
		MaxReplans int `yaml:"max_replans"`
	} `yaml:"budget"`
}

// setLLMDefaults fills the agent.* and llm.* defaults (the example file's
// values).
func (c *Config) setLLMDefaults() {
	c.Agent.Kind = "command"
	l := &c.LLM
	l.Timeout = Duration{60 * time.Second}
	l.MaxRetries = 2
	l.MaxRetryDelay = Duration{8 * time.Second}
	l.TurnTimeout = Duration{2 * time.Minute}
	l.History.Messages = 12
	l.History.MaxChars = 6000
	l.Budget.MaxTokens = 200_000
	l.Budget.MaxModelCalls = 50
	l.Budget.MaxToolCalls = 30
	l.Budget.MaxWallTime = Duration{30 * time.Minute}
	l.Budget.MaxAttempts = 3
	l.Budget.MaxReplans = 2
}

// validateLLM checks agent.* and, when agent.kind is llm, llm.*.
func (c *Config) validateLLM() error {
	bad := func(key, format string, a ...any) error {
		return fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, a...))
	}
	switch c.Agent.Kind {
	case "command":
		return nil
	case "llm":
	default:
		return bad("agent.kind", "%q is not command or llm", c.Agent.Kind)
	}
	l := &c.LLM
	u, err := url.Parse(strings.TrimSpace(l.BaseURL))
	switch {
	case l.BaseURL == "":
		return bad("llm.base_url", "required when agent.kind is llm (e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1)")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return bad("llm.base_url", "must be an http:// or https:// URL such as https://api.openai.com/v1")
	case u.User != nil:
		return bad("llm.base_url", "must not contain credentials: put the key in llm.api_key (file:/path)")
	case u.RawQuery != "" || u.Fragment != "":
		return bad("llm.base_url", "must not have a query or fragment")
	}
	if strings.ContainsAny(l.APIKey, "\n\r") {
		return bad("llm.api_key", "must be one line (or file:/path)")
	}
	for _, m := range []struct{ key, v string }{{"llm.models.proxy", l.Models.Proxy}, {"llm.models.planner", l.Models.Planner}, {"llm.models.executor", l.Models.Executor}} {
		if strings.ContainsAny(m.v, " \t\n\r") {
			return bad(m.key, "%q must be a model id without spaces", m.v)
		}
	}
	if strings.TrimSpace(l.Models.Proxy) == "" {
		return bad("llm.models.proxy", "required when agent.kind is llm (planner and executor default to it)")
	}
	if d := l.Timeout.Duration; d < time.Second || d > time.Hour {
		return bad("llm.timeout", "%s must be between 1s and 1h", d)
	}
	if l.MaxRetries < 0 || l.MaxRetries > 10 {
		return bad("llm.max_retries", "%d must be between 0 and 10", l.MaxRetries)
	}
	if d := l.MaxRetryDelay.Duration; d < 10*time.Millisecond || d > 5*time.Minute {
		return bad("llm.max_retry_delay", "%s must be between 10ms and 5m", d)
	}
	if d := l.TurnTimeout.Duration; d < l.Timeout.Duration || d > 2*time.Hour {
		return bad("llm.turn_timeout", "%s must be at least llm.timeout and at most 2h", d)
	}
	for _, d := range l.HTTPAllowDomains {
		if d == "" || strings.ContainsAny(d, "/:@ *") {
			return bad("llm.http_allow_domains", "%q must be a host name such as example.org", d)
		}
	}
	if n := l.History.Messages; n < 0 || n > 100 {
		return bad("llm.history.messages", "%d must be between 0 (no history) and 100", n)
	}
	if n := l.History.MaxChars; n < 500 || n > 100_000 {
		return bad("llm.history.max_chars", "%d must be between 500 and 100000", n)
	}
	b := l.Budget
	for _, f := range []struct {
		key string
		v   int64
	}{{"llm.budget.max_tokens", b.MaxTokens}, {"llm.budget.max_model_calls", b.MaxModelCalls}, {"llm.budget.max_tool_calls", b.MaxToolCalls}} {
		if f.v < 1 {
			return bad(f.key, "%d must be at least 1", f.v)
		}
	}
	if d := b.MaxWallTime.Duration; d < time.Minute || d > 7*24*time.Hour {
		return bad("llm.budget.max_wall_time", "%s must be between 1m and 168h", d)
	}
	if b.MaxCostUSD < 0 || math.IsNaN(b.MaxCostUSD) || math.IsInf(b.MaxCostUSD, 0) {
		return bad("llm.budget.max_cost_usd", "must be 0 (no cap) or a positive number")
	}
	if b.MaxAttempts < 1 || b.MaxAttempts > 10 {
		return bad("llm.budget.max_attempts", "%d must be between 1 and 10", b.MaxAttempts)
	}
	if b.MaxReplans < 0 || b.MaxReplans > 5 {
		return bad("llm.budget.max_replans", "%d must be between 0 and 5", b.MaxReplans)
	}
	return nil
}
