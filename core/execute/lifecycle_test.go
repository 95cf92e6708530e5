package execute_test

import (
	"context"
	"testing"

	"github.com/silas-gateway/silas/core"
)

// Close waits for the runs Start began; once the grace period is over it
// cancels them, and a run cut short stays "running", which the next start
// marks interrupted instead of running it twice.
func TestCloseCancelsAfterGrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.decided(t, []string{"sleep", "60"})
	started := make(chan struct{})
	b.sb.untilCancelled = true
	b.sb.during = func() { close(started) }
	b.x.Start(id)
	<-started
	grace, over := context.WithCancel(context.Background())
	over()
	b.x.Close(grace) // returns only once the run returned
	if ex := b.execution(t, id); ex.Status != core.ExecRunning {
		t.Fatalf("execution after a cut-short run = %+v, want running (resumable)", ex)
	}
}

// A run Start began and that ends by itself is waited for, not cancelled.
func TestCloseWaitsForRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.decided(t, []string{"echo", "hi"})
	b.x.Start(id)
	b.x.Close(context.Background())
	if ex := b.execution(t, id); ex.Status != core.ExecVerified {
		t.Fatalf("execution = %+v, want verified", ex)
	}
}
