//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/testenv"
)

func newSandbox(t *testing.T, cfg Config) *Subprocess {
	t.Helper()
	if cfg.BaseDir == "" {
		cfg.BaseDir = filepath.Join(t.TempDir(), "base")
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func run(t *testing.T, s *Subprocess, req core.ExecRequest) core.ExecResult {
	t.Helper()
	res, err := s.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("Run(%q): %v", req.Argv, err)
	}
	return res
}

func TestNewRequiresBaseDir(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without BaseDir succeeded")
	}
}

func TestRunResults(t *testing.T) {
	s := newSandbox(t, Config{})
	tests := []struct {
		name       string
		argv       []string
		wantOut    string
		wantErr    string
		wantCode   int
		wantStderr bool
	}{
		{name: "echo", argv: []string{"echo", "hello", "world"}, wantOut: "hello world\n"},
		{name: "no shell interpolation", argv: []string{"echo", "$HOME;id", "`id`", "$(id)", "*"}, wantOut: "$HOME;id `id` $(id) *\n"},
		{name: "absolute path", argv: []string{"/bin/echo", "abs"}, wantOut: "abs\n"},
		{name: "exit code", argv: []string{"sh", "-c", "exit 3"}, wantCode: 3},
		{name: "stderr", argv: []string{"sh", "-c", "echo oops >&2; exit 1"}, wantErr: "oops\n", wantCode: 1},
		{name: "killed by SIGKILL", argv: []string{"sh", "-c", "kill -KILL $$"}, wantCode: 128 + 9},
		{name: "killed by SIGTERM", argv: []string{"sh", "-c", "kill -TERM $$"}, wantCode: 128 + 15},
		{name: "stdin is empty", argv: []string{"wc", "-c"}, wantOut: "0\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, s, core.ExecRequest{Argv: tc.argv})
			if got := string(res.Stdout); got != tc.wantOut {
				t.Errorf("stdout = %q, want %q", got, tc.wantOut)
			}
			if got := string(res.Stderr); got != tc.wantErr {
				t.Errorf("stderr = %q, want %q", got, tc.wantErr)
			}
			if res.ExitCode != tc.wantCode {
				t.Errorf("exit code = %d, want %d", res.ExitCode, tc.wantCode)
			}
			if res.TimedOut || res.Truncated {
				t.Errorf("TimedOut=%v Truncated=%v, want false", res.TimedOut, res.Truncated)
			}
			if res.Duration <= 0 {
				t.Errorf("duration = %v, want > 0", res.Duration)
			}
		})
	}
}

func TestRunInvalidRequests(t *testing.T) {
	s := newSandbox(t, Config{})
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  core.ExecRequest
		want string
	}{
		{"nil argv", core.ExecRequest{}, "empty argv"},
		{"empty argv0", core.ExecRequest{Argv: []string{"", "x"}}, "empty argv"},
		{"negative timeout", core.ExecRequest{Argv: []string{"true"}, Timeout: -1}, "negative timeout"},
		{"negative limit", core.ExecRequest{Argv: []string{"true"}, OutputLimit: -1}, "negative output limit"},
		{"env key with =", core.ExecRequest{Argv: []string{"true"}, Env: map[string]string{"A=B": "x"}}, "invalid environment"},
		{"env value with NUL", core.ExecRequest{Argv: []string{"true"}, Env: map[string]string{"A": "x\x00y"}}, "invalid environment"},
		{"relative dir", core.ExecRequest{Argv: []string{"true"}, Dir: "rel"}, "must be absolute"},
		{"missing dir", core.ExecRequest{Argv: []string{"true"}, Dir: "/nonexistent-silas-dir"}, "work dir"},
		{"dir is a file", core.ExecRequest{Argv: []string{"true"}, Dir: file}, "not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Run(context.Background(), tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want containing %q", err, tc.want)
			}
		})
	}
}

