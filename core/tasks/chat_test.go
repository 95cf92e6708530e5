package tasks

import (
	"testing"

	"github.com/silas-gateway/silas/core"
)

func TestTaskTitle(t *testing.T) {
	tests := []struct {
		name string
		k    core.Task
		want string
	}{
		{name: "no plan: the goal", k: core.Task{Goal: "  tidy the disk  "}, want: "tidy the disk"},
		{name: "plan title", k: core.Task{Goal: "g", Plan: "---\ntitle: \"Free space\"\nsteps: [a]\n---\n"}, want: "Free space"},
		{name: "empty plan title: the goal", k: core.Task{Goal: "g", Plan: "title: ''\n"}, want: "g"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := taskTitle(tc.k); got != tc.want {
				t.Fatalf("taskTitle = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMayCommandTask(t *testing.T) {
	k := core.Task{Requester: "tg:1"}
	tests := []struct {
		name  string
		who   core.IdentityID
		trust core.Trust
		want  bool
	}{
		{name: "requester", who: "tg:1", trust: core.TrustAuth, want: true},
		{name: "owner", who: "tg:2", trust: core.TrustOwner, want: true},
		{name: "someone else", who: "tg:2", trust: core.TrustAuth, want: false},
		{name: "requester without trust", who: "tg:1", trust: core.TrustExternal, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mayCommandTask(k, tc.who, tc.trust); got != tc.want {
				t.Fatalf("mayCommandTask = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVerifyReportSummary(t *testing.T) {
	tests := []struct {
		name   string
		r      verifyReport
		want   string
		passed bool
	}{
		{name: "no checks never pass", r: verifyReport{}, want: "no checks", passed: false},
		{name: "all pass", r: verifyReport{results: []verifyLine{{name: "a", passed: true}}}, want: "a ✓", passed: true},
		{name: "one fails", r: verifyReport{results: []verifyLine{{name: "a", passed: true}, {name: "b", reason: "exit 1"}}},
			want: "a ✓; b ✗ (exit 1)", passed: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.r.summary()
			if got != tc.want || ok != tc.passed {
				t.Fatalf("summary = %q, %v; want %q, %v", got, ok, tc.want, tc.passed)
			}
		})
	}
}
