//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/silas-gateway/silas/core"
)

// zygoteSandbox is a sandbox whose network-off runs a zygote forks (a
// root gateway with fsmount stages); the test is skipped elsewhere.
func zygoteSandbox(t *testing.T) *Subprocess {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the zygote serves a root gateway only")
	}
	// A hidden path outside the system dirs (the data dir, as in the
	// gateway): invisible anyway, it must not make the zygote stale.
	s := newSandbox(t, Config{HiddenPaths: []string{t.TempDir()}})
	if !s.workTmpfs {
		t.Skip("no fsmount stages on this kernel: every run re-executes the init")
	}
	if !s.useZygote.Load() {
		t.Fatal("a root gateway with stages has no zygote")
	}
	return s
}

// zygoteInit runs three programs on s (the inits forked before the
// zygote's first marks are used up, and its threads have forked), then
// takes an init that waits for its run — a warm one, or one forked now —
// and discards it when t ends. It must come from the zygote.
func zygoteInit(t *testing.T, s *Subprocess) *warmInit {
	t.Helper()
	for range 3 {
		if res := run(t, s, core.ExecRequest{Argv: []string{"true"}}); res.ExitCode != 0 {
			t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
		}
	}
	w, err := s.take(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.discard)
	if w.zygote == nil {
		t.Fatal("the init does not come from the zygote")
	}
	return w
}

// TestZygoteRuns: network-off runs of a root gateway are forked by the
// zygote, get their arguments and environment whole (the init reads them
// without the Go runtime), and have a PID 1 of one thread (not a Go init).
func TestZygoteRuns(t *testing.T) {
	s := zygoteSandbox(t)
	n0 := s.zygoteRuns.Load()
	res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", `printf '%s|%s|%s|%s|' "$0" "$1" "$FOO" "$EMPTY"; grep '^Threads:' /proc/1/status`, "a b", "", "c"},
		Env: map[string]string{"FOO": "x=y z", "EMPTY": ""}})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if got, want := string(res.Stdout), "a b||x=y z||Threads:\t1\n"; got != want {
		t.Fatalf("output %q, want %q", got, want)
	}
	if s.zygoteRuns.Load() == n0 {
		t.Fatal("the run did not come from the zygote")
	}
	// An exit status, a signal and a program that cannot start.
	if res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "exit 7"}}); res.ExitCode != 7 {
		t.Fatalf("exit %d, want 7", res.ExitCode)
	}
	if res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "kill -9 $$"}}); res.ExitCode != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit %d, want %d", res.ExitCode, 128+int(syscall.SIGKILL))
	}
	dir, err := s.newWorkDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad"), []byte("not a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	n1 := s.zygoteRuns.Load()
	_, err = s.Run(t.Context(), core.ExecRequest{Argv: []string{"./bad"}, Dir: dir})
	if err == nil || !strings.Contains(err.Error(), `start "./bad": exec format error`) {
		t.Fatalf("err %v, want the exec's error", err)
	}
	if s.zygoteRuns.Load() == n1 {
		t.Fatal("the run did not come from the zygote")
	}
}

// TestZygoteReplaced: when the zygote dies, runs go on (re-executed
// inits meanwhile) and a new zygote takes over.
func TestZygoteReplaced(t *testing.T) {
	s := zygoteSandbox(t)
	s.zygMu.Lock()
	old := s.zyg
	s.zygMu.Unlock()
	if err := old.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res := run(t, s, core.ExecRequest{Argv: []string{"echo", "ok"}})
		if res.ExitCode != 0 || string(res.Stdout) != "ok\n" {
			t.Fatalf("exit %d: %s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		s.zygMu.Lock()
		z := s.zyg
		s.zygMu.Unlock()
		if z != nil && z != old && !z.dead.Load() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new zygote")
		}
		time.Sleep(20 * time.Millisecond)
	}
	n0 := s.zygoteRuns.Load()
	for range 3 { // the pool's inits from the dead zygote are gone first
		if res := run(t, s, core.ExecRequest{Argv: []string{"true"}}); res.ExitCode != 0 {
			t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
		}
	}
	if s.zygoteRuns.Load() == n0 {
		t.Fatal("no run came from the new zygote")
	}
	if !old.dead.Load() || old.cmd.ProcessState == nil {
		t.Fatal("the old zygote was not reaped")
	}
}

