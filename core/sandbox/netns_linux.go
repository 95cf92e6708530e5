//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/silas-gateway/silas/core"
)

// Network-on runs (gateway side).
//
// A run with network gets its own network namespace like every other run;
// pasta (Debian package passt), a user-space network stack, attaches to it
// from the host: it creates a tap device in the namespace, gives it the
// host's address and routes, and turns the run's packets into ordinary
// sockets of its own on the host. Nothing is forwarded into the namespace
// (-t/-u none), no port of the host's loopback is mapped into it (-T/-U
// none) and the gateway address is not remapped to the host (--no-map-gw):
// 127.0.0.1 inside is the run's own loopback, and the host's loopback
// services have no route from the run. The port allowlist is enforced
// inside the namespace (netfilter_linux.go): TCP and UDP only to
// sandbox.network_ports, plus UDP 53 to pasta's DNS forwarder (the only
// resolver resolv.conf names), which pasta sends on to the host's
// configured resolver or to sandbox.network_dns (netDNS); Landlock still allows TCP connect only to those
// ports.

// pastaTool is the user-space network stack network-on runs need, and the
// Debian package that has it.
const (
	pastaTool    = "pasta"
	pastaPackage = "passt"
)

// dnsForwardAddr is the resolver a network-on run sees (its
// /etc/resolv.conf): pasta maps UDP port 53 of this address to the first
// resolver the host is configured with. Link-local, so it never hides a
// real destination; every other link-local address (cloud metadata
// services) is dropped inside the namespace.
const dnsForwardAddr = "169.254.0.53"

// netReadyTimeout bounds how long a network-on init waits for pasta to
// configure its namespace.
const netReadyTimeout = 10 * time.Second

// netHelperArg0 is argv[0] of the gateway binary re-executed, as root, to
// start pasta: see netHelper.
const netHelperArg0 = "silas-sandbox-netns"

// pastaDirs are searched for pasta when the gateway's PATH lacks it (a
// service manager's PATH may be minimal).
var pastaDirs = []string{"/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin", "/bin", "/sbin"}

// findPasta returns pasta's path, or an error naming the tool and its
// package (wrapping core.ErrIsolationUnavailable). want overrides the
// search (tests); "" searches PATH and pastaDirs.
func findPasta(want string) (string, error) {
	missing := func(err error) (string, error) {
		return "", fmt.Errorf("sandbox: network-on actions need %s (Debian package %s) to give them their own network namespace: %w; they are refused until it is installed: %w",
			pastaTool, pastaPackage, err, core.ErrIsolationUnavailable)
	}
	if want != "" {
		if err := isExecutableFile(want); err != nil {
			return missing(fmt.Errorf("%s: %w", want, err))
		}
		return want, nil
	}
	if p, err := exec.LookPath(pastaTool); err == nil {
		if a, err := filepath.Abs(p); err == nil {
			return a, nil
		}
	}
	for _, d := range pastaDirs {
		p := filepath.Join(d, pastaTool)
		if isExecutableFile(p) == nil {
			return p, nil
		}
	}
	return missing(fmt.Errorf("%s not found in PATH or %v", pastaTool, pastaDirs))
}

// NetworkAvailable reports nil when network-on actions can run here, or
// why they are refused (wrapping core.ErrIsolationUnavailable): the whole
// sandbox is unavailable, or pasta is missing.
func (s *Subprocess) NetworkAvailable() error {
	if s.unavailable != nil {
		return s.unavailable
	}
	return s.netErr
}

