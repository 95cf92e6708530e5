//go:build linux

package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sys/unix"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// Each protection of the sandbox (docs/sandbox.md) has a case that fails
// when that protection alone is removed. Each was checked by disabling it
// in a scratch copy, running the named test as root (the non-root re-run
// where said), seeing it fail, and restoring (issue 31; keep this list and
// docs/architecture.md "How we know a test can fail" current):
//
//	protection (where)                            fails without it
//	hide(): hidden dirs and files (init_linux)    TestEscape/hidden_directory…, list_a_hidden…, hidden_file… (root and TestEscapeAsOrdinaryUser)
//	finishFS's second hiding pass                 TestEscapeHiddenPathAppearsLater (root and ordinary user)
//	setgroups(0) (dropPrivileges)                 TestRunAs (the test adds a supplementary group first)
//	capability bounding set drop                  TestEscape/no_capabilities,_no_new_privs,_seccomp
//	no_new_privs                                  TestEscape (the sandbox then refuses to start: fail closed)
//	work dir nosuid; /dev files and hidden        TestEscape/every_mount_nosuid
//	  files remounted nosuid
//	system dirs bound read-only                   TestEscape/write_/etc, write_/usr/bin (EROFS, not Landlock's EACCES)
//	root remounted read-only                      TestEscape/write_/
//	PID namespace                                 TestEscape/own_PID_namespace, signal_the_gateway, gateway's_environ …
//	IPC, cgroup namespaces                        TestEscape/own_namespaces
//	network namespace                             TestEscape/own_namespaces, TestNetworkIsolation
//	network namespace with network (pasta; the    TestEscape/host_loopback_on_an_allowed_port_with_network, host_loopback_UDP_…,
//	  init cloned without CLONE_NEWNET, no        UDP_out_to_a_disallowed_port_with_network, PostgreSQL_TCP_with_network,_its_port_allowed_…;
//	  pasta, no filter: the old shared network)   TestNetworkNamespace/*_host's_loopback_*, UDP_to_a_port_outside…, link-local…; TestNetworkIsolation
//	pasta's --tcp-ns/--udp-ns none (without       TestEscape/host_loopback_on_an_allowed_port_with_network, host_loopback_UDP_…,
//	  them pasta maps the host's loopback ports)    PostgreSQL_TCP_with_network,_its_port_allowed_…; TestNetworkNamespace/*_host's_loopback_*; TestNetworkIsolation
//	the namespace's nftables filter               TestEscape/UDP_out_to_a_disallowed_port_with_network; TestNetworkNamespace/UDP_to_a_port_outside…, link-local…;
//	                                                TestNetworkDNSOnlyViaForwarder
//	Landlock (TCP ports, abstract unix scope)     TestEscape/loopback_listener_with_network, TestNetworkIsolation (abstract_unix_socket_with_network:
//	                                                the network namespace answers first since network-on runs have their own)
//	seccomp filter                                TestEscape/unshare_a_user_namespace, clone_a_user_namespace, add_key, unshare(1)
//	RLIMIT_NOFILE, CORE, CPU, NPROC, DATA; nice   TestEscape/limit:_*, nice_10 (TestEscape lets the runner dump core first)
//	close-on-exec of inherited descriptors        TestEscape/inherits_only_stdin,_stdout,_stderr (setupEscape leaks one)
//	init not dumpable                             TestEscape/init's_environ in TestEscapeAsOrdinaryUser (as root, file modes also stop it)
//	memory cgroup limit (cgroup_linux create)     TestEscapeCgroupLimits/memory_of_several_processes (root, cgroup v1 here:
//	                                                without memory.limit_in_bytes all 6 × 32 MiB were allocated, exit 0)
//	pids.max (cgroup_linux create)                TestEscapeCgroupLimits/tasks_of_the_run… (root, v1: without it the run held
//	                                                68 tasks under max_processes 64 — the init's 5 are root's, not in RLIMIT_NPROC)
//	init spec on a pipe, not argv (spawn)         TestEscape/init's_command_line (with the spec also in argv: the data dir shows)
//	work dir staged on a tmpfs of its own: the    TestEscape/mountinfo_names_no_host_path (a bind instead: /work's line names
//	  gateway's fsmount stage (root), else the      the data dir), TestWorkDirBounded (no ENOSPC past max_work_bytes) — as root
//	  init's stageIn (ordinary user)                with both stagings off, and in TestEscapeAsOrdinaryUser with the init's off
//	                                                (as root with only the gateway's off the init's takes over and both pass)
//	staged run stopped with SIGTERM (stop)        TestWorkDirKeptAfterTimeout in TestEscapeAsOrdinaryUser (SIGKILL: the file is lost)
//	work dir released after the verdict           core/execute TestReleasesWorkDirAfterVerdict; keep_work_for and the cap:
//	  (Release, pruneLocked)                        TestKeptWorkBounded, TestReleaseRemoves
//
// Not each on its own: a seccomp rule for a syscall the kernel refuses an
// unprivileged uid anyway (mount, umount, chroot, pivot_root, kexec_load,
// reboot, init_module, bpf, perf_event_open, setns into a namespace it does
// not own …) cannot make a case fail when removed alone: the program gets
// EPERM either way, and the rule is defence in depth (the rules that do
// fail alone are listed above). The fork and memory bombs of
// TestEscapeResources meet RLIMIT_NPROC and RLIMIT_DATA before the
// cgroups, hence TestEscapeCgroupLimits. The cgroup cases run only as root
// with a writable cgroupfs (skipped otherwise, saying why); cgroup v2 was
// not available on the machine they were checked on. The UTS and mount
// namespaces were not removed in a scratch copy (without them the init
// renames the host and mounts over its root).

