package store

import "github.com/silas-gateway/silas/core"

// The domain records moved to package core, which owns them (the store
// only reads and writes them). These aliases keep callers that still name
// them through the store compiling while those callers are being reshaped;
// the lead removes them with one rewrite once nothing names them here.
type (
	// Deprecated: use core.AccessRequest.
	AccessRequest = core.AccessRequest
	// Deprecated: use core.Binding.
	Binding = core.Binding
	// Deprecated: use core.Decision.
	Decision = core.Decision
	// Deprecated: use core.ExecUpdate.
	ExecUpdate = core.ExecUpdate
	// Deprecated: use core.Task.
	Task = core.Task
	// Deprecated: use core.TaskCall.
	TaskCall = core.TaskCall
	// Deprecated: use core.TaskAttempt.
	TaskAttempt = core.TaskAttempt
	// Deprecated: use core.DeadLetter.
	DeadLetter = core.DeadLetter
	// Deprecated: use core.DirectConversation.
	DirectConversation = core.DirectConversation
)
