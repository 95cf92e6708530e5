package engine

import "github.com/silas-gateway/silas/core"

// SetBeforeExecute installs a hook that runs after a decision committed and
// before its execution is claimed, where the gate checks the row (tests use
// it to tamper with the row). After the claim the executor runs the row it
// checked, carried as a value: a later edit of the row changes nothing.
func (e *Engine) SetBeforeExecute(f func(id core.ApprovalID)) { e.beforeExecute = f }

// SetHoldExecution installs a hook that, returning true, keeps a freshly
// approved execution queued instead of starting it — as if the process
// stopped right after the decision committed.
func (e *Engine) SetHoldExecution(f func(id core.ApprovalID) bool) { e.holdExecution = f }

// Idle reports whether conv has nothing queued or running, so that its
// next turn may be answered inline.
func (e *Engine) Idle(conv core.ConversationID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, busy := e.queues[conv]
	return !busy
}
