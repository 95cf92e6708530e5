package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/canon"
	"github.com/silas-gateway/silas/core/flow"
	"github.com/silas-gateway/silas/core/flowrun"
	"github.com/silas-gateway/silas/core/render"
)

// FlowNode is the flow node type that calls a pinned MCP tool.
const FlowNode = "action.mcp"

// offerTimeout bounds the read of a tool's pin when a flow step proposes
// a call (flowrun's ActionKind.Propose gets no context).
const offerTimeout = 10 * time.Second

// Offer is the pinned tool server/name as a call to it is proposed: its
// pinned definition's hash and read-only hint. The error says why it may
// not be called now (never seen, not pinned, quarantined, a pin whose
// signature fails) — the same reasons Run refuses a call for.
func (t *Tools) Offer(ctx context.Context, server, name string) (Offered, error) {
	tool := core.Action{Tool: core.ToolMCP, Server: server, Name: name}.MCPTool()
	m, err := t.cfg.Store.MCPTool(ctx, server, name)
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return Offered{}, fmt.Errorf("%s: could not read its pin: %w", tool, err)
	}
	if err == nil {
		if c, _ := t.checked(m); c.Status == core.MCPToolPinned && c.PinnedHash == c.Hash {
			s := parse(c.Definition)
			return Offered{Server: server, Name: name, Description: s.Description, InputSchema: s.InputSchema, Hash: c.PinnedHash,
				ReadOnlyHint: t.ReadOnlyHint(c)}, nil
		}
	}
	// The refusal's words, for the definition that stands now.
	why := t.refusal(ctx, core.Action{Tool: core.ToolMCP, Server: server, Name: name, DefinitionHash: m.Hash})
	if why == "" {
		why = tool + ": its pin changed while it was read — nothing was proposed; try again"
	}
	return Offered{}, errors.New(why)
}

// FlowKind is how flows (core/flowrun) run an action.mcp node: its server,
// tool and arguments (each argument a CEL expression in the run's scope)
// become a call of the pinned tool, proposed exactly as the LLM agent's
// call is — policy (rules naming mcp:<server>/<tool>), a card showing the
// tool and its arguments, a single-use token, the executor's "mcp" runner
// that checks the pin again and sends one tools/call, audit. Its output is
// {exit_code, result, stderr, verified}: result is the tool's text,
// redacted and fenced as data from the server. t nil (no mcp.servers):
// every such node fails with that reason, nothing proposed.
func FlowKind(t *Tools) flowrun.ActionKind {
	return flowrun.ActionKind{
		Propose: func(n *flow.Node, sc flow.Scope) (core.ProposedAction, error) {
			if t == nil {
				return core.ProposedAction{}, errors.New("no MCP servers are configured (mcp.servers; docs/mcp.md)")
			}
			server, _ := n.Config["server"].(string)
			name, _ := n.Config["tool"].(string)
			args, err := flowArguments(n, sc)
			if err != nil {
				return core.ProposedAction{}, err
			}
			ctx, cancel := context.WithTimeout(context.Background(), offerTimeout)
			defer cancel()
			o, err := t.Offer(ctx, server, name)
			if err != nil {
				return core.ProposedAction{}, err
			}
			a := Action(o, args)
			return core.ProposedAction{Action: a, Intent: render.Clip("Flow step "+n.ID+": call "+a.MCPTool(), 180),
				Rationale: "A step of a flow you started: a call of this MCP server's tool with the arguments shown. Silas sends it only after this approval, and only while the server offers the definition you pinned; its result is data from the server."}, nil
		},
		Output: func(out map[string]any) map[string]any {
			out["result"] = out["stdout"]
			delete(out, "stdout")
			return out
		},
	}
}

// flowArguments evaluates an action.mcp node's arguments into one
// canonical JSON object (RFC 8785), as the card shows it and the call
// sends it.
func flowArguments(n *flow.Node, sc flow.Scope) (json.RawMessage, error) {
	cfg, _ := n.Config["arguments"].(map[string]any)
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	args := map[string]any{}
	for _, k := range keys {
		x := n.Exprs["arguments."+k]
		if x == nil {
			return nil, fmt.Errorf("arguments.%s: not an expression", k)
		}
		v, err := x.Eval(sc)
		if err != nil {
			return nil, fmt.Errorf("arguments.%s: %w", k, err)
		}
		args[k] = v
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	c, err := canon.Transform(b)
	if err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	return c, nil
}
