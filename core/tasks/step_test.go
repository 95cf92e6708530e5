package tasks

import (
	"context"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/background/backgroundtest"
	"github.com/silas-gateway/silas/core/store"
)

// A task_step job queued in a transaction is worked by the background
// room and advances its task; a second job for the same
// task (a duplicate wake-up) changes nothing and asks the model nothing.
func TestStepJobAdvancesTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.Script(planReply("title: Say hi\nsteps: [Say hi]\n"), shellCall(`["echo","hi"]`))
	id := b.start(t, "say hi") // queues a step job, worked once the room starts
	backgroundtest.Start(t, b.st.Pool(), b.rt.Jobs)
	queue := func() {
		err := b.st.Do(context.Background(), func(_ context.Context, tx *store.Tx) ([]audit.Entry, error) {
			tx.QueueJob(StepArgs{Task: id}, StepOpts())
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	queue()
	waitProposed := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			b.actions.mu.Lock()
			n := len(b.actions.proposed)
			b.actions.mu.Unlock()
			if n == want && !b.rt.busy(id) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d proposals, want %d", n, want)
			}
		}
	}
	waitProposed(1)
	queue()
	for deadline := time.Now().Add(30 * time.Second); b.jobsLeft(t) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second step job was not worked")
		}
	}
	waitProposed(1)
	if n := len(b.fake.Requests()); n != 2 {
		t.Fatalf("%d model calls, want 2 (plan, step)", n)
	}
}

// busy says whether a step of task id runs in this process.
func (r *Runtime) busy(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.running[id]
	return ok
}

// jobsLeft counts task_step jobs not yet finished.
func (b *bundle) jobsLeft(t *testing.T) int {
	t.Helper()
	var n int
	err := b.st.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM river_job WHERE kind = $1 AND state NOT IN ('completed','discarded','cancelled')`, StepArgs{}.Kind()).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFlowToolAllowed(t *testing.T) {
	for _, tc := range []struct {
		tools []string
		tool  string
		want  bool
	}{
		{nil, "shell", true},
		{[]string{"shell"}, "shell", true},
		{[]string{"shell"}, "http_get", false},
		{[]string{"read_file"}, "mcp__files__delete", false},
		{[]string{"shell"}, "ask_user", true},
		{[]string{"shell"}, "read_output", true},
	} {
		if got := flowToolAllowed(core.Task{FlowTools: tc.tools}, tc.tool); got != tc.want {
			t.Errorf("tools %v, call %s: allowed = %v, want %v", tc.tools, tc.tool, got, tc.want)
		}
	}
}