func TestProgramNotFound(t *testing.T) {
	s := newSandbox(t, Config{})
	tests := []struct {
		name   string
		argv0  string
		target error
	}{
		{"bare name", "silas-no-such-program", exec.ErrNotFound},
		{"absolute path", "/nonexistent/silas-no-such-program", fs.ErrNotExist},
		{"relative path in fresh dir", "./silas-no-such-program", fs.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{tc.argv0}})
			if err == nil {
				t.Fatal("Run succeeded for a missing program")
			}
			if !errors.Is(err, tc.target) {
				t.Errorf("err = %v, want errors.Is %v", err, tc.target)
			}
			if !strings.Contains(err.Error(), tc.argv0) {
				t.Errorf("err %q does not name the program %q", err, tc.argv0)
			}
		})
	}
	// Nothing ran, so no work dir is left behind.
	if n := workDirs(t, s); n != 0 {
		t.Errorf("base dir has %d work dirs after failed runs, want 0", n)
	}
}

// The gateway's PATH must not be used to find programs.
func TestIgnoresGatewayPath(t *testing.T) {
	s := newSandbox(t, Config{})
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "silas-fake-tool"), []byte("#!/bin/sh\necho pwned\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(filepath.ListSeparator)+os.Getenv("PATH"))
	_, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{"silas-fake-tool"}})
	if !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound (gateway PATH must be ignored)", err)
	}
	// By absolute path it is refused too: the sandbox shows only system
	// dirs and the work dir, not the gateway's filesystem.
	_, err = s.Run(context.Background(), core.ExecRequest{Argv: []string{filepath.Join(bin, "silas-fake-tool")}})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "outside the sandbox's filesystem") {
		t.Fatalf("err = %v, want outside the sandbox's filesystem", err)
	}
	// Copied into the work dir, it runs.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tool"), []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		chownToProgram(t, s, dir)
	}
	res := run(t, s, core.ExecRequest{Argv: []string{"./tool"}, Dir: dir})
	if string(res.Stdout) != "ran\n" {
		t.Fatalf("stdout = %q stderr %q", res.Stdout, res.Stderr)
	}
}

// workDirs counts the work dirs in the base dir.
func workDirs(t *testing.T, s *Subprocess) int {
	t.Helper()
	ents, err := os.ReadDir(s.BaseDir())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if e.Name() != rootMountPoint {
			n++
		}
	}
	return n
}

// chownToProgram gives dir to the user programs run as (a caller-provided
// work dir must be writable by it).
func chownToProgram(t *testing.T, s *Subprocess, dir string) {
	t.Helper()
	if err := os.Chown(dir, int(s.uid), int(s.gid)); err != nil {
		t.Fatal(err)
	}
}

func TestEnvMinimal(t *testing.T) {
	const canary = "SILAS_SANDBOX_CANARY"
	t.Setenv(canary, "secret-canary-value")
	s := newSandbox(t, Config{})
	tests := []struct {
		name string
		env  map[string]string
		want func(dir string) []string
	}{
		{
			name: "defaults",
			env:  nil,
			want: func(dir string) []string {
				return []string{"HOME=" + SandboxWorkDir, "LANG=C.UTF-8", "PATH=" + MinimalPath}
			},
		},
		{
			name: "request env added, LANG overridden",
			env:  map[string]string{"FOO": "bar baz", "LANG": "en_US.UTF-8"},
			want: func(dir string) []string {
				return []string{"FOO=bar baz", "HOME=" + SandboxWorkDir, "LANG=en_US.UTF-8", "PATH=" + MinimalPath}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, s, core.ExecRequest{Argv: []string{"env"}, Env: tc.env})
			out := string(res.Stdout)
			if strings.Contains(out, canary) || strings.Contains(out, "secret-canary-value") {
				t.Fatalf("gateway environment leaked into child:\n%s", out)
			}
			got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			slices.Sort(got)
			if want := tc.want(res.Dir); !slices.Equal(got, want) {
				t.Fatalf("child env = %q, want exactly %q", got, want)
			}
		})
	}
}

