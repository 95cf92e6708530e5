package execute

import (
	"context"
	"sync"

	"github.com/silas-gateway/silas/core"
)

// The executor owns the goroutines of its runs: Start and ResumeAll run
// them in the background on the executor's own context, Close waits for
// them at shutdown and cancels them once the grace period is over (a
// cancelled run is recorded nowhere new: the next start resumes it).

// background is the executor's running work.
type background struct {
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

// Start runs an approved execution in the background, once the
// transaction that queued it committed; Close waits for it.
func (x *Executor) Start(id core.ApprovalID) { x.start(id, expected{}) }

// StartApproved is Start for the request a the decision just approved (its
// token as recorded): the claim's gate reads the recorded decision of that
// token together with the approval row, one round trip instead of two.
func (x *Executor) StartApproved(a core.ApprovalRequest) { x.start(a.ID, expect(a)) }

func (x *Executor) start(id core.ApprovalID, want expected) {
	if x.cfg.Hold != nil && x.cfg.Hold(id) {
		return
	}
	x.bg.wg.Add(1)
	go func() {
		defer x.bg.wg.Done()
		if x.cfg.BeforeRun != nil {
			x.cfg.BeforeRun(id)
		}
		x.run1(x.bg.ctx, id, want)
	}()
}

// ResumeAll settles the executions a previous process left unfinished
// (Resume) and starts in the background what is left to run or verify.
func (x *Executor) ResumeAll(ctx context.Context) error {
	work, err := x.Resume(ctx)
	if err != nil {
		return err
	}
	for _, f := range work {
		x.bg.wg.Add(1)
		go func() { defer x.bg.wg.Done(); f(x.bg.ctx) }()
	}
	return nil
}

// Close waits for the background runs to finish; when grace ends first it
// cancels them (each stays resumable) and waits for them to return.
func (x *Executor) Close(grace context.Context) {
	done := make(chan struct{})
	go func() { x.bg.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-grace.Done():
		x.log.Warn("shutdown grace period over; cancelling running executions (they resume at next start)")
		x.bg.cancel()
		<-done
	}
	x.bg.cancel()
}
