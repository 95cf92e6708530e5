package policy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

func TestSplitScript(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   [][]string
	}{
		{"one", "rm -rf /", [][]string{{"rm", "-rf", "/"}}},
		{"separators", "a; b & c | d && e || f\ng", [][]string{{"a"}, {"b"}, {"c"}, {"d"}, {"e"}, {"f"}, {"g"}}},
		{"quotes", `echo 'a b' "c \"d\" $x" e\ f`, [][]string{{"echo", "a b", `c "d" $x`, "e f"}}},
		{"quoted separators stay", `echo 'a;b' "c|d"`, [][]string{{"echo", "a;b", "c|d"}}},
		{"line continuation", "rm -rf \\\n/", [][]string{{"rm", "-rf", "/"}}},
		{"substitution", "echo $(rm -rf /) x", [][]string{{"rm", "-rf", "/"}, {"echo", "$(rm -rf /)", "x"}}},
		{"nested substitution", "a $(b $(c))", [][]string{{"c"}, {"b", "$(c)"}, {"a", "$(b $(c))"}}},
		{"backticks", "a `b`", [][]string{{"b"}, {"a", "`b`"}}},
		{"substitution in double quotes", `a "x $(b) y"`, [][]string{{"b"}, {"a", "x $(b) y"}}},
		{"braces variable", "echo ${HOME}/x", [][]string{{"echo", "${HOME}/x"}}},
		{"function", "f(){ f|f& };f", [][]string{{"f"}, {"f"}, {"f"}, {"f"}}},
		{"group", "{ rm -rf /; }", [][]string{{"rm", "-rf", "/"}}},
		{"comment", "ls # rm -rf /\npwd", [][]string{{"ls"}, {"pwd"}}},
		{"hash inside a word", "echo a#b", [][]string{{"echo", "a#b"}}},
		{"redirections", "cat x >/dev/sda 2>>log <in", [][]string{{"cat", "x", ">", "/dev/sda", "2", ">>", "log", "<", "in"}}},
		{"&> redirection", "cat x &>/dev/sda", [][]string{{"cat", "x", "&>", "/dev/sda"}}},
		{"unterminated quote", "echo 'abc", [][]string{{"echo", "abc"}}},
		{"unterminated substitution", "echo $(rm -rf /", [][]string{{"rm", "-rf", "/"}, {"echo", "$(rm -rf /"}}},
		{"trailing backslash", `echo \`, [][]string{{"echo", `\`}}},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := splitScript(tt.script)
			if !ok || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("splitScript(%q) = %q, %v; want %q", tt.script, got, ok, tt.want)
			}
		})
	}
}

func TestSplitWords(t *testing.T) {
	got := splitWords("rm  -rf\t'/a b' \"$(x)\"\n;")
	want := []string{"rm", "-rf", "/a b", "$(x)", ";"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("splitWords = %q, want %q", got, want)
	}
}

func TestCommandWords(t *testing.T) {
	got := commandWords([]string{"then", "!", "A=1", "B_2=x", "rm", "C=3"})
	if want := []string{"rm", "C=3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("commandWords = %q, want %q", got, want)
	}
}

// FuzzSplitScript: the lexer reads outside input (agent-proposed scripts);
// it must terminate without panicking and never invent empty commands.
func FuzzSplitScript(f *testing.F) {
	for _, s := range []string{"rm -rf /", "f(){ f|f& };f", `a "$(b 'c' "$(d)")" e`, "echo `x` ${y} $((1+2))", "cat <<EOF\nrm -rf /\nEOF",
		"a\\", "'", `"`, "$(", "`", "${", "&>>", "#", "x>|y", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cmds, _ := splitScript(s)
		for _, c := range cmds {
			if len(c) == 0 {
				t.Fatalf("empty command from %q", s)
			}
		}
		_ = splitWords(s)
	})
}

// FuzzEvaluate: Evaluate judges agent-proposed argv; it must not panic,
// must return a valid decision and risk, and must never rate a shell
// script, a wrapper or an unknown program low.
func FuzzEvaluate(f *testing.F) {
	for _, s := range []string{"rm -rf /", "env X=1 uname", "cat /srv/silas/.data/keys/gateway.key", "f(){ f|f& };f",
		"find / -exec rm {} +", "sudo -u x sh -c 'kill -9 -1'", "date -s now", "sort -o x"} {
		f.Add(s)
	}
	p, err := Build(Config{ProtectedPaths: []string{dataDir}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		argv := strings.Fields(s)
		if len(argv) == 0 {
			return
		}
		check := func(argv []string, floor cards.Risk) {
			r := p.Evaluate(core.Action{Tool: "shell", Argv: argv})
			switch r.Decision {
			case AuthRequired:
				if r.Risk.Rank() < floor.Rank() {
					t.Fatalf("Evaluate(%q) = %s, want at least %s", argv, r.Risk, floor)
				}
			case Blocked:
				if r.Reason == "" {
					t.Fatalf("Evaluate(%q) blocked without a reason", argv)
				}
			default:
				t.Fatalf("Evaluate(%q) decision %q", argv, r.Decision)
			}
			if !r.Risk.Valid() {
				t.Fatalf("Evaluate(%q) risk %q", argv, r.Risk)
			}
		}
		check(argv, cards.RiskLow)
		check([]string{"sh", "-c", s}, cards.RiskHigh)
		check(append([]string{"env"}, argv...), cards.RiskMedium)
		check(append([]string{"frobnicate"}, argv...), cards.RiskHigh)
	})
}
