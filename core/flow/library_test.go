package flow

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLibrary(t *testing.T) {
	file := func(name, body string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte("name: " + name + "\nversion: \"1\"\nnodes:\n" + body)}
	}
	noop := "  - {id: a, type: control.noop}\n"
	shipped := fstest.MapFS{"a.yaml": file("alpha", noop), "b.yml": file("beta", noop), "notes.txt": {Data: []byte("x")}}
	mine := fstest.MapFS{
		"alpha.yaml": file("alpha", "  - {id: mine, type: control.noop}\n"),
		"sub.yaml":   file("caller", "  - {id: s, type: control.subflow, config: {flow: nowhere}}\n"),
		"dup1.yaml":  file("twice", noop),
		"dup2.yaml":  file("twice", noop),
		"self.yaml":  file("self", "  - {id: s, type: control.subflow, config: {flow: self}}\n"),
		"bad.yaml":   {Data: []byte("name: broken\n")},
	}
	lib, err := LoadLibrary([]Source{{Label: "configs/flows", FS: shipped}, {Label: "/data/flows", FS: mine}}, Options{})
	if err == nil {
		t.Fatal("no error for the broken files")
	}
	for _, want := range []string{
		`/data/flows/sub.yaml:4: nodes.s.config.flow: no flow named "nowhere"`,
		`/data/flows/dup2.yaml: name: flow "twice" is also defined in /data/flows/dup1.yaml`,
		"/data/flows/self.yaml: nodes: calls itself through subflows: self → self",
		"/data/flows/bad.yaml:1: version: missing",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
	if got := strings.Join(lib.Names(), ","); got != "alpha,beta,caller,self,twice" {
		t.Fatalf("names %s", got)
	}
	if lib.Flows["alpha"].Nodes[0].ID != "mine" || len(lib.Replaced) != 1 {
		t.Fatalf("flows.dir does not replace the example: %v", lib.Replaced)
	}
}

func TestRender(t *testing.T) {
	f, err := Parse("ok.yaml", []byte(okFlow), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var text, mm strings.Builder
	if err := WriteText(&text, f); err != nil {
		t.Fatal(err)
	}
	if err := WriteMermaid(&mm, f); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"restart-web (version 1)", "host             string  default \"web1\"",
		"restart          action.shell         (timeout 30s, retry 3× backoff 1s max 10s)", "check → rollback  when !nodes.check.condition"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	for _, want := range []string{"flowchart TD", `n_check{"check<br/>control.if"}`, `n_restart[["restart<br/>action.shell"]]`,
		`n_check -->|"!nodes.check.condition"| n_rollback`, "n_restart --> n_check"} {
		if !strings.Contains(mm.String(), want) {
			t.Errorf("mermaid lacks %q:\n%s", want, mm.String())
		}
	}
	if got := mermaidText(`a "b" <c> | #`); got != "a #quot;b#quot; #lt;c#gt; #124; #35;" {
		t.Errorf("escape %q", got)
	}
}