// Environment of the escape suite's re-run as an ordinary user.
const (
	envNonRoot = "SILAS_ESCAPE_NONROOT" // set: this process is the non-root re-run
	envHelper  = "SILAS_ESCAPE_HELPER"  // path of the prebuilt probe binary
	envSysDir  = "SILAS_ESCAPE_SYSDIR"  // a dir inside /opt the re-run may write (escapeSysDir)
)

const canary = "SILAS-ESCAPE-CANARY-7f3a"

// escapeBundle is the world an attacker's approved program finds itself in:
// a data dir laid out like the gateway's (keys, secrets key, audit key, a
// PostgreSQL data dir and socket), the gateway's process, a loopback
// listener, a real PostgreSQL server when one is available, another
// execution's work dir, and a probe binary in its own work dir.
type escapeBundle struct {
	s          *Subprocess
	wide       *Subprocess // s, with the loopback listeners' and PostgreSQL's ports allowed
	data       string
	keys       []string // key files under data
	pgData     []string // PostgreSQL data dirs (fake, and the real cluster's when known)
	pgSockets  []string // PostgreSQL unix sockets
	pgTCP      []string // PostgreSQL TCP addresses
	loopback   string   // a 127.0.0.1 listener the test opened
	udpLo      string   // a 127.0.0.1 UDP echo the test opened
	abstract   string   // an abstract unix socket the test listens on ("@…")
	otherWork  string   // another execution's work dir
	probeDir   string   // work dir holding ./escape
	hostTmpDir string   // a directory in the host's /tmp
	// Hidden paths inside a system dir the sandbox shows (/opt), readable
	// by the program's uid: hiding them is their only protection. ""
	// when not testable (an ordinary user without the root parent's
	// escapeSysDir).
	hiddenDir, hiddenFile string
	// visibleSys is a file next to them, not hidden: the control that
	// shows the fixtures are readable without hiding.
	visibleSys string
}

func setupEscape(t *testing.T, cfg Config) *escapeBundle {
	t.Helper()
	b := &escapeBundle{}
	root := t.TempDir()
	b.hostTmpDir = root
	b.data = filepath.Join(root, "data")
	for _, f := range []string{"keys/gateway.key", "keys/secrets.key", "audit/audit.key"} {
		p := filepath.Join(b.data, f)
		mustWrite(t, p, canary+" "+f, 0o600)
		b.keys = append(b.keys, p)
	}
	pgdata := filepath.Join(b.data, "pg", "pgdata")
	mustWrite(t, filepath.Join(pgdata, "PG_VERSION"), "15 "+canary, 0o600)
	b.pgData = append(b.pgData, pgdata)
	sock := filepath.Join(b.data, "pg", ".s.PGSQL.5432")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ul.Close() })
	go acceptAll(ul)
	b.pgSockets = append(b.pgSockets, sock)

	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close() })
	go acceptAll(tl)
	b.loopback = tl.Addr().String()
	al, err := net.Listen("unix", fmt.Sprintf("@silas-escape-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	go acceptAll(al)
	b.abstract = al.Addr().String()

	if os.Getenv(envNonRoot) == "" {
		// The real PostgreSQL the tests use: its TCP port, socket and data dir.
		dsn := pgtest.NewDatabase(t)
		pc, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(pc.Host, "/") {
			b.pgSockets = append(b.pgSockets, filepath.Join(pc.Host, fmt.Sprintf(".s.PGSQL.%d", pc.Port)))
			// The throwaway cluster's superuser DSN is its socket; the
			// server listens on loopback too.
			b.pgTCP = append(b.pgTCP, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(pc.Port))))
		} else {
			b.pgTCP = append(b.pgTCP, net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))))
			socks, _ := filepath.Glob(filepath.Join(os.TempDir(), "silas-pgtest-*", fmt.Sprintf(".s.PGSQL.%d", pc.Port)))
			b.pgSockets = append(b.pgSockets, socks...)
		}
		dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "silas-pgtest-*", "pgdata"))
		b.pgData = append(b.pgData, dirs...)
	}

	hidden := []string{b.data}
	if d := escapeSysDir(t); d != "" {
		// Secrets inside a system dir the sandbox shows read-only, world
		// readable: only hiding keeps them from the program.
		b.hiddenDir, b.hiddenFile, b.visibleSys = filepath.Join(d, "dir"), filepath.Join(d, "file"), filepath.Join(d, "visible")
		writeReadable(t, filepath.Join(b.hiddenDir, "token"), canary+" hidden dir")
		writeReadable(t, b.hiddenFile, canary+" hidden file")
		writeReadable(t, b.visibleSys, "visible to the program")
		writeReadable(t, filepath.Join(d, "sub", "visible"), "visible to the program")
		hidden = append(hidden, b.hiddenDir, b.hiddenFile)
	}
	// A descriptor of a key file the gateway leaks to its children (opened
	// without close-on-exec, as a careless library might): the init has
	// to keep it from the program ("inherits only stdin, stdout, stderr").
	leaked, err := syscall.Open(b.keys[0], syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(leaked) })
	cfg.BaseDir = filepath.Join(b.data, "sandbox")
	cfg.HiddenPaths = append(cfg.HiddenPaths, hidden...)
	b.s = newSandbox(t, cfg)
	b.udpLo = "127.0.0.1:" + strconv.Itoa(udpEcho(t, "127.0.0.1:0"))
	// The same sandbox with the host's loopback listeners and PostgreSQL
	// allowed by port: only the network namespace keeps runs from them.
	wide := cfg
	wide.NetworkPorts = slices.Clone(cfg.NetworkPorts)
	if len(wide.NetworkPorts) == 0 {
		wide.NetworkPorts = slices.Clone(DefaultNetworkPorts)
	}
	wide.NetworkPorts = append(wide.NetworkPorts, addrPort(t, b.loopback), addrPort(t, b.udpLo))
	for _, a := range b.pgTCP {
		wide.NetworkPorts = append(wide.NetworkPorts, addrPort(t, a))
	}
	b.wide = newSandbox(t, wide)

	other := run(t, b.s, core.ExecRequest{Argv: []string{"sh", "-c", "echo " + canary + " > out"}})
	if other.ExitCode != 0 {
		t.Fatalf("other execution: exit %d %s", other.ExitCode, other.Stderr)
	}
	b.otherWork = other.Dir

	b.probeDir, err = b.s.newWorkDir()
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, probeBinary(t), filepath.Join(b.probeDir, "escape"), 0o755)
	if os.Geteuid() == 0 {
		// A setuid-root program the attacker hopes to gain root with.
		copyFile(t, "/usr/bin/id", filepath.Join(b.probeDir, "suid-id"), 0o755)
		if err := os.Chmod(filepath.Join(b.probeDir, "suid-id"), 0o4755); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// probeBinary builds the escape probe once per test binary (statically, so
// it runs inside the sandbox whatever the test binary is built with).
func probeBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(envHelper); p != "" {
		return p
	}
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "silas-escape-probe-")
		if err != nil {
			probeErr = err
			return
		}
		probePath = filepath.Join(dir, "escape")
		cmd := exec.Command(goTool(), "build", "-o", probePath, "./testdata/escape")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			probeErr = fmt.Errorf("build probe: %v\n%s", err, out)
		}
	})
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return probePath
}

