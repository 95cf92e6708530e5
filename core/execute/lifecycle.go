package execute

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/silas-gateway/silas/core"
)

// The executor owns the goroutines of its runs: Start and ResumeAll run
// them in the background on the executor's own context, Close waits for
// them at shutdown and cancels them once the grace period is over (a
// cancelled run is recorded nowhere new: the next start resumes it).

// background is the executor's running work.
type background struct {
	wg     sync.WaitGroup // the runs (not the idle goroutines)
	ctx    context.Context
	cancel context.CancelFunc
	// idle hands a run to a goroutine that finished one and waits for
	// the next (go); idlers counts them.
	idle   chan func()
	idlers atomic.Int32
}

// workerLinger is how long a goroutine that ran a run waits for the next.
const workerLinger = 5 * time.Second

// goRun runs f in the background, Close waiting for it: on a goroutine
// that finished a run and waits for the next when there is one, else on a
// new goroutine. An execution's goroutine grows its stack to the depth of
// the sandbox's and the store's calls (several copies of a growing stack
// per run on a fresh goroutine, ≈ 3–6 % of the gateway's CPU per
// execution in perf profiles of silas-load's taps); one that ran an
// execution before starts with that stack, until the collector shrinks it
// (at most a halving per cycle). Handing f over wakes that goroutine as
// starting a new one would.
func (x *Executor) goRun(f func()) {
	x.bg.wg.Add(1)
	select {
	case x.bg.idle <- f:
	default:
		go x.worker(f)
	}
}

// worker runs f, then the runs handed to it while it waits, until none
// came for workerLinger or the executor closed.
func (x *Executor) worker(f func()) {
	var linger *time.Timer
	for {
		f()
		x.bg.wg.Done()
		if linger == nil {
			linger = time.NewTimer(workerLinger)
		} else {
			linger.Reset(workerLinger)
		}
		x.bg.idlers.Add(1)
		select {
		case f = <-x.bg.idle:
			x.bg.idlers.Add(-1)
		case <-linger.C:
			x.bg.idlers.Add(-1)
			return
		case <-x.bg.ctx.Done():
			x.bg.idlers.Add(-1)
			return
		}
	}
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
	x.goRun(func() {
		if x.cfg.BeforeRun != nil {
			x.cfg.BeforeRun(id)
		}
		x.run1(x.bg.ctx, id, want)
	})
}

// ResumeAll settles the executions a previous process left unfinished
// (Resume) and starts in the background what is left to run or verify.
func (x *Executor) ResumeAll(ctx context.Context) error {
	work, err := x.Resume(ctx)
	if err != nil {
		return err
	}
	for _, f := range work {
		x.goRun(func() { f(x.bg.ctx) })
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
