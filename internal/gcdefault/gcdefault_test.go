package gcdefault

import (
	"os"
	"runtime/debug"
	"sync"
	"testing"
)

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		set       bool // GOGC in the environment
		applied   bool
		want      int
	}{
		{name: "unset", applied: true, want: Percent},
		{name: "operator's value wins", env: "50", set: true, want: 50},
		{name: "empty still counts as set", env: "", set: true, want: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := debug.SetGCPercent(100)
			t.Cleanup(func() { debug.SetGCPercent(prev) })
			if tc.set {
				t.Setenv("GOGC", tc.env)
				if tc.env != "" {
					// The runtime read GOGC at start; emulate an operator's
					// value being in force.
					debug.SetGCPercent(50)
				}
			} else {
				t.Setenv("GOGC", "")
				if err := unsetenv("GOGC"); err != nil {
					t.Fatal(err)
				}
			}
			if got := Apply(); got != tc.applied {
				t.Errorf("Apply() = %v, want %v", got, tc.applied)
			}
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Errorf("GOGC now %d, want %d", got, tc.want)
			}
		})
	}
}

func unsetenv(k string) error { return os.Unsetenv(k) }

// TestSettleEmptiesPools: what a sync.Pool kept during start-up (the
// migrator's scanner buffers) is gone after Settle, not one collection
// later.
func TestSettleEmptiesPools(t *testing.T) {
	var p sync.Pool
	buf := make([]byte, 1<<20)
	p.Put(&buf)
	Settle()
	if got := p.Get(); got != nil {
		t.Fatalf("the pool still holds %T after Settle", got)
	}
}
