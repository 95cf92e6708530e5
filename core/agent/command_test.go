package agent

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/silas-gateway/silas/core"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string
	}{
		{"simple", "uname -a", []string{"uname", "-a"}, ""},
		{"spaces", "  echo   hi  ", []string{"echo", "hi"}, ""},
		{"single quotes", `echo 'a b' c`, []string{"echo", "a b", "c"}, ""},
		{"double quotes", `echo "a 'b' c"`, []string{"echo", "a 'b' c"}, ""},
		{"no expansion", `echo $HOME;id | wc`, []string{"echo", "$HOME;id", "|", "wc"}, ""},
		{"backslash", `echo a\ b`, []string{"echo", "a b"}, ""},
		{"backslash in double quotes", `echo "a\"b\n"`, []string{"echo", `a"b\n`}, ""},
		{"empty quoted arg", `echo ""`, []string{"echo", ""}, ""},
		{"unterminated", `echo 'a`, nil, "unterminated"},
		{"trailing backslash", `echo \`, nil, "trailing backslash"},
		{"empty", "   ", nil, "empty command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Split(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Split(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Split(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestRespond(t *testing.T) {
	p, err := Command{}.Respond(context.Background(), core.AgentInput{Text: "/run uname -a", Trust: core.TrustOwner})
	if err != nil || len(p.Actions) != 1 {
		t.Fatalf("Respond = %+v, %v", p, err)
	}
	a := p.Actions[0].Action
	if a.Tool != "shell" || !reflect.DeepEqual(a.Argv, []string{"uname", "-a"}) || len(a.Verify) != 1 || *a.Verify[0].Expect.ExitCode != 0 {
		t.Fatalf("action = %+v", a)
	}
	if p.Actions[0].Intent != "Run uname -a" {
		t.Fatalf("intent = %q", p.Actions[0].Intent)
	}
	p, _ = Command{}.Respond(context.Background(), core.AgentInput{Text: "hello"})
	if len(p.Actions) != 0 || p.Reply == "" {
		t.Fatalf("free text = %+v", p)
	}
}

func FuzzSplit(f *testing.F) {
	for _, s := range []string{"uname -a", `echo 'a b' "c\"d" e\ f`, `$(rm -rf /)`, "'", `\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args, err := Split(s)
		if err != nil {
			return
		}
		if len(args) == 0 {
			t.Fatalf("Split(%q) returned no args and no error", s)
		}
		// Quoting each arg and splitting again must give the same argv.
		a := core.Action{Argv: args}
		again, err := Split(a.CommandLine())
		if err != nil || !reflect.DeepEqual(again, args) {
			t.Fatalf("round trip of %q: %q → %q → %q (%v)", s, args, a.CommandLine(), again, err)
		}
	})
}
