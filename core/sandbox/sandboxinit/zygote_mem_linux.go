//go:build linux

package sandboxinit

import (
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The fork region (issue 26). A plain fork copies the zygote's whole
// address space into every init — its Go heap, stacks, runtime metadata
// and the binary's data, write-protected in both processes — which the
// init never uses: it runs raw system calls on memory prepared before the
// fork. The copy, the copy-on-write faults that follow in the zygote and
// the init, and the teardown of the copy at the init's exit were ≈ 0.35
// ms of a run's ≈ 2 ms (BENCHMARKS.md "Issue 26 — the zygote's address
// space"). So the zygote puts everything its inits read or write in one
// mapping of its own — the stack the init runs on, its forkArgs and what
// they point to — forks each init onto that stack (clone3), and marks
// every other writable mapping but the main thread's stack MADV_DONTFORK
// (dontFork): an init then gets the region, the binary's code and
// read-only data, and nothing
// else. Nothing in the region points into Go's heap (the garbage
// collector does not see the region: it must not keep anything alive).
// Once marked, the zygote must never fork a child that runs Go code
// (syscall.ForkExec, os/exec): that child would have no heap or stack.

const (
	// regionTLS: the first pages stay zero. The child's thread pointer
	// (CLONE_SETTLS) points at their end, so that a load of the runtime's
	// g from thread-local storage (an ABI wrapper's) reads 0 from the
	// region instead of the zygote's thread's TLS, which it does not have.
	regionTLS   = 8 << 10
	regionStack = 64 << 10 // the init's stack: childInit's nosplit chain needs < 1 kB
	regionSize  = 512 << 10
)

// forkRegion is a bump allocator over one private anonymous mapping.
type forkRegion struct {
	mem   []byte
	off   uintptr
	probe uintptr // rseqProbeSize bytes for threadHasRseq
}

func newForkRegion() (*forkRegion, error) {
	mem, err := unix.Mmap(-1, 0, regionSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	r := &forkRegion{mem: mem, off: regionTLS + regionStack}
	r.off = (r.off + rseqProbeSize - 1) &^ (rseqProbeSize - 1)
	r.probe = uintptr(r.alloc(rseqProbeSize))
	return r, nil
}

func (r *forkRegion) base() uintptr { return uintptr(unsafe.Pointer(&r.mem[0])) }

// contains reports whether [lo, hi) lies inside the region.
func (r *forkRegion) contains(lo, hi uintptr) bool {
	return lo >= r.base() && hi <= r.base()+uintptr(len(r.mem))
}

// alloc returns size zeroed bytes aligned to 16.
func (r *forkRegion) alloc(size uintptr) unsafe.Pointer {
	r.off = (r.off + 15) &^ 15
	if r.off+size > uintptr(len(r.mem)) {
		panic("zygote: fork region full")
	}
	p := unsafe.Pointer(&r.mem[r.off])
	r.off += size
	return p
}

// cstr is a NUL-terminated copy of s in the region.
func (r *forkRegion) cstr(s string) *byte {
	if strings.IndexByte(s, 0) >= 0 {
		panic("zygote: NUL in a constant")
	}
	b := unsafe.Slice((*byte)(r.alloc(uintptr(len(s)+1))), len(s)+1)
	copy(b, s)
	return &b[0]
}

// Anchors in the binary's data and bss sections (Go's linker lays them out
// in this order, after the read-only data). Built with -cover, the inits'
// code writes coverage counters there, and every mapping from the one
// holding the first anchor to the one holding the last stays in them.
// Otherwise nothing of it does: the inits' code reads only the region and
// constants (childInit's rules).
var (
	anchorNoptrData = [8]byte{1}
	anchorData      = &anchorNoptrBss
	anchorBss       *byte
	anchorNoptrBss  [8]byte
)

// keptDataRange returns the binary's data the inits keep: none, or with
// -cover the anchors' range.
func keptDataRange() (lo, hi uintptr) {
	cover := false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			cover = cover || (s.Key == "-cover" && s.Value == "true")
		}
	}
	if !cover {
		return 0, 0
	}
	addrs := []uintptr{
		uintptr(unsafe.Pointer(&anchorNoptrData)),
		uintptr(unsafe.Pointer(&anchorData)),
		uintptr(unsafe.Pointer(&anchorBss)),
		uintptr(unsafe.Pointer(&anchorNoptrBss)),
	}
	lo, hi = addrs[0], addrs[0]
	for _, a := range addrs[1:] {
		lo, hi = min(lo, a), max(hi, a)
	}
	return lo, hi + 1
}

