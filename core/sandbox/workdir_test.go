//go:build linux

package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/execute"
	"github.com/silas-gateway/silas/core/verify"
)

// TestWorkDirBounded: a run that writes past sandbox.max_work_bytes gets
// ENOSPC, the result says so, and the host keeps no more than the limit.
func TestWorkDirBounded(t *testing.T) {
	// As root the gateway stages the work dir; as an ordinary user (the
	// re-run in TestEscapeAsOrdinaryUser) the init does.
	s := newSandbox(t, Config{MaxWork: 1 << 20})
	res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "head -c 2097152 /dev/zero > big; echo rc=$?"}})
	stderr := string(res.Stderr)
	if !strings.Contains(stderr, "No space left on device") {
		t.Fatalf("the write past the limit did not fail with ENOSPC: stdout %q stderr %q", res.Stdout, stderr)
	}
	if !strings.Contains(stderr, "silas: the work dir is full: it reached sandbox.max_work_bytes (1 MiB)") {
		t.Fatalf("the result does not say the work dir was full:\n%s", stderr)
	}
	if n := workBytes(res.Dir); n > 1<<20+16<<10 {
		t.Fatalf("the host holds %d bytes of the run's work dir, more than its 1 MiB (and a directory block)", n)
	}
	fi, err := os.Stat(filepath.Join(res.Dir, "big"))
	if err != nil || fi.Size() == 0 || fi.Size() > 1<<20 {
		t.Fatalf("the run's file on the host: %v %v (want its first bytes, at most 1 MiB)", fi, err)
	}

	// A later run (verification) in the same dir sees the files, and
	// what it writes is kept.
	res2 := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "wc -c < big; rm big; echo checked > check"}, Dir: res.Dir})
	if res2.ExitCode != 0 || strings.TrimSpace(string(res2.Stdout)) != strconv.FormatInt(fi.Size(), 10) {
		t.Fatalf("second run in the dir: exit %d %q %q", res2.ExitCode, res2.Stdout, res2.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(res.Dir, "check")); err != nil || string(b) != "checked\n" {
		t.Fatalf("the second run's file: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(res.Dir, "big")); !os.IsNotExist(err) {
		t.Fatalf("the file the second run removed is still on the host: %v", err)
	}
}

// TestReleaseRemoves: with keep_work_for 0 (KeepWorkFor < 0) a released
// work dir is gone at once.
func TestReleaseRemoves(t *testing.T) {
	s := newSandbox(t, Config{KeepWorkFor: -1})
	res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "echo x > f"}})
	if _, err := os.Stat(filepath.Join(res.Dir, "f")); err != nil {
		t.Fatalf("before release: %v", err)
	}
	if err := s.Release(res.Dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(res.Dir); !os.IsNotExist(err) {
		t.Fatalf("released work dir still there: %v", err)
	}
	if err := s.Release(res.Dir); err != nil {
		t.Fatalf("releasing it twice: %v", err)
	}
}

