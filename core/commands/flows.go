package commands

import (
	"context"
	"strings"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/store"
)

// flows answers /flows.
func (c *Table) flows(ctx context.Context, t Turn, _ string, out Out) error {
	if c.cfg.Flows == nil {
		out.Reply("Flows are not enabled on this gateway.")
		return nil
	}
	text, err := c.cfg.Flows.List(ctx, t.Turn.Conversation)
	if err != nil {
		return err
	}
	out.Reply("%s", text)
	return nil
}

// Signaller is the flow runtime's /flow signal (an event a run's wait
// waits for), apart from Flows so that a Flows without it still serves.
type Signaller interface {
	Signal(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, out core.TaskOut) error
}

// Steppers are the flow runtime's /flow skip and /flow done (a person's
// request to move a run past a step, decided by the flow execution gate).
type Steppers interface {
	Skip(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, out core.TaskOut) error
	Done(ctx context.Context, tx *store.Tx, st core.StoredTurn, trust core.Trust, arg string, out core.TaskOut) error
}

// flowUsage lists /flow's subcommands.
const flowUsage = "Usage: /flow run <name> [key=value…] | /flow status [run] | /flow stop <run> | /flow say <run> <text> | /flow signal <run> <event> [data] | /flow skip <run> <step> <reason> | /flow done <run> <step>. /flows lists the flows."

// flow answers /flow run|status|stop|say|signal|skip|done; all but status
// write inside the turn's transaction.
func (c *Table) flow(ctx context.Context, t Turn, arg string, out Out) error {
	if c.cfg.Flows == nil {
		out.Reply("Flows are not enabled on this gateway.")
		return nil
	}
	sub, rest, _ := strings.Cut(strings.TrimSpace(arg), " ")
	rest = strings.TrimSpace(rest)
	switch sub {
	case "run":
		out.Write(func(ctx context.Context, tx *store.Tx, out Out) error {
			return c.cfg.Flows.Run(ctx, tx, t.StoredTurn, t.Trust, rest, out)
		})
	case "stop":
		out.Write(func(ctx context.Context, tx *store.Tx, out Out) error {
			return c.cfg.Flows.Stop(ctx, tx, t.StoredTurn, t.Trust, rest, out)
		})
	case "say":
		out.Write(func(ctx context.Context, tx *store.Tx, out Out) error {
			return c.cfg.Flows.Say(ctx, tx, t.StoredTurn, t.Trust, rest, out)
		})
	case "signal":
		sig, ok := c.cfg.Flows.(Signaller)
		if !ok {
			out.Reply("This gateway's flows take no signals.")
			return nil
		}
		out.Write(func(ctx context.Context, tx *store.Tx, out Out) error {
			return sig.Signal(ctx, tx, t.StoredTurn, t.Trust, rest, out)
		})
	case "skip", "done":
		steps, ok := c.cfg.Flows.(Steppers)
		if !ok {
			out.Reply("This gateway's flows take no skip or done requests.")
			return nil
		}
		out.Write(func(ctx context.Context, tx *store.Tx, out Out) error {
			if sub == "skip" {
				return steps.Skip(ctx, tx, t.StoredTurn, t.Trust, rest, out)
			}
			return steps.Done(ctx, tx, t.StoredTurn, t.Trust, rest, out)
		})
	case "status":
		text, err := c.cfg.Flows.Status(ctx, t.Turn.Conversation, rest)
		if err != nil {
			return err
		}
		out.Reply("%s", text)
	default:
		out.Reply(flowUsage)
	}
	return nil
}