var (
	probeOnce sync.Once
	probePath string
	probeErr  error
)

func goTool() string {
	//lint:ignore SA1019 the test runs where it was built, so the build's GOROOT holds the go that runs it
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return "go"
}

func acceptAll(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// escapeSysDir is a fresh directory inside a system dir the sandbox shows
// read-only, writable by this process, for hidden-path fixtures: made in
// /opt (or /usr/local) as root, handed over by the root parent in the
// ordinary user's re-run (envSysDir), "" otherwise.
func escapeSysDir(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(envSysDir); p != "" {
		d, err := os.MkdirTemp(p, "case-")
		if err != nil {
			t.Fatal(err)
		}
		return openDir(t, d)
	}
	if os.Geteuid() != 0 {
		t.Log("hidden-path cases left out: an ordinary user cannot write inside a system dir (TestEscapeAsOrdinaryUser runs them)")
		return ""
	}
	return openDir(t, sysTempDir(t))
}

// sysTempDir makes a directory in /opt or /usr/local (both shown in the
// sandbox), removed after the test.
func sysTempDir(t *testing.T) string {
	t.Helper()
	var errs []error
	for _, parent := range []string{"/opt", "/usr/local"} {
		d, err := os.MkdirTemp(parent, "silas-escape-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
		errs = append(errs, err)
	}
	t.Fatalf("no directory inside a system dir for hidden-path fixtures: %v", errs)
	return ""
}

// openDir makes d traversable by everyone (MkdirTemp makes it 0700).
func openDir(t *testing.T, d string) string {
	t.Helper()
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// writeReadable writes a world-readable file, its directories 0755.
func writeReadable(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// addrPort is the port of a "host:port" address.
func addrPort(t *testing.T, addr string) uint16 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	return uint16(n)
}

type escapeCase struct {
	name    string
	argv    []string
	network bool
	// wide: run in the sandbox that allows the loopback listeners' and
	// PostgreSQL's ports (network on).
	wide bool
	// want: the combined output contains one of these (the specific
	// failure, not just a non-zero exit).
	want []string
	// exitZero: the attempt "succeeds" harmlessly (e.g. shows the sandbox's
	// own view); want is then checked on stdout.
	exitZero bool
	// notWant: the output contains none of these.
	notWant []string
}

// TestEscape is the sandbox escape suite: every attempt an approved program
// could make to break the model fails, with the specific error. It runs as
// root here and in CI; TestEscapeAsOrdinaryUser re-runs it as uid 65534.
func TestEscape(t *testing.T) {
	allowCoreDumps(t)
	b := setupEscape(t, Config{})
	gw := strconv.Itoa(os.Getpid())
	const (
		enoent   = "no such file or directory"
		eperm    = "operation not permitted"
		eacces   = "permission denied"
		erofs    = "read-only file system"
		unreach  = "network is unreachable"
		esrch    = "no such process"
		probe    = "./escape"
		shENOENT = "No such file or directory"
	)
	var cases []escapeCase
	for _, k := range b.keys {
		cases = append(cases,
			escapeCase{name: "read " + filepath.Base(k), argv: []string{probe, "read", k}, want: []string{enoent}},
			escapeCase{name: "cat " + filepath.Base(k), argv: []string{"cat", k}, want: []string{shENOENT}},
		)
	}
	cases = append(cases,
		escapeCase{name: "cat both keys (the reported attack)", argv: []string{"cat", b.keys[0], b.keys[1]}, want: []string{shENOENT}},
		escapeCase{name: "list the data dir", argv: []string{"ls", "-la", b.data}, want: []string{shENOENT}},
		escapeCase{name: "another execution's work dir", argv: []string{"cat", filepath.Join(b.otherWork, "out")}, want: []string{shENOENT}},
		escapeCase{name: "write into the data dir", argv: []string{probe, "write", filepath.Join(b.data, "x")}, want: []string{enoent}},
		escapeCase{name: "the host's /tmp", argv: []string{"ls", b.hostTmpDir}, want: []string{shENOENT}},
		escapeCase{name: "write /etc", argv: []string{probe, "write", "/etc/silas-escape"}, want: []string{erofs}},
		escapeCase{name: "write /usr/bin", argv: []string{probe, "write", "/usr/bin/silas-escape"}, want: []string{erofs}},
		escapeCase{name: "write /", argv: []string{probe, "write", "/silas-escape"}, want: []string{erofs}},
		escapeCase{name: "gateway's environ", argv: []string{"cat", "/proc/" + gw + "/environ"}, want: []string{shENOENT}},
		escapeCase{name: "init's environ", argv: []string{"cat", "/proc/1/environ"}, want: []string{"Permission denied"}},
		escapeCase{name: "nsenter the gateway's network", argv: []string{"nsenter", "--net=/proc/" + gw + "/ns/net", "true"}, want: []string{shENOENT}},
		escapeCase{name: "setns", argv: []string{probe, "setns", "/proc/self/ns/net"}, want: []string{eperm}},
		escapeCase{name: "unshare a user namespace", argv: []string{probe, "unshare-user"}, want: []string{eperm}},
		escapeCase{name: "unshare a network namespace", argv: []string{probe, "unshare-net"}, want: []string{eperm}},
		escapeCase{name: "unshare(1)", argv: []string{"unshare", "-U", "-r", "true"}, want: []string{"Operation not permitted"}},
		escapeCase{name: "clone a user namespace", argv: []string{probe, "clone-newuser"}, want: []string{eperm}},
		escapeCase{name: "signal the gateway", argv: []string{probe, "kill", gw}, want: []string{esrch}},
		escapeCase{name: "kill(1) the gateway", argv: []string{"kill", "-9", gw}, want: []string{"No such process"}},
		escapeCase{name: "ptrace", argv: []string{probe, "ptrace", "1"}, want: []string{eperm}},
		escapeCase{name: "mount", argv: []string{probe, "mount"}, want: []string{eperm}},
		escapeCase{name: "umount /proc", argv: []string{probe, "umount"}, want: []string{eperm}},
		escapeCase{name: "chroot", argv: []string{probe, "chroot"}, want: []string{eperm}},
		escapeCase{name: "bpf", argv: []string{probe, "bpf"}, want: []string{eperm}},
		escapeCase{name: "add_key", argv: []string{probe, "keyctl"}, want: []string{eperm}},
		escapeCase{name: "perf_event_open", argv: []string{probe, "perf"}, want: []string{eperm}},
		escapeCase{name: "kexec_load", argv: []string{probe, "kexec"}, want: []string{eperm}},
		escapeCase{name: "init_module", argv: []string{probe, "init-module"}, want: []string{eperm}},
		escapeCase{name: "reboot", argv: []string{probe, "reboot"}, want: []string{eperm}},
		// EINVAL in a user namespace, where uid 0 is not even mapped.
		escapeCase{name: "setuid(0)", argv: []string{probe, "setuid-root"}, want: []string{eperm, "invalid argument"}},
		// Without network two layers answer: Landlock (no TCP at all) and
		// the empty network namespace.
		escapeCase{name: "loopback listener", argv: []string{probe, "connect-tcp", b.loopback}, want: []string{eacces, unreach}},
		escapeCase{name: "loopback listener from a shell", argv: []string{"bash", "-c", "echo > /dev/tcp/" + strings.Replace(b.loopback, ":", "/", 1)}, want: []string{"Permission denied", "Network is unreachable"}},
		escapeCase{name: "loopback listener with network", argv: []string{probe, "connect-tcp", b.loopback}, network: true, want: []string{eacces}},
		// Network on, the port allowed: the run's own network namespace
		// has its own loopback; pasta maps none of the host's into it.
		escapeCase{name: "host loopback on an allowed port with network", argv: []string{probe, "connect-tcp", b.loopback}, network: true, wide: true, want: []string{"connection refused"}},
		escapeCase{name: "host loopback UDP on an allowed port with network", argv: []string{probe, "send-udp", b.udpLo}, network: true, wide: true, want: []string{"connection refused"}},
		// UDP out to a port that is not allowed: the namespace's filter
		// (Landlock has no UDP rules).
		escapeCase{name: "UDP out to a disallowed port with network", argv: []string{probe, "send-udp", udpOutsideTarget(t)}, network: true, want: []string{eperm}},
		escapeCase{name: "no capabilities, no_new_privs, seccomp", argv: []string{"grep", "-E", "^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):", "/proc/self/status"},
			exitZero: true, want: []string{"CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2"}},
		escapeCase{name: "own PID namespace", argv: []string{"sh", "-c", "ls /proc | grep -c '^[0-9]'"}, exitZero: true, want: []string{"3\n", "4\n"}},
		escapeCase{name: "own UTS namespace", argv: []string{"hostname"}, exitZero: true, want: []string{"silas-sandbox\n"}},
		// ls's own directory descriptor is the 3.
		escapeCase{name: "inherits only stdin, stdout, stderr", argv: []string{"ls", "/proc/self/fd"}, exitZero: true, want: []string{"0\n1\n2\n3\n"}},
		escapeCase{name: "every mount nosuid", argv: []string{"sh", "-c", `echo "without nosuid: [$(grep -v nosuid /proc/self/mounts)]"`},
			exitZero: true, want: []string{"without nosuid: []\n"}},
		// One case per limit, read from /proc/self/limits (the kernel's
		// fixed-width table, whatever the shell): open files, core dumps,
		// CPU time (the case's 20 s timeout + 1, hard + 1 more),
		// processes (as an ordinary user the init's 16 threads share the
		// count), data; and nice.
		limitCase("open files", DefaultMaxOpenFiles, DefaultMaxOpenFiles, "files"),
		limitCase("core file size", 0, 0, "bytes"),
		limitCase("cpu time", 21, 22, "seconds"),
		limitCase("processes", nprocLimit(DefaultMaxProcs), nprocLimit(DefaultMaxProcs), "processes"),
		limitCase("data size", DefaultMaxMemory, DefaultMaxMemory, "bytes"),
		escapeCase{name: "nice 10", argv: []string{"nice"}, exitZero: true, want: []string{"10\n"}},
		escapeCase{name: "own namespaces", argv: append([]string{"readlink"}, nsLinks...), exitZero: true, want: []string{"ipc:["}, notWant: hostNamespaces(t)},
		// The host's abstract unix sockets: another network namespace,
		// with network too (abstract names are per namespace), and
		// Landlock's scope (EPERM) under it.
		escapeCase{name: "abstract unix socket", argv: []string{probe, "connect-unix", b.abstract}, want: []string{"connection refused"}},
		escapeCase{name: "abstract unix socket with network", argv: []string{probe, "connect-unix", b.abstract}, network: true, want: []string{"connection refused", eperm}},
	)
	for _, d := range b.pgData {
		cases = append(cases, escapeCase{name: "PostgreSQL data dir " + d, argv: []string{"ls", d}, want: []string{shENOENT}})
	}
	for _, s := range b.pgSockets {
		cases = append(cases, escapeCase{name: "PostgreSQL socket " + s, argv: []string{probe, "connect-unix", s}, want: []string{enoent}})
	}
	for _, a := range b.pgTCP {
		cases = append(cases,
			escapeCase{name: "PostgreSQL TCP " + a, argv: []string{probe, "connect-tcp", a}, want: []string{eacces, unreach}},
			escapeCase{name: "PostgreSQL TCP with network " + a, argv: []string{probe, "connect-tcp", a}, network: true, want: []string{eacces}},
			escapeCase{name: "PostgreSQL TCP with network, its port allowed " + a, argv: []string{probe, "connect-tcp", a}, network: true, wide: true, want: []string{"connection refused"}},
		)
	}
	if b.hiddenDir != "" {
		cases = append(cases,
			// The control: the same dir, the same permissions, not hidden.
			escapeCase{name: "unhidden file inside a system dir (control)", argv: []string{"cat", b.visibleSys}, exitZero: true, want: []string{"visible to the program"}},
			// An empty read-only tmpfs of mode 0000 covers the directory.
			escapeCase{name: "hidden directory inside a system dir", argv: []string{"cat", filepath.Join(b.hiddenDir, "token")}, want: []string{"Permission denied"}},
			escapeCase{name: "list a hidden directory", argv: []string{"ls", "-A", b.hiddenDir}, want: []string{"Permission denied"}},
			// /dev/null covers the file.
			escapeCase{name: "hidden file inside a system dir", argv: []string{"wc", "-c", b.hiddenFile}, exitZero: true, want: []string{"0 " + b.hiddenFile}},
		)
	}
	// The init's configuration (the data dir, hidden paths, the base dir)
	// comes on a pipe, not its command line.
	cases = append(cases, escapeCase{name: "init's command line", argv: []string{"cat", "/proc/1/cmdline"}, exitZero: true,
		want: []string{initArg0 + "\x00" + initSpecArg + "\x00"}, notWant: []string{b.data, "hide", "{"}})
	// The work dir is a tmpfs of its own (the gateway's stage as root,
	// the init's as an ordinary user): no mount shows a host path of the
	// gateway's.
	cases = append(cases, escapeCase{name: "mountinfo names no host path", argv: []string{"cat", "/proc/self/mountinfo"}, exitZero: true,
		want: []string{" / /work rw,"}, notWant: []string{b.data, b.probeDir, b.hostTmpDir}})
	if b.hiddenDir != "" {
		// Nor a hidden path inside a system dir: no mount is made on it
		// (its parent is rebuilt without it), so mountinfo never names it.
		cases = append(cases, escapeCase{name: "mountinfo names no hidden path", argv: []string{"cat", "/proc/self/mountinfo"}, exitZero: true,
			want: []string{" " + b.visibleSys + " ro,"}, notWant: []string{b.hiddenDir, b.hiddenFile}},
			// The rebuilt parent's other entries are the host's, read-only.
			escapeCase{name: "mountinfo: a dir next to a hidden path is read-only", argv: []string{"cat", "/proc/self/mountinfo"}, exitZero: true,
				want: []string{" " + filepath.Join(filepath.Dir(b.visibleSys), "sub") + " ro,"}},
			escapeCase{name: "a file in a dir next to a hidden path", argv: []string{"cat", filepath.Join(filepath.Dir(b.visibleSys), "sub", "visible")}, exitZero: true,
				want: []string{"visible to the program"}})
	}
	if os.Geteuid() == 0 {
		cases = append(cases, escapeCase{name: "setuid-root binary", argv: []string{"./suid-id"}, exitZero: true, want: []string{"uid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)\n"}})
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := b.s
			if tc.wide {
				s = b.wide
			}
			if tc.network {
				needPasta(t)
			}
			res := run(t, s, core.ExecRequest{Argv: tc.argv, Dir: b.probeDir, Network: tc.network, Timeout: 20 * time.Second})
			out := string(res.Stdout) + string(res.Stderr)
			if strings.Contains(out, canary) {
				t.Fatalf("the canary leaked:\n%s", out)
			}
			for _, nw := range tc.notWant {
				if strings.Contains(out, nw) {
					t.Fatalf("output shows %q:\n%s", nw, out)
				}
			}
			if tc.exitZero != (res.ExitCode == 0) {
				t.Fatalf("exit code %d; output:\n%s", res.ExitCode, out)
			}
			for _, w := range tc.want {
				if strings.Contains(out, w) {
					return
				}
			}
			t.Fatalf("output does not show the expected failure %q:\n%s", tc.want, out)
		})
	}
}

// udpOutsideTarget is where the escape suite sends UDP to a port that is
// not allowed: a UDP echo on the outside address when there is one, or a
// TEST-NET-2 address (never routed) otherwise. Either way only the
// namespace's filter refuses the datagram (EPERM); without it the echo
// answers, or the read times out.
func udpOutsideTarget(t *testing.T) string {
	t.Helper()
	if o := outsideAddr(t); o != "" {
		return net.JoinHostPort(o, strconv.Itoa(udpEcho(t, o+":0")))
	}
	return "198.51.100.1:9"
}

// allowCoreDumps lets this process (and so the sandbox's init, which
// inherits its limits) write core dumps, so that "limit: core file size" sees the
// sandbox's own RLIMIT_CORE of 0 and not one inherited from a test runner
// that already had 0.
func allowCoreDumps(t *testing.T) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CORE, &old); err != nil {
		t.Fatal(err)
	}
	want := syscall.Rlimit{Cur: 1 << 20, Max: max(old.Max, 1<<20)}
	if os.Geteuid() != 0 {
		want = syscall.Rlimit{Cur: old.Max, Max: old.Max} // an ordinary user cannot raise the hard limit
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &want); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_CORE, &old) })
}