// TestReleaseRefuses: Release removes nothing but the base dir's work dirs.
func TestReleaseRefuses(t *testing.T) {
	s := newSandbox(t, Config{KeepWorkFor: -1})
	outside := t.TempDir()
	for _, d := range []string{"", "relative", outside, s.baseDir, filepath.Join(s.baseDir, rootMountPoint),
		filepath.Join(s.baseDir, "exec-1", ".."), filepath.Join(s.baseDir, "exec-1", "sub"), filepath.Join(s.baseDir, "exec-1.kept")} {
		if err := s.Release(d); err == nil {
			t.Errorf("Release(%q) accepted", d)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Fatal(err)
	}
}

// TestKeptWorkBounded: a thousand released work dirs leave at most
// sandbox.max_kept_work_bytes on disk, the newest kept, the oldest gone;
// one kept past keep_work_for goes at the next release.
func TestKeptWorkBounded(t *testing.T) {
	const limit = 64 << 10
	s := newSandbox(t, Config{KeepWorkFor: time.Hour, MaxKeptWork: limit})
	// A few real runs, then many dirs written from outside (each run's
	// cost is the sandbox's, not what is measured here).
	var dirs []string
	for i := range 3 {
		res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "head -c 8192 /dev/urandom > f"}})
		if res.ExitCode != 0 {
			t.Fatalf("run %d: exit %d %s", i, res.ExitCode, res.Stderr)
		}
		dirs = append(dirs, res.Dir)
		if err := s.Release(res.Dir); err != nil {
			t.Fatal(err)
		}
	}
	for range 1000 {
		d, err := s.newWorkDir()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"), make([]byte, 8192), 0o644); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
		if err := s.Release(d); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	var kept []string
	for _, d := range dirs {
		if _, err := os.Lstat(d); err == nil {
			total += workBytes(d)
			kept = append(kept, d)
		}
	}
	if total > limit {
		t.Fatalf("%d kept work dirs hold %d bytes, more than the %d cap", len(kept), total, limit)
	}
	if len(kept) == 0 || kept[len(kept)-1] != dirs[len(dirs)-1] {
		t.Fatalf("the newest work dir was not kept (kept %d)", len(kept))
	}
	for _, d := range kept {
		if d == dirs[0] {
			t.Fatal("the oldest work dir was kept over newer ones")
		}
	}
	ents, _ := os.ReadDir(s.baseDir)
	if len(ents) > 2*len(kept)+2 { // each kept dir and its marker, .root and the probe's leftovers at most
		t.Fatalf("the base dir holds %d entries for %d kept work dirs", len(ents), len(kept))
	}

	// Past keep_work_for: the next release removes it (two hours pass on
	// the clock releases are timed by).
	old := kept[len(kept)-1]
	s.workMu.Lock()
	s.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	s.workMu.Unlock()
	d, err := s.newWorkDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(d); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(old); !os.IsNotExist(err) {
		t.Fatalf("a work dir kept past keep_work_for is still there: %v", err)
	}
	if _, err := os.Lstat(d); err != nil {
		t.Fatalf("the just released work dir is gone: %v", err)
	}
}

// TestWorkDirKeptAfterTimeout: what a run wrote before its timeout killed
// it is in its work dir afterwards (the staged copy is copied back, by the
// gateway as root, by the init — told with SIGTERM — as an ordinary user).
func TestWorkDirKeptAfterTimeout(t *testing.T) {
	s := newSandbox(t, Config{})
	res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "echo partial > p; sleep 271"}, Timeout: 5 * time.Second})
	if !res.TimedOut {
		t.Fatalf("the run did not time out: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(res.Dir, "p")); err != nil || string(b) != "partial\n" {
		t.Fatalf("the timed-out run's file: %q %v (stdout %q, stderr %q)", b, err, res.Stdout, res.Stderr)
	}
	waitGone(t, "sleep\x00271\x00")
}

// TestKeptWorkAcrossRestart: a sandbox started on a base dir reads the
// work dirs a previous one kept: those past keep_work_for go at start, the
// others count toward max_kept_work_bytes at its next releases.
func TestKeptWorkAcrossRestart(t *testing.T) {
	base := filepath.Join(t.TempDir(), "base")
	first := newSandbox(t, Config{BaseDir: base, KeepWorkFor: time.Hour})
	var dirs []string
	for range 3 {
		d, err := first.newWorkDir()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"), make([]byte, 8192), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := first.Release(d); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	first.Close()
	// Released in the same few milliseconds, their mtimes may be equal
	// (the file system's clock is coarse): set apart by hand. The oldest
	// is kept as an earlier version marked it: a file next to it.
	for i, ago := range []time.Duration{2 * time.Hour, 30 * time.Minute} {
		at := time.Now().Add(-ago)
		if err := os.Chtimes(dirs[i], at, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dirs[0], 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dirs[0]+keptSuffix, []byte("8192"), 0o600); err != nil {
		t.Fatal(err)
	}
	if at := time.Now().Add(-2 * time.Hour); os.Chtimes(dirs[0]+keptSuffix, at, at) != nil {
		t.Fatal("chtimes")
	}

	// Room for two of the three dirs' size: the oldest kept one goes at
	// the next release.
	size := workBytes(dirs[1])
	second := newSandbox(t, Config{BaseDir: base, KeepWorkFor: time.Hour, MaxKeptWork: 2*size + size/2})
	for _, p := range []string{dirs[0], dirs[0] + keptSuffix} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("a work dir kept past keep_work_for survived the start: %v", err)
		}
	}
	if _, err := os.Lstat(dirs[1]); err != nil {
		t.Fatalf("a work dir within keep_work_for was removed at start: %v", err)
	}
	d, err := second.newWorkDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "f"), make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := second.Release(d); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dirs[1]); !os.IsNotExist(err) {
		t.Fatalf("the oldest kept work dir outlived max_kept_work_bytes: %v", err)
	}
	for _, k := range []string{dirs[2], d} {
		if _, err := os.Lstat(k); err != nil {
			t.Fatalf("a newer kept work dir is gone: %v", err)
		}
	}
}