// ProbeNetwork runs `true` with network once and reports nil when that
// worked, or why network-on actions fail here (pasta missing, or pasta
// or the namespace's filter not working on this host). For doctor: runs
// find the same errors themselves.
func (s *Subprocess) ProbeNetwork() error {
	if err := s.NetworkAvailable(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	res, err := s.Run(ctx, core.ExecRequest{Argv: []string{"true"}, Network: true, Timeout: probeTimeout})
	if err != nil {
		return err
	}
	_ = s.Cleanup(res.Dir)
	if res.ExitCode != 0 {
		return fmt.Errorf("sandbox: network probe: `true` exited %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	return nil
}

// pastaArgs are pasta's options for a run's namespace (see the comment at
// the top of this file). pasta's stderr is kept for the error message when
// it fails.
func (s *Subprocess) pastaArgs(readyPath string) []string {
	return append([]string{
		"--foreground", "--quiet",
		"--config-net",
		"--tcp-ports", "none", "--udp-ports", "none", // nothing forwarded into the run
		"--tcp-ns", "none", "--udp-ns", "none", // no port of the host's loopback mapped into it
		"--no-map-gw",                         // the gateway address is not the host
		"--no-icmp",                           // no ping sockets on the host
		"--no-dhcp", "--no-dhcpv6", "--no-ra", // --config-net configured it
		"--dns-forward", dnsForwardAddr, // the run's only resolver
		"--pid", readyPath, // written once the namespace is configured
	}, s.dns.args...)
}

// netDNS is where a network-on run's DNS queries go: pasta forwards what
// the run sends to its resolver (dnsForwardAddr, the only one its
// resolv.conf names) to the first nameserver of the host's
// /etc/resolv.conf, or to Config.NetworkDNS when set.
type netDNS struct {
	// args are pasta's options for it (--dns-host, where pasta has it).
	args []string
	// resolvConf, when set, is the upstream the root helper names in a
	// resolv.conf of its own, bound over /etc/resolv.conf in its private
	// mount namespace before pasta reads it (a pasta without --dns-host
	// takes the upstream from that file only).
	resolvConf string
}

// configureDNS sets where network-on runs' DNS goes (Config.NetworkDNS;
// "" leaves pasta's default). An upstream that is not an IPv4 address is
// an error: the run's forwarder address is IPv4, and pasta forwards only to
// a resolver of the same version. Where the upstream cannot be set (a
// pasta without --dns-host, Silas not root), network-on runs are refused
// with the reason rather than sent to another resolver.
func (s *Subprocess) configureDNS(upstream string) error {
	if upstream == "" {
		return nil
	}
	ip, err := netip.ParseAddr(upstream)
	if err != nil || !ip.Is4() {
		return fmt.Errorf("sandbox: network DNS upstream %q is not an IPv4 address", upstream)
	}
	if s.netErr != nil {
		return nil // network-on runs are refused anyway
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	help, _ := exec.CommandContext(ctx, s.pasta, "--help").CombinedOutput()
	switch {
	case bytes.Contains(help, []byte("--dns-host")):
		s.dns.args = []string{"--dns-host", ip.String()}
	case s.root:
		s.dns.resolvConf = ip.String()
	default:
		s.netErr = fmt.Errorf("sandbox: sandbox.network_dns needs a %s with --dns-host (a newer %s) when Silas does not run as root; network-on actions are refused until then: %w",
			pastaTool, pastaPackage, core.ErrIsolationUnavailable)
	}
	return nil
}

// netAttach is pasta serving one init's network namespace.
type netAttach struct {
	cmd    *exec.Cmd
	stderr *capWriter
	exited chan struct{} // closed once pasta has been waited for
}

// stop ends pasta. It does not wait: the goroutine started with pasta
// reaps it, off the path between the program's end and Run's return (the
// run's processes are gone by then; pasta only holds the empty namespace).
func (n *netAttach) stop() {
	if n == nil {
		return
	}
	_ = n.cmd.Process.Kill()
}

// attachNet starts pasta on the network namespace of the init with host
// PID pid and waits until it has configured it.
//
// As an ordinary user the init's namespaces belong to a user namespace the
// gateway's uid owns, so pasta (same uid) opens /proc/<pid>/ns/{user,net}
// itself. As root, pasta cannot open another root process's namespace
// once it has dropped its capabilities, so the gateway's helper (see
// netHelper) bind-mounts it onto a file in a private mount namespace and
// starts pasta there, as uid 0 (a root-owned network namespace is joined
// only with CAP_SYS_ADMIN; pasta keeps just that and CAP_NET_BIND_SERVICE,
// under its own seccomp filter and namespaces).
func (s *Subprocess) attachNet(pid int) (*netAttach, error) {
	ready := filepath.Join(s.baseDir, ".pasta-"+strconv.Itoa(pid)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := unix.Mkfifo(ready, 0o600); err != nil {
		return nil, fmt.Errorf("sandbox: network: ready fifo: %w", err)
	}
	defer os.Remove(ready)
	// Opened before pasta starts: its open for writing does not block, and
	// if it dies before writing, reading ends (EOF) instead of hanging.
	rfd, err := unix.Open(ready, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: network: ready fifo: %w", err)
	}
	readyR := os.NewFile(uintptr(rfd), "pasta-ready")
	defer readyR.Close()

	n := &netAttach{stderr: &capWriter{limit: 4096}, exited: make(chan struct{})}
	var cmd *exec.Cmd
	if s.root {
		spec, err := json.Marshal(netHelperSpec{PID: pid, Pasta: s.pasta, Args: s.pastaArgs(ready), Mount: filepath.Join(s.baseDir, rootMountPoint),
			DNS: s.dns.resolvConf})
		if err != nil {
			return nil, fmt.Errorf("sandbox: network: spec: %w", err)
		}
		cmd = exec.Command("/proc/self/exe", string(spec))
		cmd.Args[0] = netHelperArg0
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	} else {
		args := append(s.pastaArgs(ready),
			"--userns", fmt.Sprintf("/proc/%d/ns/user", pid),
			"--netns", fmt.Sprintf("/proc/%d/ns/net", pid))
		cmd = exec.Command(s.pasta, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	cmd.Env = []string{"PATH=" + MinimalPath} // nothing of the gateway's environment
	cmd.Dir = "/"
	cmd.Stdout = n.stderr
	cmd.Stderr = n.stderr
	cmd.WaitDelay = waitDelay
	n.cmd = cmd
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sandbox: network: start %s: %w: %w", pastaTool, err, core.ErrIsolationUnavailable)
	}
	go func() {
		_ = cmd.Wait()
		close(n.exited)
	}()
	if err := waitReady(readyR, n.exited, netReadyTimeout); err != nil {
		n.stop()
		<-n.exited // its stderr is complete
		return nil, fmt.Errorf("sandbox: network: %s did not set up the run's network namespace: %w (%s): %w",
			pastaTool, err, bytes.TrimSpace(n.stderr.bytes()), core.ErrIsolationUnavailable)
	}
	return n, nil
}

// discardAfter kills an init whose network could not be attached and
// returns err, or the init's own setup error when it reported one (it
// failed first, and pasta found no namespace to attach to).
func (w *warmInit) discardAfter(err error) error {
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
	status, _ := io.ReadAll(w.statusR)
	w.release()
	if st := parseStatus(status); st.setupErr != "" {
		return fmt.Errorf("sandbox: isolation setup failed: %s: %w", st.setupErr, core.ErrIsolationUnavailable)
	}
	return err
}

// waitReady waits until pasta has written its PID to the fifo (it does
// so once the namespace is configured), or fails when pasta exited first
// or the timeout passed.
func waitReady(r *os.File, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var got []byte
	buf := make([]byte, 32)
	for {
		// The fifo has no writer until pasta opens it: poll for input or
		// hang-up, a little at a time, so a pasta that never opens it is
		// still bounded by the timeout.
		left := time.Until(deadline)
		if left <= 0 {
			return errors.New("timed out")
		}
		select {
		case <-exited:
			return errors.New("it exited before it was ready")
		default:
		}
		fds := []unix.PollFd{{Fd: int32(r.Fd()), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(min(left, 50*time.Millisecond)/time.Millisecond)+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll: %w", err)
		}
		if n == 0 {
			continue
		}
		m, err := unix.Read(int(r.Fd()), buf)
		switch {
		case m > 0:
			got = append(got, buf[:m]...)
			if bytes.HasSuffix(got, []byte("\n")) {
				return nil
			}
		case err == unix.EAGAIN || err == unix.EINTR:
		case m == 0 && len(got) > 0:
			return nil // closed after a PID without newline
		case m == 0:
			if fds[0].Revents&unix.POLLHUP != 0 {
				return errors.New("it exited before it was ready")
			}
			// No writer yet: POLLIN without data does not happen, but
			// never spin.
			time.Sleep(time.Millisecond)
		default:
			return fmt.Errorf("read: %w", err)
		}
	}
}

// netHelperSpec is what the root gateway's helper needs to start pasta on
// an init's network namespace.
type netHelperSpec struct {
	PID   int      `json:"pid"`   // the init's host PID
	Pasta string   `json:"pasta"` // pasta's path
	Args  []string `json:"args"`  // pasta's options (pastaArgs)
	Mount string   `json:"mount"` // an empty directory to mount a tmpfs on (private)
	// DNS, when set, is the upstream resolver pasta is to read from
	// /etc/resolv.conf (netDNS.resolvConf).
	DNS string `json:"dns,omitempty"`
}

func init() {
	if len(os.Args) == 2 && os.Args[0] == netHelperArg0 {
		runtime.LockOSThread()
		err := netHelper(os.Args[1])
		fmt.Fprintf(os.Stderr, "%s: %v\n", netHelperArg0, err)
		syscall.Exit(125)
	}
}

// netHelper runs as root in a mount namespace of its own (the gateway
// starts it with CLONE_NEWNS): it bind-mounts the init's network namespace
// onto a file in a private tmpfs and executes pasta with --netns on that
// file. The mount lives as long as pasta (the last process of this mount
// namespace), so nothing is left on the host, whatever happens to the
// gateway. It returns only on failure.
func netHelper(arg string) error {
	var spec netHelperSpec
	if err := json.Unmarshal([]byte(arg), &spec); err != nil {
		return fmt.Errorf("bad spec: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", spec.Mount, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700,size=4k"); err != nil {
		return fmt.Errorf("mount tmpfs: %w", err)
	}
	nsFile := filepath.Join(spec.Mount, "net")
	if err := os.WriteFile(nsFile, nil, 0o600); err != nil {
		return err
	}
	if err := unix.Mount(fmt.Sprintf("/proc/%d/ns/net", spec.PID), nsFile, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the init's network namespace: %w", err)
	}
	if spec.DNS != "" {
		// Only this helper's mount namespace (and pasta's) sees it.
		conf := filepath.Join(spec.Mount, "resolv.conf")
		if err := os.WriteFile(conf, []byte("nameserver "+spec.DNS+"\n"), 0o644); err != nil {
			return err
		}
		if err := unix.Mount(conf, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the DNS upstream's resolv.conf (sandbox.network_dns): %w", err)
		}
	}
	argv := append([]string{pastaTool}, spec.Args...)
	argv = append(argv, "--runas", "0", "--netns", nsFile, "--netns-only")
	return syscall.Exec(spec.Pasta, argv, []string{"PATH=" + MinimalPath})
}

// networkIsolation is Isolation's line on the network.
func (s *Subprocess) networkIsolation() string {
	if s.netErr != nil {
		return "network namespace for every run: empty; network-on actions are refused (no " + pastaTool + ")"
	}
	return "network namespace for every run: empty without network; with network, " + pastaTool +
		" and TCP/UDP only to ports " + portList(s.ports) + " (nftables in the namespace, Landlock for TCP), no route to the host's loopback"
}

// networkTag is what the isolation tag says of a network-on run.
func (s *Subprocess) networkTag() string {
	return "netns+pasta:tcp/udp-" + portList(s.ports)
}
