package execute

import (
	"context"
	"sync"

	"github.com/silas-gateway/silas/core"
)

// runs is the executor's registry of the runs in its sandbox, so a stopped
// task can kill its running executions (Executor.Stop). Only this process's
// runs are in it: a run belongs to the process that claimed it.
type runs struct {
	mu sync.Mutex
	m  map[core.ApprovalID]*runHandle
}

// runHandle is an execution in the sandbox that a stop may kill.
type runHandle struct {
	cancel  context.CancelFunc
	stopped bool
}

// Stop kills the running executions of a stopped task: each is recorded
// interrupted ("stopped with its task"), never re-run. Ids not running
// here are ignored.
func (x *Executor) Stop(ids []core.ApprovalID) {
	if len(ids) == 0 {
		return
	}
	x.runs.mu.Lock()
	defer x.runs.mu.Unlock()
	for _, id := range ids {
		if r, ok := x.runs.m[id]; ok {
			r.stopped = true
			r.cancel()
		}
	}
}

// track registers a run so Stop can kill it; stopped reports (after the
// run) whether it was killed that way, done unregisters it.
func (r *runs) track(ctx context.Context, id core.ApprovalID) (run context.Context, stopped func() bool, done func()) {
	ctx, cancel := context.WithCancel(ctx)
	h := &runHandle{cancel: cancel}
	r.mu.Lock()
	if r.m == nil {
		r.m = map[core.ApprovalID]*runHandle{}
	}
	r.m[id] = h
	r.mu.Unlock()
	stopped = func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return h.stopped
	}
	done = func() {
		r.mu.Lock()
		delete(r.m, id)
		r.mu.Unlock()
		cancel()
	}
	return ctx, stopped, done
}