// TestLostInitReaped: a child holding a forked init's run socket whose
// pid never reached the gateway (the zygote's reply timed out after the
// fork) is killed and reaped, not left running or a zombie.
func TestLostInitReaped(t *testing.T) {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(sp[0]), "run"), os.NewFile(uintptr(sp[1]), "run-init")
	defer ours.Close()
	defer theirs.Close()
	// An unrelated child holding another socket stays.
	other, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	start := func(f *os.File) int {
		pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "293"}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2, f.Fd()}})
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	lost, kept := start(theirs), start(other)
	defer func() {
		_ = unix.Kill(kept, unix.SIGKILL)
		_, _ = unix.Wait4(kept, nil, 0, nil)
	}()
	// The child has its descriptors once it runs sleep.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(lost) + "/cmdline"); strings.HasPrefix(string(b), "sleep\x00293") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not start")
		}
	}
	reapLostInit(int(theirs.Fd()))
	if _, err := unix.Wait4(lost, nil, unix.WNOHANG, nil); err != unix.ECHILD {
		_ = unix.Kill(lost, unix.SIGKILL)
		_, _ = unix.Wait4(lost, nil, 0, nil)
		t.Fatalf("the lost init was not reaped (wait4: %v)", err)
	}
	if !processAlive(kept) {
		t.Fatal("a child not holding the run socket was killed")
	}
}

// TestZygoteInitsInheritNoBoundingSet: the bounding set is a per-thread
// attribute and an init inherits the one of the zygote's thread that
// forked it, whichever the runtime ran the fork on: a warm init, forked
// and waiting for its run (it has dropped nothing itself yet), has an
// empty one — else each init dropped the 40 capabilities one credential
// change at a time.
func TestZygoteInitsInheritNoBoundingSet(t *testing.T) {
	w := zygoteInit(t, zygoteSandbox(t))
	b, err := os.ReadFile("/proc/" + strconv.Itoa(w.pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			found = true
			if strings.TrimSpace(v) != "0000000000000000" {
				t.Errorf("a forked init's bounding set before its run: %s, want empty", strings.TrimSpace(v))
			}
		}
	}
	if !found {
		t.Fatal("no CapBnd in the init's status")
	}
}

// TestZygoteOutputBlocking: a forked init's program writes its output to
// pipes in blocking mode (only the gateway's read ends are non-blocking,
// in its poller), as any program expects: a non-blocking stdout fails a
// large write with EAGAIN.
func TestZygoteOutputBlocking(t *testing.T) {
	s := zygoteSandbox(t)
	n0 := s.zygoteRuns.Load()
	res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "grep '^flags' /proc/self/fdinfo/1; grep '^flags' /proc/self/fdinfo/2 >&2"}})
	if res.ExitCode != 0 || s.zygoteRuns.Load() == n0 {
		t.Fatalf("exit %d (zygote runs %d → %d): %s", res.ExitCode, n0, s.zygoteRuns.Load(), res.Stderr)
	}
	for _, out := range [][]byte{res.Stdout, res.Stderr} {
		f := strings.Fields(string(out))
		if len(f) != 2 {
			t.Fatalf("fdinfo: %q", out)
		}
		flags, err := strconv.ParseUint(f[1], 8, 64)
		if err != nil {
			t.Fatal(err)
		}
		if flags&unix.O_NONBLOCK != 0 {
			t.Fatalf("the program's output pipe is non-blocking (flags %s)", f[1])
		}
	}
}