// TestStageEmpty: a fresh run whose stage is left empty skips the copy
// back and the full check (run), relying on these: an empty stage reads
// as empty, one with anything in it does not, and an empty stage — even
// the smallest — is never full.
func TestStageEmpty(t *testing.T) {
	s := newSandbox(t, Config{MaxWork: 4096})
	if !s.workTmpfs {
		t.Skip("no gateway-made stages here (not root, or no fsmount)")
	}
	st, err := s.newStage()
	if err != nil {
		t.Fatal(err)
	}
	defer st.remove()
	if !st.empty() {
		t.Fatal("a new stage is not empty")
	}
	if workDirFull(st.path) {
		t.Fatal("an empty stage is full")
	}
	if err := os.Mkdir(filepath.Join(st.path, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if st.empty() {
		t.Fatal("a stage with a dir in it is empty")
	}
	gone := &stage{fd: -1, path: filepath.Join(t.TempDir(), "nonexistent")}
	if gone.empty() {
		t.Fatal("a stage that cannot be read is empty")
	}
}

// TestReleaseLegacyMarker: a dir an earlier version kept (a marker file
// next to it) and released again after a restart loses its marker and is
// marked on itself; Release looks for a marker only where the start's
// scan saw one.
func TestReleaseLegacyMarker(t *testing.T) {
	base := filepath.Join(t.TempDir(), "base")
	first := newSandbox(t, Config{BaseDir: base, KeepWorkFor: time.Hour})
	marked, err := first.newWorkDir()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := first.newWorkDir()
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	if err := os.WriteFile(marked+keptSuffix, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	second := newSandbox(t, Config{BaseDir: base, KeepWorkFor: time.Hour})
	if !second.marked[marked] || second.marked[plain] {
		t.Fatalf("the start's scan saw markers for %v", second.marked)
	}
	for _, d := range []string{marked, plain} {
		if err := second.Release(d); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(d)
		if err != nil || fi.Mode()&os.ModeSticky == 0 {
			t.Fatalf("%s after release: %v %v, want kept, marked on itself", d, fi, err)
		}
	}
	if _, err := os.Lstat(marked + keptSuffix); !os.IsNotExist(err) {
		t.Fatalf("the earlier version's marker survived the release: %v", err)
	}
	if len(second.kept) != 2 {
		t.Fatalf("%d dirs in the kept index, want 2", len(second.kept))
	}
}

// workEntries lists the base dir's work dirs.
func workEntries(t *testing.T, s *Subprocess) []string {
	t.Helper()
	ents, err := os.ReadDir(s.baseDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), workPrefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestWorkDirOnDemand: a staged run that writes nothing in its work dir
// leaves no dir on the host (its dir is only reserved: no mkdir, no
// rmdir), and that missing dir is an empty one to everything that takes
// it: verification (a file check of a missing file fails as before, a run
// check runs in it, and makes it when it writes), Release. A run that
// writes a file leaves its dir with it.
func TestWorkDirOnDemand(t *testing.T) {
	s := newSandbox(t, Config{KeepWorkFor: time.Hour})
	if !s.workTmpfs {
		t.Skip("no gateway-made stages here (not root, or no fsmount): the init stages a dir made before the run")
	}
	res := run(t, s, core.ExecRequest{Argv: []string{"echo", "x"}})
	if res.ExitCode != 0 || string(res.Stdout) != "x\n" {
		t.Fatalf("echo x: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if !s.isWorkDir(res.Dir) {
		t.Fatalf("the result's dir %q is not a work dir of %q", res.Dir, s.baseDir)
	}
	if _, err := os.Lstat(res.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a run that wrote nothing left its work dir: %v", err)
	}
	if got := workEntries(t, s); len(got) != 0 {
		t.Fatalf("the base dir holds %v after a run that wrote nothing", got)
	}

	// Verification of that run, in the sandbox, with its Dir.
	empty, missing := "empty", "out"
	runner := verify.Runner{Commands: execute.SandboxChecks{Sandbox: s}}
	rep := runner.Run(context.Background(), []verify.Check{
		{Name: "empty", Run: []string{"sh", "-c", `test -z "$(ls -A)" && echo empty`}, Expect: verify.Expect{Equals: &empty}},
		{Name: "file", Expect: verify.Expect{FileExists: &missing}},
	}, verify.Evidence{ExitCode: res.ExitCode, Stdout: res.Stdout, Dir: res.Dir})
	if len(rep.Results) != 2 || !rep.Results[0].Passed {
		t.Fatalf("a run check in the missing work dir: %+v", rep.Results)
	}
	if rep.Results[1].Passed || !strings.Contains(rep.Results[1].Reason, "not found") {
		t.Fatalf("a file check of a missing file in a missing work dir: %+v", rep.Results[1])
	}
	if got := workEntries(t, s); len(got) != 0 {
		t.Fatalf("the base dir holds %v after a check that wrote nothing", got)
	}
	// Releasing a dir that was never made: nothing to remove or keep.
	if err := s.Release(res.Dir); err != nil {
		t.Fatalf("release of a dir never made: %v", err)
	}
	if len(s.kept) != 0 || s.keptBytes != 0 {
		t.Fatalf("a dir never made is kept: %v (%d bytes)", s.kept, s.keptBytes)
	}
	if got := workEntries(t, s); len(got) != 0 {
		t.Fatalf("the base dir holds %v after the release", got)
	}

	// A check that writes in the missing dir makes it, with what it wrote.
	later := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "echo v > v"}, Dir: res.Dir})
	if later.Dir != res.Dir {
		t.Fatalf("a run given a dir reports %q", later.Dir)
	}
	if b, err := os.ReadFile(filepath.Join(res.Dir, "v")); err != nil || string(b) != "v\n" {
		t.Fatalf("what a run wrote in a missing dir: %q %v (stderr %q)", b, err, later.Stderr)
	}
	if fi, err := os.Lstat(res.Dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the dir made on demand: %v %v", fi, err)
	}

	// A fresh run that writes a file leaves its dir with it.
	wrote := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "mkdir d && echo y > d/f"}})
	if b, err := os.ReadFile(filepath.Join(wrote.Dir, "d", "f")); err != nil || string(b) != "y\n" {
		t.Fatalf("the written run's file: %q %v (stderr %q)", b, err, wrote.Stderr)
	}
	if wrote.Dir == res.Dir {
		t.Fatal("two runs got the same work dir")
	}
	if got := workEntries(t, s); len(got) != 2 {
		t.Fatalf("the base dir holds %v: want the two dirs written to", got)
	}
}