// limitCase expects /proc/self/limits to show the limit's soft and hard
// values (the kernel prints "%-25s %-20s %-20s %-10s").
func limitCase(name string, soft, hard int, unit string) escapeCase {
	line := fmt.Sprintf("%-25s %-20d %-20d %-10s", "Max "+name, soft, hard, unit)
	return escapeCase{name: "limit: " + name, argv: []string{"cat", "/proc/self/limits"}, exitZero: true, want: []string{line}}
}

// nprocLimit is the RLIMIT_NPROC a run of max processes gets (setLimits).
func nprocLimit(max int) int {
	if os.Geteuid() != 0 {
		return max + 16
	}
	return max
}

// nsLinks are the namespaces a run gets of its own (network: without
// network).
var nsLinks = []string{"/proc/self/ns/ipc", "/proc/self/ns/uts", "/proc/self/ns/cgroup", "/proc/self/ns/mnt", "/proc/self/ns/pid", "/proc/self/ns/net"}

// hostNamespaces are this process's namespaces, as readlink prints them.
func hostNamespaces(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, l := range nsLinks {
		ns, err := os.Readlink(l)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ns)
	}
	return out
}

// TestEscapeHiddenPathAppearsLater: a hidden path that appears after a
// warm init built its filesystem (setupFS) is covered when the run starts
// (finishFS's second pass). The fixture is readable by the program's uid,
// in a system dir the sandbox shows: that pass is its only protection.
func TestEscapeHiddenPathAppearsLater(t *testing.T) {
	d := escapeSysDir(t)
	if d == "" {
		t.Skip("an ordinary user cannot write inside a system dir (TestEscapeAsOrdinaryUser runs this)")
	}
	late := filepath.Join(d, "late")
	s := newSandbox(t, Config{HiddenPaths: []string{late}})
	// The init the run will get: started and ready (its filesystem built,
	// "R" on the status pipe) before the path exists. The probe's refill
	// is drained first, so the pool holds only this one.
	s.poolWG.Wait()
	for len(s.pools[false]) > 0 {
		(<-s.pools[false]).discard()
	}
	w, err := s.spawn(false)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := unix.IoctlGetInt(int(w.statusR.Fd()), unix.TIOCINQ) // FIONREAD: bytes waiting, none consumed
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the warm init did not report ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.pools[false] <- w
	writeReadable(t, filepath.Join(late, "token"), canary+" late")
	res := run(t, s, core.ExecRequest{Argv: []string{"cat", filepath.Join(late, "token")}})
	out := string(res.Stdout) + string(res.Stderr)
	if strings.Contains(out, canary) || res.ExitCode == 0 || !strings.Contains(out, "Permission denied") {
		t.Fatalf("a hidden path made after the sandbox was built: exit %d, want Permission denied:\n%s", res.ExitCode, out)
	}
}