func TestWorkDir(t *testing.T) {
	s := newSandbox(t, Config{})
	res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "pwd; echo data > out.txt"}})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
	if filepath.Dir(res.Dir) != s.BaseDir() {
		t.Fatalf("work dir %q not directly under base %q", res.Dir, s.BaseDir())
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != SandboxWorkDir {
		t.Errorf("cwd = %q, want %q", got, SandboxWorkDir)
	}
	fi, err := os.Stat(res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("work dir mode = %v, want dir 0700", fi.Mode())
	}
	if b, err := os.ReadFile(filepath.Join(res.Dir, "out.txt")); err != nil || string(b) != "data\n" {
		t.Errorf("file written by program: %q, %v", b, err)
	}

	// Each run gets its own dir.
	res2 := run(t, s, core.ExecRequest{Argv: []string{"true"}})
	if res2.Dir == res.Dir {
		t.Errorf("two runs share work dir %q", res.Dir)
	}

	// An explicit Dir is used as is.
	own := t.TempDir()
	res3 := run(t, s, core.ExecRequest{Argv: []string{"pwd"}, Dir: own})
	if res3.Dir != own || strings.TrimSpace(string(res3.Stdout)) != SandboxWorkDir {
		t.Errorf("explicit dir: result dir %q, pwd %q, want %q in the sandbox", res3.Dir, res3.Stdout, own)
	}

	if err := s.Cleanup(res.Dir); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if _, err := os.Stat(res.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("work dir still exists after Cleanup: %v", err)
	}
	if err := s.Cleanup(res.Dir); err != nil {
		t.Errorf("Cleanup of removed dir: %v", err)
	}
}

func TestCleanupRefusesOutsideBase(t *testing.T) {
	s := newSandbox(t, Config{})
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.Mkdir(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(s.BaseDir(), "link")); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{
		"",
		"relative/dir",
		"/",
		outside,
		victim,
		s.BaseDir(),
		s.BaseDir() + "/",
		filepath.Dir(s.BaseDir()),
		s.BaseDir() + "/../" + filepath.Base(outside),
		s.BaseDir() + "-sibling/x",
		filepath.Join(s.BaseDir(), "link", "victim"), // symlink escape
	} {
		if err := s.Cleanup(dir); err == nil {
			t.Errorf("Cleanup(%q) succeeded, want refusal", dir)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("victim outside base dir was removed: %v", err)
	}
	if _, err := os.Stat(s.BaseDir()); err != nil {
		t.Fatalf("base dir was removed: %v", err)
	}
}

// Each program prints "finished" if it runs to its end (30 s): a run
// that waited for it instead of killing it at the timeout shows that,
// whatever the time it took (no wall-clock bound).
func TestTimeoutKillsProcessGroup(t *testing.T) {
	s := newSandbox(t, Config{})
	tests := []struct {
		name string
		argv []string
	}{
		{"sleep", []string{"sh", "-c", "sleep 30; echo finished"}},
		{"grandchild holds stdout", []string{"sh", "-c", "(sleep 30; echo finished) & sleep 30; echo finished"}},
		{"grandchild outlives shell", []string{"sh", "-c", "(sleep 30; echo finished) & exec sleep 30"}},
		{"ignores SIGTERM", []string{"sh", "-c", "trap '' TERM; sleep 30; echo finished"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, s, core.ExecRequest{Argv: tc.argv, Timeout: 300 * time.Millisecond})
			if !res.TimedOut || res.ExitCode != -1 {
				t.Errorf("TimedOut=%v ExitCode=%d, want true/-1", res.TimedOut, res.ExitCode)
			}
			if strings.Contains(string(res.Stdout), "finished") {
				t.Errorf("the run waited for its program instead of killing it at the timeout: %q", res.Stdout)
			}
		})
	}
}

// Background processes left in the group are killed when the program exits,
// and Run does not wait for them: one that lived to its end would print
// "finished" (no wall-clock bound).
func TestLeftoverProcessesKilled(t *testing.T) {
	s := newSandbox(t, Config{})
	res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "(sleep 318; echo finished) & echo $!"}})
	if strings.Contains(string(res.Stdout), "finished") {
		t.Fatalf("Run waited for a background process: %q", res.Stdout)
	}
	if res.TimedOut || res.ExitCode != 0 {
		t.Fatalf("TimedOut=%v ExitCode=%d", res.TimedOut, res.ExitCode)
	}
	if pids := hostProcesses("sleep\x00318\x00"); len(pids) > 0 {
		t.Fatalf("background process still running after Run returned: pids %v", pids)
	}
}

// processAlive reports whether pid exists and is not a zombie (an orphan may
// stay a zombie if the container's init does not reap).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || len(b) < i+3 || b[i+2] != 'Z'
}

