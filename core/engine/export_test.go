package engine

import "github.com/silas-gateway/silas/core"

// SetBeforeExecute installs a hook that runs after an execution is claimed
// and before its token is re-checked (tests use it to tamper with the row).
func (e *Engine) SetBeforeExecute(f func(id core.ApprovalID)) { e.beforeExecute = f }

// SetHoldExecution installs a hook that, returning true, keeps a freshly
// approved execution queued instead of starting it — as if the process
// stopped right after the decision committed.
func (e *Engine) SetHoldExecution(f func(id core.ApprovalID) bool) { e.holdExecution = f }
