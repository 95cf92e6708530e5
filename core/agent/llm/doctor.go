package llm

import (
	"context"
	"errors"
	"fmt"
	"github.com/silas-gateway/silas/internal/doctor"
	"net/http"
	"slices"
	"strings"
)

// Severity and Finding are the shape every doctor shares (internal/doctor).
type (
	Severity = doctor.Severity
	Finding  = doctor.Finding
)

// Severities, from fine to broken.
const (
	SeverityOK    = doctor.OK
	SeverityInfo  = doctor.Info
	SeverityWarn  = doctor.Warn
	SeverityError = doctor.Error
)

// Doctor checks the endpoint, the configured models and tool calling, and
// says in plain words what is wrong. It makes one GET /models and one small
// chat call per distinct model (a few tokens each).
func Doctor(ctx context.Context, c *Client) []Finding {
	var out []Finding
	add := func(check string, s Severity, format string, a ...any) {
		out = append(out, Finding{Check: check, Severity: s, Message: fmt.Sprintf(format, a...)})
	}
	ids, err := c.ListModels(ctx)
	listed := err == nil
	var ae *APIError
	switch {
	case err == nil:
		add("endpoint", SeverityOK, "%s answers; %d model(s) listed", c.cfg.BaseURL, len(ids))
	case errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden):
		add("endpoint", SeverityError, "%v", err)
		return out
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		// Some servers do not list models; the chat call below still tells.
		add("endpoint", SeverityWarn, "%s does not list models (GET /models answered 404); checking the models by calling them", c.cfg.BaseURL)
	default:
		add("endpoint", SeverityError, "%v", err)
		return out
	}
	m := c.cfg.Models
	roles := []struct{ role, model string }{{"proxy", m.Proxy}, {"planner", m.Planner}, {"executor", m.Executor}}
	seen := map[string]bool{}
	for _, r := range roles {
		if r.model == "" {
			add("model "+r.role, SeverityError, "llm.models.%s is not set", r.role)
			continue
		}
		if listed && !slices.Contains(ids, r.model) {
			add("model "+r.role, SeverityError, "%q is not among the endpoint's models (%s)", r.model, listSome(ids))
			continue
		}
		if seen[r.model] {
			continue
		}
		seen[r.model] = true
		out = append(out, toolCheck(ctx, c, r.model))
	}
	return out
}

// toolCheck asks model to call a harmless tool and reports whether it did.
func toolCheck(ctx context.Context, c *Client, model string) Finding {
	check := "tools " + model
	res, err := c.Chat(ctx, Request{
		Model: model,
		Messages: []Message{
			{Role: RoleSystem, Content: "You are being tested for tool calling. Call the ping tool with the word pong. Do not answer in text."},
			{Role: RoleUser, Content: "Call ping now."},
		},
		Tools: []Tool{{Name: "ping", Description: "Connectivity test.", Parameters: map[string]any{
			"type": "object", "properties": map[string]any{"word": map[string]any{"type": "string"}}, "required": []string{"word"}}}},
		ToolChoice: "auto",
	})
	var ae *APIError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusBadRequest:
		return Finding{Check: check, Severity: SeverityError, Message: fmt.Sprintf("the endpoint refused a request with tools: %s — this model or server may not support tool calling, which the agent needs", ae.Message)}
	case err != nil:
		return Finding{Check: check, Severity: SeverityError, Message: err.Error()}
	}
	for _, tc := range res.ToolCalls {
		if tc.Name == "ping" {
			return Finding{Check: check, Severity: SeverityOK, Message: fmt.Sprintf("%s answers and calls tools (%d tokens)", model, res.Usage.TotalTokens)}
		}
	}
	return Finding{Check: check, Severity: SeverityWarn, Message: fmt.Sprintf("%s answered in text instead of calling the offered tool: tool calling may be unsupported or weak with this model", model)}
}

func listSome(ids []string) string {
	if len(ids) == 0 {
		return "none listed"
	}
	if len(ids) > 8 {
		return strings.Join(ids[:8], ", ") + fmt.Sprintf(" and %d more", len(ids)-8)
	}
	return strings.Join(ids, ", ")
}