// A process that leaves the process group (setsid) is killed with the run
// too: it lives in the run's PID namespace, which ends with the program.
func TestEscapedProcessKilled(t *testing.T) {
	s := newSandbox(t, Config{})
	res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "setsid sh -c 'sleep 317; echo finished' & sleep 0.2"}})
	if strings.Contains(string(res.Stdout), "finished") {
		t.Fatalf("Run waited for a setsid'd process: %q", res.Stdout)
	}
	if res.TimedOut || res.ExitCode != 0 {
		t.Errorf("TimedOut=%v ExitCode=%d stderr=%q", res.TimedOut, res.ExitCode, res.Stderr)
	}
	if pids := hostProcesses("sleep\x00317\x00"); len(pids) > 0 {
		t.Fatalf("setsid'd process survived the run: pids %v", pids)
	}
}

// hostProcesses returns the pids whose /proc/<pid>/cmdline equals cmdline
// and that are not zombies.
func hostProcesses(cmdline string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && string(b) == cmdline && processAlive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestContextCancel(t *testing.T) {
	s := newSandbox(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	res, err := s.Run(ctx, core.ExecRequest{Argv: []string{"sleep", "10"}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if !res.TimedOut || res.ExitCode != -1 {
		t.Errorf("TimedOut=%v ExitCode=%d, want true/-1", res.TimedOut, res.ExitCode)
	}

	// Already-cancelled context: nothing runs.
	_, err = s.Run(ctx, core.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestOutputCap(t *testing.T) {
	s := newSandbox(t, Config{})
	tests := []struct {
		name          string
		argv          []string
		limit         int
		wantOut       int
		wantErr       int
		wantTruncated bool
	}{
		{"default limit", []string{"head", "-c", "5000000", "/dev/zero"}, 0, DefaultMaxOutput, 0, true},
		{"request limit", []string{"head", "-c", "5000000", "/dev/zero"}, 4096, 4096, 0, true},
		{"stderr capped", []string{"sh", "-c", "head -c 100000 /dev/zero >&2"}, 1000, 0, 1000, true},
		{"exactly at limit", []string{"head", "-c", "1000", "/dev/zero"}, 1000, 1000, 0, false},
		{"under limit", []string{"head", "-c", "10", "/dev/zero"}, 1000, 10, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, s, core.ExecRequest{Argv: tc.argv, OutputLimit: tc.limit})
			if res.ExitCode != 0 {
				t.Errorf("exit code %d: program blocked or failed", res.ExitCode)
			}
			if len(res.Stdout) != tc.wantOut || len(res.Stderr) != tc.wantErr {
				t.Errorf("kept stdout %d stderr %d bytes, want %d/%d", len(res.Stdout), len(res.Stderr), tc.wantOut, tc.wantErr)
			}
			if res.Truncated != tc.wantTruncated {
				t.Errorf("Truncated = %v, want %v", res.Truncated, tc.wantTruncated)
			}
		})
	}
}

func TestConfigMaxOutput(t *testing.T) {
	s := newSandbox(t, Config{MaxOutput: 100})
	res := run(t, s, core.ExecRequest{Argv: []string{"head", "-c", "5000", "/dev/zero"}})
	if len(res.Stdout) != 100 || !res.Truncated {
		t.Fatalf("kept %d bytes, truncated %v; want 100, true", len(res.Stdout), res.Truncated)
	}
}

func TestConfigDefaultTimeout(t *testing.T) {
	s := newSandbox(t, Config{DefaultTimeout: 200 * time.Millisecond})
	res := run(t, s, core.ExecRequest{Argv: []string{"sleep", "10"}})
	if !res.TimedOut {
		t.Fatal("DefaultTimeout not applied")
	}
}

// tcpProbe listens on host (an address of this machine) and returns a
// command that tries to connect to it, plus a channel that receives once
// per accepted conn.
func tcpProbe(t *testing.T, host string) ([]string, <-chan struct{}, uint16) {
	t.Helper()
	if _, err := resolveProgram("bash", ""); err != nil {
		testenv.Missing(t, "bash (for /dev/tcp) is not in %s (Debian package bash)", MinimalPath)
	}
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	return bashConnect(host, port), accepted, uint16(port)
}

func bashConnect(host string, port int) []string {
	return []string{"bash", "-c", fmt.Sprintf("echo hi > /dev/tcp/%s/%d", host, port)}
}

// quietListener listens on 127.0.0.1 and accepts nobody: a connection
// that got through sits in its queue (the handshake completes in the
// kernel before the client's connect returns, so before Run does), where
// a non-blocking Accept finds it — no waiting to see whether something
// arrives.
func quietListener(t *testing.T) (*net.TCPListener, int) {
	t.Helper()
	quiet, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { quiet.Close() })
	return quiet, quiet.Addr().(*net.TCPAddr).Port
}

// assertNoConnection fails when quiet has a connection waiting.
func assertNoConnection(t *testing.T, quiet *net.TCPListener, who string) {
	t.Helper()
	if err := quiet.SetDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	if c, err := quiet.Accept(); err == nil {
		c.Close()
		t.Fatalf("listener has a connection from %s", who)
	}
}

func TestNetworkIsolation(t *testing.T) {
	quiet, quietPort := quietListener(t)
	argv, accepted, port := tcpProbe(t, "127.0.0.1")
	// The host's loopback listeners' ports are allowed: only the network
	// namespace keeps network-on runs from them.
	s := newSandbox(t, Config{NetworkPorts: []uint16{port, uint16(quietPort)}})

	res := run(t, s, core.ExecRequest{Argv: bashConnect("127.0.0.1", quietPort), Timeout: 10 * time.Second})
	if !strings.Contains(res.Isolation, "netns") {
		t.Errorf("Isolation = %q, want netns", res.Isolation)
	}
	if res.ExitCode == 0 {
		t.Fatalf("isolated program reached the host's 127.0.0.1 listener")
	}
	assertNoConnection(t, quiet, "an isolated program")

	res = run(t, s, core.ExecRequest{Argv: []string{"cat", "/proc/net/dev"}})
	var ifaces []string
	for _, line := range strings.Split(string(res.Stdout), "\n")[2:] {
		if name, _, ok := strings.Cut(line, ":"); ok {
			ifaces = append(ifaces, strings.TrimSpace(name))
		}
	}
	if !slices.Equal(ifaces, []string{"lo"}) {
		t.Errorf("interfaces in namespace = %q, want only lo", ifaces)
	}

	// Network on (its own namespace, pasta): the host's loopback is not
	// reachable, even on an allowed port…
	needPasta(t)
	res = run(t, s, core.ExecRequest{Argv: argv, Network: true, Timeout: 10 * time.Second})
	if !strings.Contains(res.Isolation, "netns+pasta") {
		t.Errorf("Isolation = %q, want netns+pasta", res.Isolation)
	}
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Connection refused") {
		t.Fatalf("program with Network:true reached the host's 127.0.0.1 on an allowed port: exit %d stderr %q, want Connection refused", res.ExitCode, res.Stderr)
	}
	res = run(t, s, core.ExecRequest{Argv: bashConnect("127.0.0.1", quietPort), Network: true, Timeout: 10 * time.Second})
	if res.ExitCode == 0 {
		t.Fatalf("program with Network:true reached the host's 127.0.0.1 listener")
	}
	assertNoConnection(t, quiet, "a program with Network:true")

	// …an allowed port outside is…
	outside := outsideAddr(t)
	if outside == "" {
		t.Skip("no outside address for the allowed case: making one needs root; TestEscapeAsOrdinaryUser runs this as an ordinary user")
	}
	argv, accepted, port = tcpProbe(t, outside)
	s = newSandbox(t, Config{NetworkPorts: []uint16{port}})
	res = run(t, s, core.ExecRequest{Argv: argv, Network: true, Timeout: 10 * time.Second})
	if res.ExitCode != 0 {
		t.Fatalf("program with Network:true could not connect to an allowed port: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("listener saw no connection from a program with Network:true")
	}
	// …and any other port is not (Landlock, and the namespace's filter),
	// e.g. PostgreSQL's.
	closed := newSandbox(t, Config{NetworkPorts: []uint16{1}})
	res = run(t, closed, core.ExecRequest{Argv: argv, Network: true, Timeout: 10 * time.Second})
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Permission denied") {
		t.Fatalf("connect to a port outside network_ports: exit %d stderr %q, want Permission denied", res.ExitCode, res.Stderr)
	}
}

func TestFailClosedWithoutIsolation(t *testing.T) {
	s := newSandbox(t, Config{forceUnavailable: "no user namespaces (test)"})
	if err := s.Available(); !errors.Is(err, core.ErrIsolationUnavailable) {
		t.Fatalf("Available() = %v, want ErrIsolationUnavailable", err)
	}
	dir := t.TempDir()
	for _, network := range []bool{false, true} {
		_, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{"touch", "marker"}, Dir: dir, Network: network})
		if !errors.Is(err, core.ErrIsolationUnavailable) {
			t.Fatalf("err = %v, want ErrIsolationUnavailable", err)
		}
		if !strings.Contains(err.Error(), "no user namespaces (test)") {
			t.Errorf("error message %q does not name what is missing", err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "marker")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("program ran although isolation was unavailable")
	}
	if len(s.Isolation()) != 0 {
		t.Errorf("Isolation() = %q, want none", s.Isolation())
	}
}

func TestLogsNoSecrets(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := newSandbox(t, Config{Logger: logger})
	run(t, s, core.ExecRequest{
		Argv: []string{"sh", "-c", "echo out-secret-1; echo err-secret-2 >&2; echo $TOKEN"},
		Env:  map[string]string{"TOKEN": "env-secret-3"},
	})
	mu.Lock()
	defer mu.Unlock()
	logs := buf.String()
	for _, secret := range []string{"out-secret-1", "err-secret-2", "env-secret-3"} {
		if strings.Contains(logs, secret) {
			t.Errorf("log contains %q:\n%s", secret, logs)
		}
	}
	if !strings.Contains(logs, `"program":"sh"`) || !strings.Contains(logs, `"duration"`) {
		t.Errorf("log lacks program/duration:\n%s", logs)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestConcurrentRuns(t *testing.T) {
	s := newSandbox(t, Config{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			want := fmt.Sprintf("run-%d\n", i)
			res, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{"echo", strings.TrimSpace(want)}})
			if err != nil {
				errs <- err
				return
			}
			if string(res.Stdout) != want {
				errs <- fmt.Errorf("stdout %q, want %q", res.Stdout, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRunAs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("RunAs needs root")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	// The gateway has a supplementary group the program must not keep
	// (a root started from a shell or a container often has none, and
	// then dropping them is not seen). Setgroups applies to every thread
	// of this test binary, so it is put back after.
	old, err := syscall.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setgroups(append(old, 4242)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Setgroups(old); err != nil {
			t.Errorf("restore supplementary groups: %v", err)
		}
	})
	// Default (empty RunAs) and explicit: both nobody. The data dir stays
	// 0700: the program never walks its path.
	for _, runAs := range []string{"", "nobody"} {
		t.Run("run_as="+runAs, func(t *testing.T) {
			s := newSandbox(t, Config{RunAs: runAs})
			res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "id -u; id -g; id -G; touch f"}})
			if res.ExitCode != 0 {
				t.Fatalf("exit %d stderr %q", res.ExitCode, res.Stderr)
			}
			want := u.Uid + "\n" + u.Gid + "\n" + u.Gid + "\n"
			if string(res.Stdout) != want {
				t.Errorf("ids = %q, want %q (uid, gid, no supplementary groups)", res.Stdout, want)
			}
			fi, err := os.Stat(res.Dir)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); strconv.Itoa(int(st.Uid)) != u.Uid {
				t.Errorf("work dir owner uid %d, want %s", st.Uid, u.Uid)
			}
			if fi.Mode().Perm() != 0o700 {
				t.Errorf("work dir mode %v, want 0700", fi.Mode().Perm())
			}
			// The privilege drop applies with network too.
			needPasta(t)
			res = run(t, s, core.ExecRequest{Argv: []string{"id", "-u"}, Network: true})
			if strings.TrimSpace(string(res.Stdout)) != u.Uid {
				t.Errorf("uid with Network:true = %q, want %s", res.Stdout, u.Uid)
			}
		})
	}
	if _, err := New(Config{BaseDir: t.TempDir(), RunAs: "root"}); err == nil || !strings.Contains(err.Error(), "unprivileged") {
		t.Errorf("RunAs root: err = %v, want a refusal", err)
	}
}

func TestRunAsUnknownUser(t *testing.T) {
	_, err := New(Config{BaseDir: t.TempDir(), RunAs: "silas-no-such-user"})
	if err == nil || !strings.Contains(err.Error(), "silas-no-such-user") {
		t.Fatalf("err = %v", err)
	}
}
