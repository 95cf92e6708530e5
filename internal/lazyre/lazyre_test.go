package lazyre

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestSameAsRegexp: every method answers as regexp.MustCompile's.
func TestSameAsRegexp(t *testing.T) {
	for _, tc := range []struct{ pattern, in string }{
		{`^[A-Za-z0-9_-]{1,64}$`, "card_1-x"},
		{`^[A-Za-z0-9_-]{1,64}$`, strings.Repeat("a", 65)},
		{`^[A-Za-z0-9_-]{1,64}$`, ""},
		{`<@!?([0-9]{1,20})>`, "hi <@123> and <@!456>"},
		{`<([^<>]*)>`, "a <b|c> d"},
	} {
		lazy, re := New(tc.pattern), regexp.MustCompile(tc.pattern)
		if got, want := lazy.MatchString(tc.in), re.MatchString(tc.in); got != want {
			t.Errorf("%s MatchString(%q) = %v, want %v", tc.pattern, tc.in, got, want)
		}
		if got, want := lazy.FindStringSubmatch(tc.in), re.FindStringSubmatch(tc.in); !slices.Equal(got, want) {
			t.Errorf("%s FindStringSubmatch(%q) = %q, want %q", tc.pattern, tc.in, got, want)
		}
		if got, want := len(lazy.FindAllStringSubmatch(tc.in, -1)), len(re.FindAllStringSubmatch(tc.in, -1)); got != want {
			t.Errorf("%s FindAllStringSubmatch(%q): %d matches, want %d", tc.pattern, tc.in, got, want)
		}
		if got, want := lazy.ReplaceAllStringFunc(tc.in, strings.ToUpper), re.ReplaceAllStringFunc(tc.in, strings.ToUpper); got != want {
			t.Errorf("%s ReplaceAllStringFunc(%q) = %q, want %q", tc.pattern, tc.in, got, want)
		}
		if lazy.String() != tc.pattern {
			t.Errorf("String() = %q", lazy.String())
		}
	}
}

// TestCompiledOnFirstUse: nothing is compiled until a method is called,
// then once.
func TestCompiledOnFirstUse(t *testing.T) {
	r := New(`^[0-9]{1,20}$`)
	if r.re != nil {
		t.Fatal("compiled before first use")
	}
	first := r.Regexp()
	if !r.MatchString("42") || r.Regexp() != first {
		t.Fatal("not compiled once")
	}
}

func TestBadPatternPanicsAtFirstUse(t *testing.T) {
	r := New(`(`)
	defer func() {
		if recover() == nil {
			t.Fatal("a bad pattern did not panic at first use")
		}
	}()
	r.MatchString("x")
}
