//go:build linux

package sandbox

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/internal/testenv"
)

// envOutside hands the ordinary user's re-run of the escape suite the
// "outside" address its root parent made (outsideAddr).
const envOutside = "SILAS_ESCAPE_OUTSIDE"

// needPasta fails (CI) or skips the test when pasta is not installed:
// network-on runs are refused without it.
func needPasta(t testing.TB) {
	t.Helper()
	if _, err := findPasta(""); err != nil {
		testenv.Missing(t, "%s is not installed (Debian package %s): network-on runs need it", pastaTool, pastaPackage)
	}
}

// outsideAddr is an IPv4 address of this host that a network-on run
// reaches only through pasta, as it would reach any server outside: a /32
// on the host's lo (not in 127.0.0.0/8, so the run's own loopback does not
// have it; the host's eth0 address would be the run's own address inside).
// Adding it needs root; "" when it cannot be made.
//
// The address is fixed and stays once added: every address change on the
// host is a netlink event, and Chromium aborts the requests in flight on
// one (net::ERR_NETWORK_CHANGED), which failed the web chat's browser tests
// running beside this package in `make test`. One address, added once per
// machine, is one event ever instead of two per test. 198.18.0.0/15 is
// RFC 2544's benchmarking range: never routed.
func outsideAddr(t testing.TB) string {
	t.Helper()
	if a := os.Getenv(envOutside); a != "" {
		return a
	}
	if os.Geteuid() != 0 {
		return ""
	}
	const addr = "198.18.0.1"
	if hostHasAddr(addr) {
		return addr
	}
	ip := testenv.Tool(t, "ip", "iproute2")
	if out, err := exec.Command(ip, "addr", "add", addr+"/32", "dev", "lo").CombinedOutput(); err != nil && !hostHasAddr(addr) {
		t.Fatalf("ip addr add %s/32 dev lo: %v\n%s", addr, err, out)
	}
	return addr
}

// hostHasAddr reports whether one of the host's interfaces has addr.
func hostHasAddr(addr string) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.String() == addr {
			return true
		}
	}
	return false
}

// udpEcho answers every datagram on addr ("ip:0" for any port) with the
// same bytes and returns the port.
func udpEcho(t testing.TB, addr string) int {
	t.Helper()
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	return echoOn(t, pc, nil)
}

// echoOn answers every datagram on pc with the same bytes, sending each
// also to seen (when not nil, and not full), and returns pc's port.
func echoOn(t testing.TB, pc net.PacketConn, seen chan<- string) int {
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			select {
			case seen <- string(buf[:n]):
			default:
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// TestNetworkNamespace: a network-on run reaches a server outside on an
// allowed port over TCP and UDP, and nothing else: not the same port on
// the host's loopback, not another port outside, over TCP or UDP.
func TestNetworkNamespace(t *testing.T) {
	needPasta(t)
	outside := outsideAddr(t)
	if outside == "" {
		t.Skip("no outside address: making one (a dummy interface) needs root; TestEscapeAsOrdinaryUser runs this as an ordinary user")
	}
	// One port, open outside and on the host's loopback, TCP and UDP.
	tcpOut, err := net.Listen("tcp4", outside+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcpOut.Close()
	port := tcpOut.Addr().(*net.TCPAddr).Port
	go acceptAll(tcpOut)
	tcpLo, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Skipf("port %d is taken on 127.0.0.1: %v", port, err)
	}
	defer tcpLo.Close()
	go acceptAll(tcpLo)
	udpOut := udpEcho(t, outside+":0")
	udpEcho(t, "127.0.0.1:"+strconv.Itoa(udpOut))
	// A port that is not allowed, open outside.
	other := udpEcho(t, outside+":0")

	probe := probeBinary(t)
	s := newSandbox(t, Config{NetworkPorts: []uint16{uint16(port), uint16(udpOut)}})
	if err := s.ProbeNetwork(); err != nil {
		t.Fatalf("ProbeNetwork: %v", err)
	}
	dir, err := s.newWorkDir()
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, probe, dir+"/escape", 0o755)
	hostPort := func(h string, p int) string { return net.JoinHostPort(h, strconv.Itoa(p)) }
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"TCP to an allowed port outside", []string{"./escape", "connect-tcp", hostPort(outside, port)}, "connect-tcp: ok"},
		{"UDP to an allowed port outside", []string{"./escape", "send-udp", hostPort(outside, udpOut)}, "send-udp: ok"},
		{"TCP to the host's loopback on an allowed port", []string{"./escape", "connect-tcp", hostPort("127.0.0.1", port)}, "connection refused"},
		{"UDP to the host's loopback on an allowed port", []string{"./escape", "send-udp", hostPort("127.0.0.1", udpOut)}, "connection refused"},
		{"UDP to a port outside that is not allowed", []string{"./escape", "send-udp", hostPort(outside, other)}, "operation not permitted"},
		{"TCP to a port outside that is not allowed", []string{"./escape", "connect-tcp", hostPort(outside, other)}, "permission denied"},
		// UDP shows the drop as EPERM; a dropped TCP SYN would only time
		// out, as an absent host does.
		{"link-local (cloud metadata) on an allowed port", []string{"./escape", "send-udp", hostPort("169.254.169.254", udpOut)}, "operation not permitted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, s, core.ExecRequest{Argv: tc.argv, Dir: dir, Network: true, Timeout: 20 * time.Second})
			out := string(res.Stdout) + string(res.Stderr)
			if !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want %q:\n%s", res.ExitCode, tc.want, out)
			}
		})
	}
	res := run(t, s, core.ExecRequest{Argv: []string{"cat", "/etc/resolv.conf"}, Network: true})
	if !strings.Contains(string(res.Stdout), "nameserver "+dnsForwardAddr+"\n") || strings.Count(string(res.Stdout), "nameserver") != 1 {
		t.Errorf("resolv.conf inside a network-on run names more or other than pasta's forwarder:\n%s", res.Stdout)
	}
	if !strings.Contains(res.Isolation, "netns+pasta") {
		t.Errorf("Isolation = %q, want netns+pasta", res.Isolation)
	}
}

