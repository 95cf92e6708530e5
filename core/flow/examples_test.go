package flow

import (
	"os"
	"testing"
)

// The shipped examples load, and run to the end on the state machine with
// a scripted runtime (gates answered, actions succeeding or failing).
func TestExamples(t *testing.T) {
	lib, err := LoadLibrary([]Source{{Label: "configs/flows", FS: os.DirFS("../../configs/flows")}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(lib.Flows) < 3 {
		t.Fatalf("%d examples", len(lib.Flows))
	}
	for _, tc := range []struct {
		name, flow string
		script     map[string][]outcome
		want       string
		run        RunStatus
	}{
		{name: "restart healthy", flow: "restart-web",
			script: map[string][]outcome{"confirm": {ok(`{"response":{"content":"restart","choice":"restart"}}`)}, "health": {ok(`{"status":200}`)}},
			want:   "confirm=succeeded restart=succeeded health=succeeded rollback=skipped report=succeeded", run: RunSucceeded},
		{name: "restart unhealthy rolls back", flow: "restart-web",
			script: map[string][]outcome{"confirm": {ok(`{"response":{"content":"restart","choice":"restart"}}`)}, "health": {bad("status")}},
			want:   "confirm=succeeded restart=succeeded health=failed rollback=succeeded report=skipped", run: RunSucceeded},
		{name: "restart cancelled at the gate", flow: "restart-web",
			script: map[string][]outcome{"confirm": {ok(`{"response":{"content":"cancel","choice":"cancel"}}`)}},
			want:   "confirm=succeeded restart=skipped health=skipped rollback=skipped report=skipped", run: RunSucceeded},
		{name: "disk full and cleaned", flow: "disk-cleanup",
			script: map[string][]outcome{"usage": {ok(`{"exit_code":0,"stdout":"91\n"}`)}, "biggest": {ok(`{"stdout":"1G a.gz"}`)}, "ask": {ok(`{"response":{"choice":"clean"}}`)}},
			want:   "usage=succeeded biggest=succeeded full=succeeded ask=succeeded clean=succeeded fine=skipped", run: RunSucceeded},
		{name: "disk fine", flow: "disk-cleanup",
			script: map[string][]outcome{"usage": {ok(`{"exit_code":0,"stdout":"12"}`)}},
			want:   "usage=succeeded biggest=succeeded full=succeeded ask=skipped clean=skipped fine=succeeded", run: RunSucceeded},
		{name: "comes up on the third try", flow: "wait-healthy",
			script: map[string][]outcome{"probe": {bad("status"), bad("status"), ok(`{"status":200}`)}},
			want:   "poll=succeeded probe=succeeded pause=skipped up=succeeded down=skipped", run: RunSucceeded},
		{name: "never comes up", flow: "wait-healthy",
			script: map[string][]outcome{"probe": {bad("status")}},
			want:   "poll=succeeded probe=failed pause=succeeded up=skipped down=failed", run: RunFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := lib.Flows[tc.flow]
			if f == nil {
				t.Fatalf("no example %s", tc.flow)
			}
			s := &sim{t: t, m: NewMachine(f), f: f, script: tc.script, started: map[string]bool{}, starts: map[string]int{}}
			r := s.run(nil, 4)
			if got := s.statuses(); got != tc.want || r.Status != tc.run {
				t.Fatalf("got %s (%s)\nwant %s (%s)\n%s", got, r.Status, tc.want, tc.run, s.dump())
			}
		})
	}
}
