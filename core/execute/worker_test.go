package execute_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/execute"
)

// goid is the current goroutine's id, from its stack trace's header.
func goid() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return strings.Fields(string(b))[1]
}

// TestRunsReuseAnIdleGoroutine: a run started while a goroutine that ran
// one waits for the next runs on it (its stack already grown), not on a
// new one; Close still waits for the runs, and the waiting goroutines end
// with the executor.
func TestRunsReuseAnIdleGoroutine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var on []string
	b.sb.during = func() {
		mu.Lock()
		on = append(on, goid())
		mu.Unlock()
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	for i, argv := range [][]string{{"echo", "one"}, {"echo", "two"}} {
		id := b.decided(t, argv)
		b.x.Start(id)
		waitFor("the run's verdict", func() bool { return b.execution(t, id).Status == core.ExecVerified })
		waitFor("an idle goroutine", func() bool { return execute.IdleRunners(b.x) == 1 })
		mu.Lock()
		if len(on) != i+1 {
			t.Fatalf("%d runs, want %d", len(on), i+1)
		}
		mu.Unlock()
	}
	if on[0] != on[1] {
		t.Errorf("the second run ran on goroutine %s, the first on %s: want the first's, which waited", on[1], on[0])
	}
	b.x.Close(context.Background())
	waitFor("the idle goroutine to end", func() bool { return execute.IdleRunners(b.x) == 0 })
}
