package engine

import "github.com/silas-gateway/silas/core"

// SetBeforeExecute installs a hook that runs after an execution is claimed
// and before its token is re-checked (tests use it to tamper with the row).
func (e *Engine) SetBeforeExecute(f func(id core.ApprovalID)) { e.beforeExecute = f }
