package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlowCommands(t *testing.T) {
	dir := t.TempDir()
	mine := "name: mine\nversion: \"2\"\ndescription: my own\nnodes:\n  - {id: hello, type: system.log, config: {message: hi}}\n"
	if err := os.WriteFile(filepath.Join(dir, "mine.yaml"), []byte(mine), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: bad\nversion: \"1\"\nnodes:\n  - {id: a, type: control.noop}\nedges:\n  - {from: a, to: nowhere}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Glob("../../configs/flows/*.yaml")
	if err != nil || len(examples) < 3 {
		t.Fatalf("examples %v %v", examples, err)
	}
	t.Setenv("SILAS_FLOWS_DIR", dir)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"validate the shipped examples", append([]string{"flow", "validate"}, examples...), 0, []string{"restart-web.yaml: ok (restart-web version 1", "disk-cleanup.yaml: ok", "wait-healthy.yaml: ok"}},
		{"validate names file, line and field", []string{"flow", "validate", examples[0], bad}, 1, []string{bad + `:6: edges[0].to: no node "nowhere" (dangling edge)`, "1 of 2 flow files have problems"}},
		{"validate without files", []string{"flow", "validate"}, 2, []string{"Usage: silas flow validate"}},
		{"list shows examples and flows.dir", []string{"flow", "list"}, 0, []string{"restart-web", "disk-cleanup", "wait-healthy", "mine          2        1", "my own"}},
		{"show as text", []string{"flow", "show", "restart-web"}, 0, []string{"restart-web (version 1)", "health → rollback  when has(nodes.health.failed)"}},
		{"show as mermaid", []string{"flow", "show", "--format", "mermaid", "mine"}, 0, []string{"flowchart TD", `n_hello["hello<br/>system.log"]`}},
		{"show unknown", []string{"flow", "show", "nope"}, 1, []string{`no flow named "nope"`}},
		{"config check bounds flows.max_parallel", []string{"config", "check"}, 1, []string{"flows.max_parallel: 0 is outside 1…64"}},
		{"run needs a flow name", []string{"flow", "run"}, 2, []string{"Usage: silas flow run"}},
		{"agent.run needs a model", []string{"flow", "validate", writeFlow(t, "name: ag\nversion: \"1\"\nnodes:\n  - {id: a, type: agent.run, config: {goal: fix}}\n")}, 1, []string{"agent.run needs a model"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.args[0] == "config" {
				t.Setenv("SILAS_FLOWS_MAX_PARALLEL", "0")
			}
			var out, errOut bytes.Buffer
			code := run(context.Background(), tc.args, &out, &errOut)
			all := out.String() + errOut.String()
			if code != tc.code {
				t.Fatalf("run(%q) = %d, want %d:\n%s", tc.args, code, tc.code, all)
			}
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("output lacks %q:\n%s", w, all)
				}
			}
		})
	}
}

func writeFlow(t *testing.T, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