// TestEscapeResources: a fork bomb, a memory bomb and a setsid'd process
// each end with their run, and leave nothing behind.
func TestEscapeResources(t *testing.T) {
	// The memory limit stays at its default: lower ones also starve a
	// race-enabled init (its sanitizer maps count as data), not only the
	// program.
	b := setupEscape(t, Config{MaxProcs: 64})
	t.Run("fork bomb", func(t *testing.T) {
		// The shell stays to watch its bomb: it forks once, before the
		// bomb exists, then waits in a builtin loop (a later fork of its
		// own could meet the full process table, and dash exits 2 on a
		// failed fork), so the run usually ends at the timeout. It may
		// end sooner, and that is no escape: the init is a Go program
		// that shares the bomb's count — as an ordinary user its uid's
		// RLIMIT_NPROC, as root the run's pids cgroup — and a Go runtime
		// that cannot start a thread it needs aborts (exit 2, its trace
		// after the shells' "Cannot fork"; once in about 200 runs of the
		// ordinary user's re-run under load). The init's exit ends the PID
		// namespace, which ends the bomb too. So what is checked is what
		// the boundary guarantees whenever the run ends: the bomb met the
		// process limit, nothing of it outlives the run, and the gateway
		// runs the next program as before.
		bomb := "(f(){ f|f& };f) & while :; do :; done"
		res := run(t, b.s, core.ExecRequest{Argv: []string{"sh", "-c", bomb}, Timeout: 3 * time.Second})
		if !res.TimedOut && res.ExitCode == 0 {
			t.Errorf("the bomb's run neither timed out nor failed: exit 0, stderr:\n%.300s", res.Stderr)
		}
		if !strings.Contains(string(res.Stderr), "fork") {
			t.Errorf("stderr shows no failed fork (stopped by the process limit):\n%.500s", res.Stderr)
		}
		waitGone(t, "sh\x00-c\x00"+bomb+"\x00")
		after := run(t, b.s, core.ExecRequest{Argv: []string{"sh", "-c", "echo after the bomb"}})
		if after.ExitCode != 0 || string(after.Stdout) != "after the bomb\n" {
			t.Errorf("the run after the bomb's: exit %d, stdout %q, stderr %.300s", after.ExitCode, after.Stdout, after.Stderr)
		}
	})
	t.Run("memory bomb", func(t *testing.T) {
		// Touching a gigabyte of pages takes a while on a busy machine;
		// what is proved is the limit, not the speed.
		res := run(t, b.s, core.ExecRequest{Argv: []string{"./escape", "memory"}, Dir: b.probeDir, Timeout: 90 * time.Second})
		out := string(res.Stdout) + string(res.Stderr)
		if res.ExitCode == 0 {
			t.Fatalf("8 GiB were allocated under a 1 GiB limit:\n%s", out)
		}
		// Either mmap fails at the data limit, or the memory cgroup's OOM
		// killer ends the run first.
		if !strings.Contains(out, "cannot allocate memory") && res.ExitCode != 128+9 {
			t.Fatalf("exit %d, want ENOMEM from the data limit or SIGKILL by the memory cgroup:\n%.500s", res.ExitCode, out)
		}
	})
	t.Run("setsid survives the run", func(t *testing.T) {
		res := run(t, b.s, core.ExecRequest{Argv: []string{"sh", "-c", "setsid sleep 317 & setsid sh -c 'sleep 319 &' ; sleep 0.1; echo started"}})
		if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "started") {
			t.Fatalf("exit %d %s", res.ExitCode, res.Stderr)
		}
		waitGone(t, "sleep\x00317\x00")
		waitGone(t, "sleep\x00319\x00")
	})
	t.Run("file size", func(t *testing.T) {
		s := newSandbox(t, Config{MaxFileSize: 1 << 20})
		res := run(t, s, core.ExecRequest{Argv: []string{"sh", "-c", "head -c 2097152 /dev/zero > big; echo rc=$?; wc -c < big"}})
		if !strings.Contains(string(res.Stdout), "1048576") {
			t.Fatalf("file grew past max_file_bytes: %q %q", res.Stdout, res.Stderr)
		}
	})
}

