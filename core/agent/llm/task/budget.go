// Package task holds the runtime's side of an LLM task that needs no
// database: budgets and their enforcement, the recovery state machine
// (retry → consult planner → re-plan → escalate, seed 003 §19.0 and
// §19.5.3) and the eviction of long tool output (seed 000 §2.8). Every
// function here is pure so the runtime that persists tasks in PostgreSQL
// can call it inside a transaction and the table tests pin each transition.
//
// The model decides none of this: a plan may lower the configured limits
// but never raise them, a model's claim of success is not an event here
// (only the runtime's verification result is), and exhausting any budget
// stops the task.
package task

import (
	"fmt"
	"math"
	"time"

	"github.com/silas-gateway/silas/core/agent/llm/plan"
)

// Limits bound one task. Zero means no limit of that kind; the
// configuration (llm.budget.*) always sets tokens, model calls, tool calls
// and wall time.
type Limits struct {
	Tokens     int64
	ModelCalls int64
	ToolCalls  int64
	WallTime   time.Duration
	// CostUSD applies only when the endpoint reports prices.
	CostUSD float64
}

// Apply returns the limits with the plan's budget taken into account: each
// of the plan's values replaces the configured one only when it is
// smaller, so a model cannot buy itself more room.
func (l Limits) Apply(b plan.Budget) Limits {
	lower := func(cur, want int64) int64 {
		if want > 0 && (cur == 0 || want < cur) {
			return want
		}
		return cur
	}
	l.Tokens = lower(l.Tokens, b.MaxTokens)
	l.ModelCalls = lower(l.ModelCalls, b.MaxModelCalls)
	l.ToolCalls = lower(l.ToolCalls, b.MaxToolCalls)
	if b.MaxWallTimeSeconds > 0 {
		if w := time.Duration(b.MaxWallTimeSeconds) * time.Second; l.WallTime == 0 || w < l.WallTime {
			l.WallTime = w
		}
	}
	if b.MaxCostUSD > 0 && (l.CostUSD == 0 || b.MaxCostUSD < l.CostUSD) {
		l.CostUSD = b.MaxCostUSD
	}
	return l
}

// Spent is what a task has used so far.
type Spent struct {
	Tokens     int64
	ModelCalls int64
	ToolCalls  int64
	CostUSD    float64
	// CostKnown is false until an endpoint reported a price; a cost limit
	// is enforced only once prices are known.
	CostKnown bool
	Started   time.Time
}

// ModelCall records one model call's reported usage; cost < 0 means the
// endpoint reported no price.
func (s Spent) ModelCall(tokens int64, cost float64) Spent {
	s.ModelCalls++
	if tokens > 0 {
		s.Tokens += tokens
	}
	if cost >= 0 && !math.IsNaN(cost) && !math.IsInf(cost, 0) {
		s.CostUSD += cost
		s.CostKnown = true
	}
	return s
}

// ToolCall records one proposed tool call.
func (s Spent) ToolCall() Spent {
	s.ToolCalls++
	return s
}

// Exhausted returns a plain-language reason when any limit is reached
// (reaching a limit counts, seed 003 §5.2.1: ">=" ), or "" when the task
// may go on. It is asked before every model call and tool call.
func (s Spent) Exhausted(l Limits, now time.Time) string {
	switch {
	case l.Tokens > 0 && s.Tokens >= l.Tokens:
		return fmt.Sprintf("the task used its budget of %d tokens (%d used)", l.Tokens, s.Tokens)
	case l.ModelCalls > 0 && s.ModelCalls >= l.ModelCalls:
		return fmt.Sprintf("the task made the %d model calls its budget allows", l.ModelCalls)
	case l.ToolCalls > 0 && s.ToolCalls >= l.ToolCalls:
		return fmt.Sprintf("the task proposed the %d tool calls its budget allows", l.ToolCalls)
	case l.WallTime > 0 && !s.Started.IsZero() && now.Sub(s.Started) >= l.WallTime:
		return fmt.Sprintf("the task ran for its whole time budget of %s", l.WallTime)
	case l.CostUSD > 0 && s.CostKnown && s.CostUSD >= l.CostUSD:
		return fmt.Sprintf("the task spent its budget of $%.2f ($%.2f spent)", l.CostUSD, s.CostUSD)
	}
	return ""
}
