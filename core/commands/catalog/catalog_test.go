package catalog

import (
	"regexp"
	"testing"
	"unicode/utf8"
)

func TestBare(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"run uname -a", "/run uname -a"},
		{"  run uname -a", "/run uname -a"},
		{"Run  uname -a ", "/run uname -a"},
		{"run\nuname -a", "/run uname -a"},
		{"run", "/run"},
		{"stop", "/stop"},
		{"STOP", "/stop"},
		{"stop t-123", "/stop t-123"},
		{"stop the nginx service", "stop the nginx service"},
		{"tasks", "/tasks"},
		{"tasks please", "tasks please"},
		{"help", "/help"},
		{"help me find the logs", "help me find the logs"},
		{"audit 5", "/audit 5"},
		{"secret GITHUB_TOKEN", "/secret GITHUB_TOKEN"},
		{"secret delete GITHUB_TOKEN", "/secret delete GITHUB_TOKEN"},
		{"pair ABC123", "/pair ABC123"},
		{"running late", "running late"},
		{"/run ls", "/run ls"},
		{"  hello  ", "  hello  "},
		{"", ""},
	}
	for _, tt := range tests {
		if got := Text(tt.in); got != tt.want {
			t.Errorf("Text(%q) = %q; want %q", tt.in, got, tt.want)
		}
		if cmd, ok := Bare(tt.in); ok != (tt.want != tt.in) || (ok && cmd != tt.want) {
			t.Errorf("Bare(%q) = %q, %v", tt.in, cmd, ok)
		}
	}
}

func TestNamed(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", "/help"},
		{"stop", "/stop"},
		{"help me", "/help me"},
		{"run uname -a", "/run uname -a"},
		{"/run ls", "/run ls"},
		{"how much disk is free?", "how much disk is free?"},
	}
	for _, tt := range tests {
		if got := Named(tt.in); got != tt.want {
			t.Errorf("Named(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

// TestShapes: every entry fits every platform that lists it natively
// (Discord: names and option names 1-32 lower-case characters,
// descriptions 1-100 characters, required options first).
func TestShapes(t *testing.T) {
	t.Parallel()
	name := regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	seen := map[string]bool{}
	for _, c := range All() {
		if !name.MatchString(c.Name) || seen[c.Name] {
			t.Errorf("command name %q is not a unique lower-case word", c.Name)
		}
		seen[c.Name] = true
		if n := utf8.RuneCountInString(c.Description); n < 1 || n > 100 {
			t.Errorf("%s: description of %d characters", c.Name, n)
		}
		optional := false
		for _, a := range c.Args {
			if !name.MatchString(a.Name) || a.Description == "" || utf8.RuneCountInString(a.Description) > 100 {
				t.Errorf("%s: argument %+v", c.Name, a)
			}
			if a.Required && optional {
				t.Errorf("%s: required argument %s after an optional one", c.Name, a.Name)
			}
			optional = optional || !a.Required
		}
	}
	for _, want := range []string{"run", "tasks", "stop", "pending", "audit", "whoami", "secret", "pair", "help"} {
		if c, ok := Lookup(want); !ok || !c.Menu {
			t.Errorf("%s is not in the menu", want)
		}
	}
}
