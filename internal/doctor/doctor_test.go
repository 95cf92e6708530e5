package doctor

import (
	"strings"
	"testing"
)

// Print keeps the lines docs/operations.md and the tests quote: the mark,
// the check padded to its column (at least two spaces after a long one),
// the message, details indented under it; only errors count.
func TestPrint(t *testing.T) {
	tests := []struct {
		name string
		fs   []Finding
		want string
		errs int
	}{
		{"padded", []Finding{{Severity: OK, Check: "database", Message: "fine"}}, "  ✓ database     fine\n", 0},
		{"one short of the column", []Finding{{Severity: Info, Check: "jobs leader", Message: "none elected"}}, "  · jobs leader  none elected\n", 0},
		{"as long as the column", []Finding{{Severity: OK, Check: "dead letters", Message: "none"}}, "  ✓ dead letters  none\n", 0},
		{"longer", []Finding{{Severity: Warn, Check: "tools a-long-model", Message: "text"}}, "  ! tools a-long-model  text\n", 0},
		{"no check", []Finding{{Severity: OK, Message: "runs as uid 65534"}}, "  ✓ runs as uid 65534\n", 0},
		{"details", []Finding{{Severity: Warn, Check: "dead letters", Message: "2 quarantined; newest:", Details: []string{"#2 b", "#1 a"}}},
			"  ! dead letters  2 quarantined; newest:\n      #2 b\n      #1 a\n", 0},
		{"errors counted", []Finding{{Severity: Error, Check: "isolation", Message: "no user namespaces"}, {Severity: Warn, Check: "x", Message: "y"},
			{Severity: Error, Check: "audit key", Message: "bad"}},
			"  ✗ isolation    no user namespaces\n  ! x            y\n  ✗ audit key    bad\n", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if n := Print(&b, tt.fs); n != tt.errs || b.String() != tt.want {
				t.Fatalf("Print = %d\n%q\nwant %d\n%q", n, b.String(), tt.errs, tt.want)
			}
		})
	}
}

// Block prints the title before it runs the check.
func TestBlock(t *testing.T) {
	var b strings.Builder
	var l List
	n := Block(&b, "Sandbox", func() []Finding {
		if b.String() != "Sandbox\n" {
			t.Errorf("the check ran before the title was printed: %q", b.String())
		}
		l.Add(Error, "setup", "cannot %s", "start")
		return l
	})
	if n != 1 || b.String() != "Sandbox\n  ✗ setup        cannot start\n" {
		t.Fatalf("Block = %d %q", n, b.String())
	}
}