// TestZygoteInitsGetNoCopyOfTheZygote: a forked init gets the zygote's
// fork region (its stack and what it reads), the main thread's stack and
// the binary's code — not a copy of the zygote's Go heap, goroutine
// stacks and runtime data, which it never uses and whose copy, faults and
// teardown were a quarter of a run's CPU (BENCHMARKS.md "Issue 26 — the
// zygote's address space"). Read from a warm init's /proc/<pid>/maps
// before its run: at most two writable anonymous mappings (the region
// and [stack]; with -cover also the binary's bss, whose counters the
// init's code writes), where a whole copy has dozens.
func TestZygoteInitsGetNoCopyOfTheZygote(t *testing.T) {
	if runtime.GOARCH != "amd64" || raceEnabled {
		t.Skip("inits are forked onto a stack of their own on amd64 only, not under the race detector")
	}
	w := zygoteInit(t, zygoteSandbox(t))
	b, err := os.ReadFile("/proc/" + strconv.Itoa(w.pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	var writable []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && strings.Contains(f[1], "w") && f[4] == "0" { // anonymous (inode 0)
			writable = append(writable, line)
		}
	}
	want := 2
	if testing.CoverMode() != "" {
		want = 3
	}
	if len(writable) > want {
		t.Fatalf("a warm init has %d writable anonymous mappings, want at most %d:\n%s", len(writable), want, strings.Join(writable, "\n"))
	}
}

// TestZygoteInitsOneWait: a zygote's init is waited for in one wait — its
// exit, its stdout and its stderr, from the run's own goroutine (the
// init's epoll set, waitPolled) — so a warm init holds no goroutine (one
// per pipe before, each started per run and woken at its pipe's end),
// and both pipes are still read while the program writes: more than a
// pipe holds on each, interleaved, arrives whole.
func TestZygoteInitsOneWait(t *testing.T) {
	s := zygoteSandbox(t)
	n0 := s.zygoteRuns.Load()
	const n = 300000
	res := run(t, s, core.ExecRequest{
		Argv:        []string{"sh", "-c", "for i in 1 2 3; do head -c 100000 /dev/zero; head -c 100000 /dev/zero >&2; done; echo end"},
		OutputLimit: 1 << 20,
	})
	if res.ExitCode != 0 || s.zygoteRuns.Load() == n0 {
		t.Fatalf("exit %d (zygote runs %d → %d): %.200s", res.ExitCode, n0, s.zygoteRuns.Load(), res.Stderr)
	}
	if len(res.Stdout) != n+4 || len(res.Stderr) != n || res.Truncated || !strings.HasSuffix(string(res.Stdout), "end\n") {
		t.Fatalf("stdout %d bytes, stderr %d, truncated %v; want %d, %d, false", len(res.Stdout), len(res.Stderr), res.Truncated, n+4, n)
	}
	// The pool refills after the run; once done, its inits (one or
	// two) are waiting for their runs.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s.poolMu.Lock()
		ready := len(s.pools[false]) > 0 && s.refilling[false] == 0
		s.poolMu.Unlock()
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool did not refill")
		}
	}
	if fd, err := unix.PidfdOpen(os.Getpid(), 0); err != nil {
		t.Skipf("no pidfd_open (%v): a forked init's output is copied by goroutines", err)
	} else {
		unix.Close(fd)
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	if c := strings.Count(stacks, "sandbox.copyOutput("); c != 0 {
		t.Fatalf("%d goroutines copy a warm init's output (want none: the run's goroutine reads it)", c)
	}
}

// TestZygoteSocketWatchedForInput: the gateway and the zygote each watch
// their end of the zygote's socket for input only. The network poller
// watches what it holds for output too (edge-triggered), and each side's
// read of the other's message makes the other's end writable: one
// wake-up of an idle process for nothing per run on each side. And the
// zygote keeps its descriptors 0–4 open, so that what comes with a
// request lands above them and is passed to the init without a copy.
func TestZygoteSocketWatchedForInput(t *testing.T) {
	s := zygoteSandbox(t)
	for range 3 {
		if res := run(t, s, core.ExecRequest{Argv: []string{"true"}}); res.ExitCode != 0 {
			t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
		}
	}
	s.zygMu.Lock()
	z := s.zyg
	s.zygMu.Unlock()
	if z == nil || z.dead.Load() {
		t.Fatal("no zygote after its runs")
	}
	z.mu.Lock()
	sock := z.sock
	z.mu.Unlock()
	zpid := z.cmd.Process.Pid
	// fd 4 in the zygote: its end (sandboxinit's fdRun).
	for _, c := range []struct {
		pid, fd int
		who     string
	}{{os.Getpid(), sock, "the gateway"}, {zpid, 4, "the zygote"}} {
		in := false
		for _, w := range epollWatches(t, c.pid) {
			if w.fd != c.fd {
				continue
			}
			if w.events&unix.EPOLLOUT != 0 {
				t.Errorf("%s watches its end of the zygote's socket (fd %d) for output: events %#x", c.who, c.fd, w.events)
			}
			in = in || w.events&unix.EPOLLIN != 0
		}
		if !in {
			t.Errorf("%s does not watch its end of the zygote's socket (fd %d) for input", c.who, c.fd)
		}
	}
	for fd := range 5 {
		if _, err := os.Readlink("/proc/" + strconv.Itoa(zpid) + "/fd/" + strconv.Itoa(fd)); err != nil {
			t.Errorf("the zygote's descriptor %d: %v (want it open)", fd, err)
		}
	}
}

type epollWatch struct {
	fd     int
	events uint32
}

// epollWatches reads what every epoll set of process pid watches
// (/proc/<pid>/fdinfo: a "tfd: <fd> events: <hex>" line per watched
// descriptor).
func epollWatches(t *testing.T, pid int) []epollWatch {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/fdinfo"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ws []epollWatch
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 4 || f[0] != "tfd:" || f[2] != "events:" {
				continue
			}
			fd, err1 := strconv.Atoi(f[1])
			ev, err2 := strconv.ParseUint(f[3], 16, 32)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s/%s: %q", dir, e.Name(), line)
			}
			ws = append(ws, epollWatch{fd, uint32(ev)})
		}
	}
	return ws
}