// TestEscapeCgroupLimits: the run's cgroups bound what the rlimits cannot.
// RLIMIT_DATA bounds each process, not the run: several processes, each
// well under it, together exceed the run's memory cgroup and the OOM
// killer ends one (exit 137). RLIMIT_NPROC counts the program's uid only:
// the init's own tasks (root's) count only in the run's pids cgroup, so
// without pids.max the run holds more than max_processes tasks.
func TestEscapeCgroupLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups are used only when the gateway runs as root")
	}
	if _, err := detectCgroups(); err != nil {
		t.Skipf("no cgroups to test here (the sandbox runs on rlimits alone): %v", err)
	}
	const (
		mem   = 96 << 20
		procs = 64
	)
	s := newSandbox(t, Config{MaxMemory: mem, MaxProcs: procs})
	if s.cgroups == nil {
		t.Fatal("cgroups detected, but the sandbox does not use them")
	}
	dir, err := s.newWorkDir()
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, probeBinary(t), filepath.Join(dir, "escape"), 0o755)

	t.Run("memory of several processes", func(t *testing.T) {
		// 6 × 32 MiB: each well under the 96 MiB data limit (with the
		// data the child shares with its Go parent), together twice the
		// run's memory.
		res := run(t, s, core.ExecRequest{Argv: []string{"./escape", "memory-split", "6", "32"}, Dir: dir, Timeout: 60 * time.Second})
		out := string(res.Stdout) + string(res.Stderr)
		if res.ExitCode != 128+9 {
			t.Fatalf("exit %d, want 137 (the memory cgroup's OOM killer):\n%s", res.ExitCode, out)
		}
	})
	t.Run("tasks of the run, the init's included", func(t *testing.T) {
		res := run(t, s, core.ExecRequest{Argv: []string{"./escape", "tasks"}, Dir: dir, Timeout: 60 * time.Second})
		out := string(res.Stdout) + string(res.Stderr)
		m := regexp.MustCompile(`the run held (\d+) tasks`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("unexpected output, exit %d:\n%s", res.ExitCode, out)
		}
		if total, _ := strconv.Atoi(m[1]); total > procs {
			t.Fatalf("the run held %d tasks, more than max_processes %d:\n%s", total, procs, out)
		}
	})
}

