//go:build linux

package sandboxinit

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// runFilter interprets the classic BPF instructions seccompFilter uses
// on one system call, as the kernel does.
func runFilter(t *testing.T, prog []unix.SockFilter, arch, nr uint32, arg0 uint64) uint32 {
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			switch in.K {
			case sdArch:
				acc = arch
			case sdNr:
				acc = nr
			case sdArg0:
				acc = uint32(arg0)
			default:
				t.Fatalf("load of offset %d", in.K)
			}
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			var ok bool
			switch in.Code & 0xf0 {
			case unix.BPF_JEQ:
				ok = acc == in.K
			case unix.BPF_JGE:
				ok = acc >= in.K
			case unix.BPF_JSET:
				ok = acc&in.K != 0
			}
			if ok {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("instruction %#x at %d", in.Code, pc)
		}
	}
	t.Fatal("the filter ran off its end")
	return 0
}

// TestSeccompFilterDecides checks the filter's decision for every system
// call number (and clone's flags) against the rules it implements: the
// search tree must deny exactly what the list says.
func TestSeccompFilterDecides(t *testing.T) {
	if auditArch == 0 {
		t.Skip("no seccomp filter for this architecture")
	}
	prog := seccompFilter()
	eperm := unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	want := func(arch, nr uint32, arg0 uint64) uint32 {
		switch {
		case arch != auditArch:
			return unix.SECCOMP_RET_KILL_PROCESS
		case x32Bit != 0 && nr >= x32Bit:
			return eperm
		case slices.Contains(deniedSyscalls, uintptr(nr)):
			return eperm
		case nr == unix.SYS_CLONE3:
			return unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
		case nr == unix.SYS_CLONE && uint32(arg0)&nsCloneFlags != 0:
			return eperm
		}
		return unix.SECCOMP_RET_ALLOW
	}
	var nrs []uint32
	for nr := uint32(0); nr < 1100; nr++ {
		nrs = append(nrs, nr)
	}
	nrs = append(nrs, 0x40000000, 0x40000001, 0x7fffffff, 0xffffffff)
	args := []uint64{0, uint64(unix.SIGCHLD), unix.CLONE_VM | unix.CLONE_VFORK | uint64(unix.SIGCHLD), unix.CLONE_THREAD | unix.CLONE_VM}
	for f := uint64(1); f != 0; f <<= 1 {
		if f&nsCloneFlags != 0 {
			args = append(args, f|uint64(unix.SIGCHLD))
		}
	}
	denied := 0
	for _, arch := range []uint32{auditArch, auditArch ^ 1} {
		for _, nr := range nrs {
			for _, a := range args {
				got, w := runFilter(t, prog, arch, nr, a), want(arch, nr, a)
				if got != w {
					t.Fatalf("arch %#x nr %d arg0 %#x: filter returns %#x, want %#x", arch, nr, a, got, w)
				}
				if arch == auditArch && a == 0 && got == eperm && nr < 1100 {
					denied++
				}
			}
		}
	}
	if denied < len(deniedSyscalls) {
		t.Fatalf("%d numbers denied, fewer than the %d listed", denied, len(deniedSyscalls))
	}
}
