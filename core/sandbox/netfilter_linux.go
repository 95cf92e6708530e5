//go:build linux

package sandbox

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Network-on runs (init side): the port allowlist inside the run's own
// network namespace, and the resolver it is told to use. The init installs
// both while it still holds CAP_NET_ADMIN over its namespace (as root, or
// as the owner of its user namespace); the program, with no capabilities
// and seccomp denying setns/unshare, can change neither.

// setupNetwork prepares a network-on run's namespace: the output filter
// and /etc/resolv.conf naming pasta's DNS forwarder. Called after
// pivot_root, before the root is made read-only.
func setupNetwork(spec *initSpec) error {
	if !spec.Network {
		return nil
	}
	if err := installNetFilter(spec.Ports); err != nil {
		return fmt.Errorf("init: network filter (nftables) in the run's network namespace: %w", err)
	}
	if err := setResolver(dnsForwardAddr); err != nil {
		return fmt.Errorf("init: resolv.conf: %w", err)
	}
	return nil
}

// installNetFilter installs the only table of the namespace: an output
// chain that drops every packet but
//   - the run's own loopback (its own processes, never the host's),
//   - UDP to port 53 of pasta's DNS forwarder,
//   - TCP and UDP to the allowed ports, except to link-local addresses
//     (169.254.0.0/16: cloud metadata services),
//   - the ICMPv6 neighbour discovery IPv6 needs to reach the gateway.
//
// Inbound packets need no rule: pasta forwards nothing into the namespace,
// and replies belong to connections the output chain allowed.
func installNetFilter(ports []uint16) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "silas"})
	drop := nftables.ChainPolicyDrop
	ch := c.AddChain(&nftables.Chain{
		Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop,
	})
	rule := func(e ...expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e}) }
	accept := &expr.Verdict{Kind: expr.VerdictAccept}

	// lo is ifindex 1 in every new network namespace.
	rule(&expr.Meta{Key: expr.MetaKeyOIF, Register: 1}, cmpEq(binary.NativeEndian.AppendUint32(nil, 1)), accept)

	dns := netip.MustParseAddr(dnsForwardAddr).As4()
	rule(concat(ipv4(), daddr4(dns[:], nil), l4(unix.IPPROTO_UDP), dport(53), []expr.Any{accept})...)

	linkLocal := netip.MustParsePrefix("169.254.0.0/16")
	ll := linkLocal.Addr().As4()
	rule(concat(ipv4(), daddr4(ll[:], []byte{255, 255, 0, 0}), []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}})...)

	for _, p := range ports {
		for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
			rule(concat(l4(proto), dport(p), []expr.Any{accept})...)
		}
	}
	// Router and neighbour solicitations and advertisements (RFC 4861).
	for _, typ := range []byte{133, 135, 136} {
		rule(append(l4(unix.IPPROTO_ICMPV6),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
			cmpEq([]byte{typ}), accept)...)
	}
	return c.Flush()
}

func concat(parts ...[]expr.Any) []expr.Any {
	var all []expr.Any
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

func cmpEq(data []byte) *expr.Cmp {
	return &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data}
}

// ipv4 matches IPv4 packets (the inet table sees both families).
func ipv4() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, cmpEq([]byte{unix.NFPROTO_IPV4})}
}

// daddr4 matches the IPv4 destination address (under mask, when given).
func daddr4(addr, mask []byte) []expr.Any {
	e := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}}
	if mask != nil {
		e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)})
	}
	return append(e, cmpEq(addr))
}

// l4 matches the transport protocol.
func l4(proto byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, cmpEq([]byte{proto})}
}

// dport matches the TCP or UDP destination port (the same offset in both).
func dport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		cmpEq(binary.BigEndian.AppendUint16(nil, p)),
	}
}

// setResolver makes /etc/resolv.conf inside the sandbox name only addr: a
// file on the root's tmpfs bound over it (or over what it links to, when
// that is a symlink into a dir the sandbox does not show, such as
// systemd-resolved's /run/systemd/resolve/stub-resolv.conf). When the
// system has no resolv.conf at all, programs fall back to a resolver on
// localhost, which is the run's own loopback: no DNS, nothing reached.
func setResolver(addr string) error {
	target := "/etc/resolv.conf"
	for range 8 {
		fi, err := os.Lstat(target)
		if err != nil {
			break
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			break
		}
		link, err := os.Readlink(target)
		if err != nil {
			return err
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(target), link)
		}
		target = filepath.Clean(link)
	}
	content := []byte("# Silas sandbox: pasta's DNS forwarder\nnameserver " + addr + "\n")
	if _, err := os.Lstat(target); err != nil {
		// Not in the sandbox's view (e.g. below /run): the root's tmpfs
		// can have it, unless it belongs below a read-only system dir.
		for _, d := range systemDirs {
			if strings.HasPrefix(target, d+"/") {
				return nil
			}
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, content, 0o644)
	}
	// The file lives on a tmpfs of its own, detached once bound: a file
	// on the root's tmpfs would show (or, unlinked, keep the root from
	// being remounted read-only), and a memfd cannot be bound.
	const dir = "/.resolv"
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=4k"); err != nil {
		return fmt.Errorf("mount: %w", err)
	}
	src := dir + "/resolv.conf"
	if err := os.WriteFile(src, content, 0o644); err != nil {
		return err
	}
	bindErr := unix.Mount(src, target, "", unix.MS_BIND, "")
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	if err := os.Remove(dir); err != nil {
		return err
	}
	if err := bindErr; err != nil {
		return fmt.Errorf("bind over %s: %w", target, err)
	}
	return remount(target, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC)
}
