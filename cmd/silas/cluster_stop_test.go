package main

import (
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core/agent/llm/llmtest"
	"github.com/silas-gateway/silas/internal/storetest"
)

// TestClusterStopAcrossInstances: a task's action runs on instance A
// (approved through A's page, so A claimed the execution); /stop arrives
// through B's page and B processes it. The run is killed on A — an
// execution belongs to the process that claimed it, so B's stop reaches A
// over LISTEN/NOTIFY — and recorded interrupted ("stopped with its task"),
// not left running to its end.
func TestClusterStopAcrossInstances(t *testing.T) {
	t.Parallel()
	const key = "sk-e2e-stop-key"
	fake := llmtest.New(t, key, "e2e-model")
	dsn := storetest.NewDatabase(t)
	// Not a failover test: with the cluster tests' 3 s lease, a loaded
	// machine (make test under -race) can delay A's heartbeat past it, and
	// B then takes A's running execution over as interrupted, as designed
	// — the task's model is told and asked again (an unscripted request),
	// before the /stop this test is about. A lease no load lapses keeps
	// this test on what it checks; the takeover has tests of its own.
	env := append(llmEnv(t, fake, key), "SILAS_CLUSTER_LEASE_TTL=60s", "SILAS_CLUSTER_HEARTBEAT_INTERVAL=1s")
	servers := startCluster(t, dsn, 2, env...)
	a, b := servers[0], servers[1]
	ca, cb := a.connect(t), b.connect(t)
	fake.Script(
		llmToolCall("plan_task", `{"goal":"wait a long time"}`),
		llmPlan("Wait a long time", "Sleep for ten minutes", a.dataDir),
		llmToolCall("shell", `{"argv":["sleep","600"],"intent":"Sleep for ten minutes"}`),
	)
	ca.say("wait a long time")
	step := ca.cardFor("sleep 600", cards.StatusPending)
	ca.tap(string(step.ID), "approve")
	f := ca.expect("the step approved", func(f map[string]any) bool {
		d := card(f)
		return d != nil && d.ID == step.ID && (d.Status == cards.StatusConfirming || d.Status == cards.StatusRunning)
	})
	if card(f).Status == cards.StatusConfirming {
		ca.tap(string(step.ID), "confirm")
	}
	waitFor(t, "the sleep to run on A", func() bool {
		return dbCount(t, dsn, `SELECT count(*) FROM executions WHERE approval_id = $1 AND status = 'running'`, string(step.ID)) == 1
	})
	cb.say("/stop")
	waitForOr(t, "the run on A killed by B's /stop", func() { dumpCluster(t, dsn, servers) }, func() bool {
		return dbCount(t, dsn, `SELECT count(*) FROM executions WHERE approval_id = $1 AND status = 'interrupted'`, string(step.ID)) == 1
	})
	cb.cardStatus(step.ID, cards.StatusInterrupted)
	if n := dbCount(t, dsn, `SELECT count(*) FROM tasks WHERE state = 'stopped'`); n != 1 {
		t.Errorf("stopped tasks = %d, want 1", n)
	}
	if n := dbCount(t, dsn, `SELECT count(*) FROM executions WHERE approval_id = $1 AND started_at IS NOT NULL`, string(step.ID)); n != 1 {
		t.Errorf("the step has %d starts, want 1", n)
	}
}
