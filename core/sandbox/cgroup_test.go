//go:build linux

package sandbox

import (
	"context"
	"os"
	"testing"

	"github.com/silas-gateway/silas/core"
)

// TestCgroupsReused: runs one after another reuse a few cgroups (each
// handed back empty) instead of making and removing a pair per run; the
// limits they carry are the escape suite's (TestEscapeCgroupLimits runs
// twice on one sandbox, the second time in a reused cgroup).
func TestCgroupsReused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups are used only when the gateway runs as root")
	}
	if _, err := detectCgroups(); err != nil {
		t.Skipf("no cgroups to test here: %v", err)
	}
	s := newSandbox(t, Config{})
	if s.cgroups == nil {
		t.Fatal("cgroups detected, but the sandbox does not use them")
	}
	const runs = 20
	for range runs {
		res, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("run: %v, exit %d: %s", err, res.ExitCode, res.Stderr)
		}
		_ = s.Cleanup(res.Dir)
	}
	s.cgroups.mu.Lock()
	made, kept := s.cgroups.made, len(s.cgroups.free)
	s.cgroups.mu.Unlock()
	// The probe, the warm inits of the pool and their refills: a handful,
	// never one per run.
	if made >= runs {
		t.Fatalf("%d runs made %d cgroups (%d kept): none was reused", runs, made, kept)
	}
	if kept > maxFreeCgroups {
		t.Fatalf("%d cgroups kept, more than %d", kept, maxFreeCgroups)
	}
	s.Close()
	for _, rc := range s.cgroups.free {
		t.Errorf("cgroup %v still kept after Close", rc.dirs)
	}
}