// TestNetworkFailsClosedWithoutPasta: without pasta, network-on runs are
// refused with a message naming it and its package (never run on the
// host's network); network-off runs still work.
func TestNetworkFailsClosedWithoutPasta(t *testing.T) {
	s := newSandbox(t, Config{pasta: "/nonexistent/pasta"})
	for _, err := range []error{s.NetworkAvailable(), s.ProbeNetwork(), func() error {
		_, err := s.Run(context.Background(), core.ExecRequest{Argv: []string{"true"}, Network: true})
		return err
	}()} {
		if !errors.Is(err, core.ErrIsolationUnavailable) || !strings.Contains(err.Error(), "pasta") || !strings.Contains(err.Error(), "passt") {
			t.Fatalf("err = %v, want ErrIsolationUnavailable naming pasta (package passt)", err)
		}
	}
	if res := run(t, s, core.ExecRequest{Argv: []string{"true"}}); res.ExitCode != 0 {
		t.Fatalf("network-off run: exit %d %s", res.ExitCode, res.Stderr)
	}
	if s.Available() != nil {
		t.Fatalf("Available() = %v: a missing pasta refuses only network-on runs", s.Available())
	}
}

// TestNetworkDNSOnlyViaForwarder: with port 53 not allowed, a network-on
// run cannot ask a resolver of its choosing (only pasta's forwarder, which
// /etc/resolv.conf names, is let through). That the forwarder answers is
// not tested here: it would ask the host's real resolver.
func TestNetworkDNSOnlyViaForwarder(t *testing.T) {
	needPasta(t)
	s := newSandbox(t, Config{NetworkPorts: []uint16{1}})
	dir, err := s.newWorkDir()
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, probeBinary(t), dir+"/escape", 0o755)
	res := run(t, s, core.ExecRequest{Argv: []string{"./escape", "send-udp", "198.51.100.1:53"}, Dir: dir, Network: true, Timeout: 20 * time.Second})
	if out := string(res.Stdout) + string(res.Stderr); !strings.Contains(out, "operation not permitted") {
		t.Fatalf("UDP to a resolver of the program's choosing (port 53 not allowed): exit %d, want operation not permitted:\n%s", res.ExitCode, out)
	}
}

// TestNetworkDNSUpstream: with sandbox.network_dns set, the DNS queries a
// network-on run sends to its resolver (pasta's forwarder, the only one
// its resolv.conf names) reach that upstream and its answers come back —
// not the host's configured resolver. A bad upstream is refused at New.
func TestNetworkDNSUpstream(t *testing.T) {
	needPasta(t)
	if _, err := New(Config{BaseDir: t.TempDir(), NetworkDNS: "::1"}); err == nil || !strings.Contains(err.Error(), "not an IPv4 address") {
		t.Fatalf("New with an IPv6 DNS upstream: %v, want an error", err)
	}
	outside := outsideAddr(t)
	if outside == "" {
		t.Skip("no outside address (needs root)")
	}
	pc, err := net.ListenPacket("udp4", net.JoinHostPort(outside, "53"))
	if err != nil {
		t.Skipf("cannot listen on %s:53: %v", outside, err)
	}
	got := make(chan string, 8)
	echoOn(t, pc, got)
	s := newSandbox(t, Config{NetworkPorts: []uint16{1}, NetworkDNS: outside})
	dir, err := s.newWorkDir()
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, probeBinary(t), dir+"/escape", 0o755)
	res := run(t, s, core.ExecRequest{Argv: []string{"./escape", "send-udp", dnsForwardAddr + ":53"}, Dir: dir, Network: true, Timeout: 20 * time.Second})
	if out := string(res.Stdout) + string(res.Stderr); !strings.Contains(out, "send-udp: ok") {
		t.Fatalf("a query to the run's resolver got no answer from the configured upstream: exit %d:\n%s", res.ExitCode, out)
	}
	select {
	case q := <-got:
		if q != "silas-escape" {
			t.Fatalf("the upstream got %q", q)
		}
	default:
		t.Fatal("the configured upstream saw no query")
	}
}
