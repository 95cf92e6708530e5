//go:build linux

package sandboxinit

import (
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestDontFork: what a forked init goes without. The kernel merges the
// fork region with a neighbouring mapping of the same kind, so a mapping
// that holds it and more is marked around it, never on it (an init forked
// without its region has no stack and dies at once).
func TestDontFork(t *testing.T) {
	r, err := newForkRegion()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(r.mem)
	lo, hi := r.base(), r.base()+uintptr(len(r.mem))
	for _, c := range []struct {
		m    mapping
		want bool
	}{
		{mapping{lo: 0x400000, hi: 0x900000, perms: "r-xp", name: "/bin/silas"}, false},
		{mapping{lo: 0x900000, hi: 0xa00000, perms: "r--p", name: "/bin/silas"}, false},
		{mapping{lo: 0xa00000, hi: 0xb00000, perms: "rw-p", name: "/bin/silas"}, true}, // data
		{mapping{lo: 0xb00000, hi: 0xc00000, perms: "rw-p"}, true},                     // bss
		{mapping{lo: 0xc000000000, hi: 0xc004000000, perms: "rw-p"}, true},             // Go's heap
		{mapping{lo: 0xc004000000, hi: 0xc008000000, perms: "---p"}, true},             // a reservation
		{mapping{lo: lo, hi: hi, perms: "rw-p"}, false},
		{mapping{lo: 0x7ffc0000, hi: 0x7ffd0000, perms: "rw-p", name: "[stack]"}, false},
		{mapping{lo: 0x7ffe0000, hi: 0x7ffe2000, perms: "r-xp", name: "[vdso]"}, false},
		{mapping{lo: 0x7ffe2000, hi: 0x7ffe4000, perms: "r--p", name: "[vvar]"}, false},
		{mapping{lo: 0x10000, hi: 0x20000, perms: "rw-s", name: "/dev/shm/x"}, false},
	} {
		if got := dontFork(c.m, r, 0, 0); got != c.want {
			t.Errorf("dontFork(%+v) = %v, want %v", c.m, got, c.want)
		}
	}
	// With -cover the binary's data stays.
	if dontFork(mapping{lo: 0xa00000, hi: 0xb00000, perms: "rw-p"}, r, 0xa00100, 0xa00200) {
		t.Error("the kept data range was marked")
	}

	// A mapping merged with the region: its two sides are marked, the
	// region is not (read back from smaps' VmFlags, "dc").
	around, err := unix.Mmap(-1, 0, 3<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(around)
	inner := &forkRegion{mem: around[1<<20 : 2<<20]}
	maps, err := unix.Open("/proc/self/maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(maps)
	markDontFork(maps, inner, nil, unix.MADV_DONTFORK, 0, 0)
	defer markDontFork(maps, inner, nil, unix.MADV_DOFORK, 0, 0) // the test binary forks
	base := uintptr(unsafe.Pointer(&around[0]))
	for _, c := range []struct {
		addr uintptr
		want bool
	}{{base, true}, {base + 1<<20, false}, {base + 2<<20 - 1, false}, {base + 2<<20, true}} {
		if got := vmDontCopy(t, c.addr); got != c.want {
			t.Errorf("offset %#x: not forked %v, want %v", c.addr-base, got, c.want)
		}
	}
}

// vmDontCopy reads whether the mapping at addr has MADV_DONTFORK ("dc").
func vmDontCopy(t *testing.T, addr uintptr) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if ms := parseMaps([]byte(line)); len(ms) == 1 && len(line) > 0 && line[0] != 'V' {
			in = ms[0].lo <= addr && addr < ms[0].hi
			continue
		}
		if in && len(line) > 8 && line[:8] == "VmFlags:" {
			for _, f := range strings.Fields(line[8:]) {
				if f == "dc" {
					return true
				}
			}
			return false
		}
	}
	t.Fatalf("no mapping at %#x", addr)
	return false
}

// TestThreadHasRseq: a thread with a restartable sequence registered (as
// glibc registers one) is told apart from one without, and the probe
// leaves none of its own behind.
func TestThreadHasRseq(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := newForkRegion()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(r.mem)
	const sig = 0x53053053
	area := r.alloc(64)
	area = unsafe.Pointer((uintptr(area) + 31) &^ 31)
	_, _, e := syscall.RawSyscall6(unix.SYS_RSEQ, uintptr(area), rseqProbeSize, 0, sig, 0, 0)
	switch e {
	case syscall.ENOSYS:
		t.Skip("no rseq on this kernel")
	case 0:
		// None was registered: the probe must have said so, and must say
		// yes now.
		if !threadHasRseq(r) {
			t.Error("a registered rseq area was not seen")
		}
		syscall.RawSyscall6(unix.SYS_RSEQ, uintptr(area), rseqProbeSize, 1, sig, 0, 0)
		if threadHasRseq(r) {
			t.Error("no rseq area registered, and threadHasRseq says one is")
		}
		if threadHasRseq(r) {
			t.Error("threadHasRseq left its own area registered")
		}
	default:
		// One is registered already (a glibc-linked test binary).
		if !threadHasRseq(r) {
			t.Error("glibc's rseq area was not seen")
		}
	}
}