// waitGone fails unless no host process has cmdline (killed processes take
// a moment to disappear; the bound only ends the wait for them).
func waitGone(t *testing.T, cmdline string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids := hostProcesses(cmdline)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %q outlived their run: %v", strings.ReplaceAll(cmdline, "\x00", " "), pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEscapeAsOrdinaryUser re-runs the escape suite as uid 65534, where the
// sandbox uses a user namespace instead of root's privilege drop.
func TestEscapeAsOrdinaryUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("already running as an ordinary user (TestEscape covers it)")
	}
	if os.Getenv(envNonRoot) != "" {
		t.Skip("nested")
	}
	dir := t.TempDir()
	// t.TempDir's dirs are 0700: open the two the test made to others.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for d := filepath.Dir(dir); d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s is not traversable by others", d)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	copyFile(t, self, bin, 0o755)
	helper := filepath.Join(dir, "escape")
	copyFile(t, probeBinary(t), helper, 0o755)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	// A dir inside /opt the re-run may write, for its hidden-path
	// fixtures: there hiding is the only protection (the program keeps
	// the gateway's uid, which owns them).
	sys := sysTempDir(t)
	for _, d := range []string{tmp, sys} {
		if err := os.Chown(d, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-test.run", "^(TestEscape|TestEscapeHiddenPathAppearsLater|TestEscapeResources|TestRunResults|TestNetworkIsolation|TestNetworkNamespace|TestWorkDirBounded|TestKeptWorkBounded|TestWorkDirKeptAfterTimeout)$", "-test.v", "-test.count=1")
	cmd.Dir = tmp
	cmd.Env = []string{"PATH=" + MinimalPath, "TMPDIR=" + tmp, "HOME=" + tmp, envNonRoot + "=1", envHelper + "=" + helper, envSysDir + "=" + sys}
	if o := outsideAddr(t); o != "" {
		cmd.Env = append(cmd.Env, envOutside+"="+o)
	}
	cmd.SysProcAttr = sysProcAttrAs(65534, 65534)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("as uid 65534:\n%s", out.String())
	if err != nil {
		t.Fatalf("escape suite as an ordinary user failed: %v", err)
	}
	for _, ran := range []string{"--- PASS: TestEscape ", "--- PASS: TestEscape/hidden_directory_inside_a_system_dir ",
		"--- PASS: TestEscape/hidden_file_inside_a_system_dir ", "--- PASS: TestEscapeHiddenPathAppearsLater ",
		"--- PASS: TestEscape/mountinfo_names_no_host_path ", "--- PASS: TestWorkDirBounded "} {
		if !strings.Contains(out.String(), ran) {
			t.Fatalf("the escape suite did not run as an ordinary user: no %q", ran)
		}
	}
}

func sysProcAttrAs(uid, gid uint32) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
}