// TestWorkDirCollision: a reserved name that is taken when the dir is
// made (by a dir or a planted symlink) never merges two runs' files and
// follows nothing: a fresh run gets a new dir (its result names it), a run
// given the dir is refused; what was there is untouched.
func TestWorkDirCollision(t *testing.T) {
	s := newSandbox(t, Config{})
	if a, b := s.reserveWorkDir(), s.reserveWorkDir(); a == b || !s.isWorkDir(a) || !s.isWorkDir(b) {
		t.Fatalf("reservations %q and %q", a, b)
	}
	taken := s.reserveWorkDir()
	if err := os.Mkdir(taken, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(taken, "theirs"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	planted := s.reserveWorkDir()
	if err := os.Symlink(elsewhere, planted); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{taken, planted} {
		if _, err := s.createWorkDir(dir, false); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("a given dir taken meanwhile (%s): %v", dir, err)
		}
		got, err := s.createWorkDir(dir, true)
		if err != nil {
			t.Fatal(err)
		}
		if got == dir || !s.isWorkDir(got) {
			t.Fatalf("a fresh run whose name %q was taken got %q", dir, got)
		}
		if ents, err := os.ReadDir(got); err != nil || len(ents) != 0 {
			t.Fatalf("the new dir %q: %v %v", got, ents, err)
		}
	}
	if ents, _ := os.ReadDir(taken); len(ents) != 1 || ents[0].Name() != "theirs" {
		t.Fatalf("the taken dir now holds %v", ents)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Fatalf("the symlink's target now holds %v", ents)
	}
	if fi, err := os.Lstat(planted); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the planted symlink: %v %v", fi, err)
	}
}