// mapping is one line of /proc/self/maps.
type mapping struct {
	lo, hi      uintptr
	perms, name string
}

// parseMaps reads /proc/<pid>/maps' lines.
func parseMaps(b []byte) []mapping {
	var ms []mapping
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		l, h, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		lo, err1 := strconv.ParseUint(l, 16, 64)
		hi, err2 := strconv.ParseUint(h, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		m := mapping{lo: uintptr(lo), hi: uintptr(hi), perms: f[1]}
		if len(f) >= 6 {
			m.name = f[5]
		}
		ms = append(ms, m)
	}
	return ms
}

// dontFork reports whether an init can go without m: every writable
// mapping (and every reservation without access) but the fork region and
// the main thread's stack (it holds the command line and environment,
// which the run's /proc/1 shows as an init's): Go's heap and goroutine
// stacks, the runtime's metadata and reservations, the binary's data and
// bss (unless kept: keptDataRange), and in a cgo build the C library's
// data, malloc arenas and thread stacks. Code and read-only data stay:
// the init runs that code, and nothing of them is copied (no page of them
// was ever written).
func dontFork(m mapping, r *forkRegion, keepLo, keepHi uintptr) bool {
	switch {
	case len(m.perms) < 4 || m.perms[3] != 'p':
		return false // shared memory (none here)
	case m.perms[1] != 'w' && m.perms[:3] != "---":
		return false
	case r.contains(m.lo, m.hi) || (m.lo < keepHi && keepLo < m.hi):
		return false // (a mapping that holds the region and more: markDontFork)
	case m.name == "[stack]" || (len(m.name) > 2 && m.name[0] == '[' && m.name[1] == 'v'):
		return false
	}
	return true
}

// markDontFork applies advice (MADV_DONTFORK, or MADV_DOFORK to undo it)
// to every mapping an init goes without, read from maps (an open
// /proc/self/maps: the zygote's root has no /proc). The runtime maps
// memory later as its heap grows (a fresh mapping forks again), so the
// zygote repeats this now and then.
func markDontFork(maps int, r *forkRegion, buf []byte, advice uintptr, keepLo, keepHi uintptr) []byte {
	if cap(buf) == 0 {
		buf = make([]byte, 0, 16<<10)
	}
	buf = buf[:0]
	for off := int64(0); ; {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Pread(maps, buf[len(buf):cap(buf)], off)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			break
		}
		buf = buf[:len(buf)+n]
		off += int64(n)
	}
	rlo, rhi := r.base(), r.base()+uintptr(len(r.mem))
	for _, m := range parseMaps(buf) {
		if !dontFork(m, r, keepLo, keepHi) {
			continue
		}
		// The kernel merges the region with a neighbour of the same kind
		// into one mapping: only the parts outside the region.
		for _, p := range [][2]uintptr{{m.lo, min(m.hi, rlo)}, {max(m.lo, rhi), m.hi}} {
			if p[0] < p[1] {
				syscall.RawSyscall(syscall.SYS_MADVISE, p[0], p[1]-p[0], advice)
			}
		}
	}
	return buf
}

// rseqProbe: 32 bytes, aligned to 32, for threadHasRseq.
const rseqProbeSize = 32

// threadHasRseq reports whether the calling thread has a restartable
// sequence registered (glibc registers one for each thread it starts, in
// the thread's own memory; a static Go binary has none). A child forked
// from it keeps the registration, and the kernel writes to that area on
// the child's first return to user space: with the thread's memory not
// forked, the child dies at once. Registering an area of our own fails
// when one is registered; when none is, it succeeds and is undone.
func threadHasRseq(r *forkRegion) bool {
	const sig = 0x53053053
	p := r.probe
	_, _, e := syscall.RawSyscall6(unix.SYS_RSEQ, p, rseqProbeSize, 0, sig, 0, 0)
	switch e {
	case 0:
		syscall.RawSyscall6(unix.SYS_RSEQ, p, rseqProbeSize, 1 /* RSEQ_FLAG_UNREGISTER */, sig, 0, 0)
		return false
	case syscall.ENOSYS:
		return false
	}
	return true
}
