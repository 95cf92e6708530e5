//go:build linux

package sandboxinit

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock access rights by ABI version (linux/landlock.h). The raw
// syscalls are used instead of go-landlock's high-level API because that
// API restricts all threads through AllThreadsSyscall, which is unavailable
// in cgo binaries (the race-enabled tests); here only the init's locked
// thread is restricted, and the program inherits that thread's domain.
const (
	llFSv1     = 1<<13 - 1 // EXECUTE … MAKE_SYM
	llRefer    = unix.LANDLOCK_ACCESS_FS_REFER
	llTruncate = unix.LANDLOCK_ACCESS_FS_TRUNCATE
	llIoctlDev = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

	llRead = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	// Rights that make sense on a file (not a directory) rule.
	llFileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE | llTruncate | llIoctlDev
)

// LandlockABI returns the kernel's Landlock ABI version, 0 when Landlock is
// unavailable (not built in, not enabled at boot, or blocked).
func LandlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

func llHandledFS(abi int) uint64 {
	a := uint64(llFSv1)
	if abi >= 2 {
		a |= llRefer
	}
	if abi >= 3 {
		a |= llTruncate
	}
	if abi >= 5 {
		a |= llIoctlDev
	}
	return a
}

// restrictLandlock confines this thread (called after pivot_root, with
// no_new_privs set): read and execute everywhere it can see, write only in
// the work dir, /tmp, /dev/shm and the /dev data files; TCP only to the
// allowed ports when the run has network, none otherwise; no signals to and
// no abstract unix sockets of processes outside the sandbox.
func restrictLandlock(spec *Spec) error {
	abi := LandlockABI()
	if abi == 0 {
		if spec.Landlock {
			return fmt.Errorf("init: Landlock is not available on this kernel")
		}
		return nil
	}
	fs := llHandledFS(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: fs}
	size := unsafe.Sizeof(attr.Handled_access_fs)
	if abi >= 4 {
		attr.Handled_access_net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
		size += unsafe.Sizeof(attr.Handled_access_net)
	}
	if abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
		size += unsafe.Sizeof(attr.Scoped)
	}
	if spec.Network && abi < 4 {
		return fmt.Errorf("init: network access needs Landlock ABI 4 (TCP port rules); this kernel has ABI %d", abi)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return fmt.Errorf("init: landlock_create_ruleset: %w", errno)
	}
	ruleset := int(fd)
	defer unix.Close(ruleset)

	rules := []struct {
		path   string
		access uint64
	}{
		{"/", llRead},
		{WorkDir, fs},
		{"/tmp", fs},
		{"/dev/shm", fs},
	}
	for _, f := range devFiles {
		rules = append(rules, struct {
			path   string
			access uint64
		}{"/dev/" + f, (unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | llTruncate) & fs})
	}
	for _, r := range rules {
		if err := llAddPath(ruleset, r.path, r.access&fs); err != nil {
			return err
		}
	}
	if spec.Network {
		for _, p := range spec.Ports {
			pa := llNetPortAttr{allowedAccess: unix.LANDLOCK_ACCESS_NET_CONNECT_TCP, port: uint64(p)}
			if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), llRuleNetPort, uintptr(unsafe.Pointer(&pa)), 0, 0, 0); errno != 0 {
				return fmt.Errorf("init: landlock port %d: %w", p, errno)
			}
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); errno != 0 {
		return fmt.Errorf("init: landlock_restrict_self: %w", errno)
	}
	return nil
}

// llNetPortAttr is struct landlock_net_port_attr (not in x/sys/unix yet).
type llNetPortAttr struct {
	allowedAccess uint64
	port          uint64
}

const llRuleNetPort = 2 // LANDLOCK_RULE_NET_PORT

func llAddPath(ruleset int, path string, access uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("init: landlock rule for %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("init: landlock rule for %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= llFileRights
	}
	pb := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&pb)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("init: landlock rule for %s: %w", path, errno)
	}
	return nil
}
