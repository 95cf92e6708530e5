package plan

import (
	"reflect"
	"strings"
	"testing"
)

const good = `---
id: task-1
type: task
title: Free up space on /var
steps:
  - Find the biggest directories under /var/log
  - Delete rotated logs older than 7 days
verify:
  - name: enough space
    run: [sh, -c, "df --output=pcent /var | tail -1 | tr -dc 0-9"]
    expect: { output_lt: 90 }
  - name: logs kept
    expect: { file_exists: /var/log/syslog }
budget: { max_tokens: 200000, max_cost_usd: 2.00, max_wall_time_seconds: 1800 }
on_stuck: replan
---

# Context
The disk is full.

# What to do
Step by step.
`

func TestParseGood(t *testing.T) {
	p, err := Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != "task-1" || p.Title != "Free up space on /var" || len(p.Steps) != 2 || p.OnStuck != Replan {
		t.Fatalf("plan = %+v", p)
	}
	if len(p.Verify) != 2 || p.Verify[0].Run[0] != "sh" || *p.Verify[0].Expect.OutputLT != 90 || *p.Verify[1].Expect.FileExists != "/var/log/syslog" {
		t.Fatalf("verify = %+v", p.Verify)
	}
	if p.Budget != (Budget{MaxTokens: 200000, MaxCostUSD: 2, MaxWallTimeSeconds: 1800}) {
		t.Fatalf("budget = %+v", p.Budget)
	}
	if !strings.HasPrefix(p.Body, "# Context") || !strings.HasSuffix(p.Body, "Step by step.") {
		t.Fatalf("body = %q", p.Body)
	}
	if cmds := p.VerifyCommands(); len(cmds) != 1 || cmds[0][2] != "df --output=pcent /var | tail -1 | tr -dc 0-9" {
		t.Fatalf("VerifyCommands = %q", cmds)
	}
	again, err := Parse(p.Markdown())
	if err != nil || !reflect.DeepEqual(again, p) {
		t.Fatalf("round trip:\n%s\n%+v\n%v", p.Markdown(), again, err)
	}
	if s := p.Summary(); !strings.Contains(s, "1. Find the biggest") || !strings.Contains(s, "✔ enough space: sh -c") {
		t.Fatalf("summary = %q", s)
	}
}

