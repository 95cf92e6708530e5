package llm

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/silas-gateway/silas/core"
)

// Agent is the one-step LLM agent behind `agent.kind: llm`: per message
// the proxy answers in text, proposes one tool call — which becomes the
// turn's one proposed action and goes through the same policy, card,
// token, sandbox and verification as /run — or hands a task to the
// planner: with Tasks set the goal goes to the engine's durable task
// runtime (docs/agent.md), otherwise the plan is only shown.
//
// Commands (text starting with "/", /run included) and every model failure
// go to Fallback, the deterministic command agent, so Silas keeps working
// when the endpoint does not.
type Agent struct {
	Proxy    Proxy
	Planner  Planner
	Fallback core.Agent
	// Timeout bounds one Respond, model calls and retries included
	// (0: 2 minutes).
	Timeout time.Duration
	Log     *slog.Logger
	// Tasks hands plan_task to the engine's durable task runtime
	// (core.Proposal.Task), which plans, runs and verifies the task step by
	// step. Off, a plan is only shown.
	Tasks bool
	// History, when set, gives the proxy the conversation's recent
	// messages (history.go says what it sees and how), bounded by
	// HistoryMessages (0: DefaultHistoryMessages; negative: no history)
	// and HistoryChars in total (0: DefaultHistoryChars). Without it every
	// message is answered on its own.
	History         HistorySource
	HistoryMessages int
	HistoryChars    int
	// SecretNames, when set, lists the stored secrets' names for the
	// proxy (never their values; a missing one gets the secure-input
	// card when a call that declares it is approved).
	SecretNames func(context.Context) ([]string, error)
	// SecretNamesWithHistory says History (a HistoryAndSecretNames) reads
	// the same names SecretNames lists (core/store: the secrets table), so
	// when the history is read they come with it, in one round trip, as
	// they are in the database then — a secret stored through another
	// instance is named in the next message. SecretNames still answers
	// when no history is read or that read failed.
	SecretNamesWithHistory bool
	// MCPTools, when set, lists the pinned tools of the configured MCP
	// servers (core/mcptools), offered to the proxy next to its own.
	MCPTools func(context.Context) ([]MCPTool, error)
}

var _ core.Agent = (*Agent)(nil)

// Respond implements core.Agent. It is not a core.InlineAgent: it calls a
// model, so its turns are stored first and answered by a worker.
func (a *Agent) Respond(ctx context.Context, in core.AgentInput) (core.Proposal, error) {
	text := strings.TrimSpace(in.Text)
	if strings.HasPrefix(text, "/") || text == "" {
		return a.Fallback.Respond(ctx, in)
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	log := a.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hist, names, named, err := a.history(ctx, in)
	if err != nil {
		// The message can still be answered on its own.
		log.Warn("could not read the conversation's history; answering without it", slog.String("conversation", string(in.Conversation)),
			slog.String("err", err.Error()))
	}
	proxy := a.Proxy
	if a.SecretNames != nil {
		if !named {
			names, err = a.SecretNames(ctx)
			if err != nil {
				log.Warn("could not list the stored secrets' names; answering without them", slog.Any("err", err))
			}
		}
		proxy.SecretNames = names
	}
	if a.MCPTools != nil {
		list, err := a.MCPTools(ctx)
		if err != nil {
			log.Warn("could not list the pinned MCP tools; answering without them", slog.Any("err", err))
		}
		proxy.Tools.MCP = list
	}
	route, err := proxy.Decide(ctx, text, in.Trust == core.TrustExternal, hist...)
	if err != nil {
		log.Warn("proxy model failed; answering with the command agent", slog.String("conversation", string(in.Conversation)), slog.String("err", err.Error()))
		p, ferr := a.Fallback.Respond(ctx, in)
		if ferr != nil {
			return p, ferr
		}
		p.Reply = strings.TrimSpace("The model is not available right now (" + shorten(err.Error(), 200) + "). " + p.Reply)
		return p, nil
	}
	log.Debug("proxy decided", slog.String("conversation", string(in.Conversation)), slog.Bool("call", route.Call != nil),
		slog.Int64("tokens", route.Usage.TotalTokens))
	if route.Call == nil {
		return core.Proposal{Reply: route.Reply}, nil
	}
	p := a.propose(ctx, in, route, log)
	p.ModelTokens = route.Usage.TotalTokens
	if route.Dropped > 0 {
		// Never dropped silently: the person reads it, and the model reads
		// it in the history of its next request.
		p.Reply = strings.TrimSpace(p.Reply + "\n\n" + droppedNote(route.Dropped))
	}
	return p, nil
}

// droppedNote says that only the first of a reply's tool calls was taken.
func droppedNote(dropped int) string {
	return fmt.Sprintf("(The assistant asked for %d actions in one reply; only the first was taken. The other %d were not proposed and nothing of them ran: ask again, one at a time.)",
		dropped+1, dropped)
}

// propose turns the proxy's call into the turn's proposal.
func (a *Agent) propose(ctx context.Context, in core.AgentInput, route Route, log *slog.Logger) core.Proposal {
	c := *route.Call
	switch c.Name {
	case ToolAskUser:
		var b strings.Builder
		b.WriteString(c.Question)
		for i, ch := range c.Choices {
			fmt.Fprintf(&b, "\n%d. %s", i+1, ch)
		}
		return core.Proposal{Reply: b.String()}
	case ToolPlanTask:
		if a.Tasks {
			return core.Proposal{Reply: route.Reply, Task: &core.TaskRequest{Goal: c.Goal}}
		}
		pl, _, err := a.Planner.Plan(ctx, c.Goal, "")
		if err != nil {
			log.Warn("planner failed", slog.String("conversation", string(in.Conversation)), slog.String("err", err.Error()))
			return core.Proposal{Reply: "I could not make a plan for that (" + shorten(err.Error(), 200) + "). Try asking for one step at a time."}
		}
		return core.Proposal{Reply: "Plan: " + pl.Summary() + "\n\nRunning multi-step plans is not available yet: ask me for one step at a time, and I will propose it for your approval."}
	}
	pa, ok := c.Action()
	if !ok {
		return core.Proposal{Reply: route.Reply}
	}
	return core.Proposal{Reply: route.Reply, Actions: []core.ProposedAction{pa}}
}