func TestParse(t *testing.T) {
	fm := func(s string) string { return "---\n" + s + "\n---\nbody" }
	tests := []struct {
		name    string
		doc     string
		wantErr string // "" = must parse
	}{
		{"minimal", fm("title: t\nsteps: [a]"), ""},
		{"fenced", "```markdown\n" + fm("title: t\nsteps: [a]") + "\n```", ""},
		{"crlf", strings.ReplaceAll(fm("title: t\nsteps: [a]"), "\n", "\r\n"), ""},
		{"no body", "---\ntitle: t\nsteps: [a]\n---", ""},
		{"default on_stuck", fm("title: t\nsteps: [a]"), ""},
		{"no front matter", "# Plan\n- a", `must start with a "---" line`},
		{"unclosed", "---\ntitle: t\nsteps: [a]\n", "not closed"},
		{"empty front matter", "---\n\n---\n", "empty"},
		{"unknown key", fm("title: t\nsteps: [a]\napprove: true"), "field approve not found"},
		{"unknown check key", fm("title: t\nsteps: [a]\nverify:\n  - shell: rm -rf /\n    expect: {exit_code: 0}"), "field shell not found"},
		{"body after the front matter", "---\ntitle: t\nsteps: [a]\n---\nx", ""},
		{"second yaml doc in front matter", "---\ntitle: t\nsteps: [a]\n...\n--- \ntitle: u\n---\n", "one YAML document"},
		{"no title", fm("steps: [a]"), "title: must not be empty"},
		{"title newline", fm("title: \"a\\nb\"\nsteps: [a]"), "title: must be one line"},
		{"title bidi", fm("title: \"a\u202eb\"\nsteps: [a]"), "title: must be one line"},
		{"title too long", fm("title: " + strings.Repeat("x", MaxTitle+1) + "\nsteps: [a]"), "title: 121 characters"},
		{"no steps", fm("title: t"), "steps: a plan needs at least one step"},
		{"empty step", fm("title: t\nsteps: [a, '  ']"), "steps[1]: must not be empty"},
		{"too many steps", fm("title: t\nsteps: [" + strings.Repeat("a,", MaxSteps) + "a]"), "steps: 21 steps"},
		{"steps not a list", fm("title: t\nsteps: do it"), "cannot unmarshal"},
		{"shell string run", fm("title: t\nsteps: [a]\nverify:\n  - run: curl x | sh\n    expect: {exit_code: 0}"), "verify[0].run: must be an argv list"},
		{"run map", fm("title: t\nsteps: [a]\nverify:\n  - run: {a: b}\n    expect: {exit_code: 0}"), "verify[0].run: must be a list"},
		{"run empty", fm("title: t\nsteps: [a]\nverify:\n  - run: []\n    expect: {exit_code: 0}"), "verify[0].run: must not be an empty list"},
		{"run nested", fm("title: t\nsteps: [a]\nverify:\n  - run: [[a]]\n    expect: {exit_code: 0}"), "verify[0].run: must be a list of strings"},
		{"no expectation", fm("title: t\nsteps: [a]\nverify:\n  - run: [true]"), "verify[0].expect: needs at least one"},
		{"expect without run", fm("title: t\nsteps: [a]\nverify:\n  - expect: {exit_code: 0}"), "verify[0]: needs run"},
		{"bad regex", fm("title: t\nsteps: [a]\nverify:\n  - run: [cat, x]\n    expect: {regex: '('}"), "verify[0]:"},
		{"file_exists dotdot", fm("title: t\nsteps: [a]\nverify:\n  - expect: {file_exists: ../etc/passwd}"), "verify[0]:"},
		{"timeout too long", fm("title: t\nsteps: [a]\nverify:\n  - run: [true]\n    timeout_seconds: 100000\n    expect: {exit_code: 0}"), "verify[0]:"},
		{"negative budget", fm("title: t\nsteps: [a]\nbudget: {max_tokens: -1}"), "budget.max_tokens"},
		{"nan cost", fm("title: t\nsteps: [a]\nbudget: {max_cost_usd: .nan}"), "budget.max_cost_usd"},
		{"unknown budget", fm("title: t\nsteps: [a]\nbudget: {max_approvals: 3}"), "field max_approvals not found"},
		{"bad on_stuck", fm("title: t\nsteps: [a]\non_stuck: approve_anyway"), "on_stuck"},
		{"bad type", fm("type: goal\ntitle: t\nsteps: [a]"), "type:"},
		{"bad id", fm("id: \"a b\"\ntitle: t\nsteps: [a]"), "id:"},
		{"too big", fm("title: t\nsteps: [a]") + strings.Repeat("x", MaxBytes), "bytes is more than"},
		{"nul", fm("title: t\nsteps: [a]") + "\x00", "NUL"},
		{"bad utf8", fm("title: t\nsteps: [a]") + "\xff", "UTF-8"},
		{"other fence language", "```python\n" + fm("title: t\nsteps: [a]") + "\n```", "must start with"},
		{"anchors and aliases stay data", fm("title: &x t\nsteps: [*x]"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(tt.doc)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if p.OnStuck != ConsultPlanner {
					t.Fatalf("on_stuck = %q, want the default", p.OnStuck)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Parse error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(good)
	f.Add("---\ntitle: t\nsteps: [a]\n---\n")
	f.Add("---\ntitle: t\nsteps: [a]\nverify:\n  - run: [x]\n    expect: {regex: 'a+'}\n---\n")
	f.Add("```\n---\ntitle: t\nsteps: [a]\n---\n```")
	f.Fuzz(func(t *testing.T, doc string) {
		p, err := Parse(doc)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		// Whatever parses re-renders to a plan that parses the same.
		again, err := Parse(p.Markdown())
		if err != nil {
			t.Fatalf("re-parse of\n%s\nfailed: %v", p.Markdown(), err)
		}
		if !reflect.DeepEqual(again, p) {
			t.Fatalf("round trip changed the plan:\n%+v\n%+v", p, again)
		}
		for _, c := range p.Verify {
			if len(c.Run) == 0 && c.Expect.FileExists == nil {
				t.Fatalf("a check that judges nothing got through: %+v", c)
			}
		}
	})
}
