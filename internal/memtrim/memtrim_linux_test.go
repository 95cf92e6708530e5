//go:build linux

package memtrim

import (
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const sample = `00400000-020dc000 r-xp 00000000 fe:00 11855841                           /usr/bin/silas
Size:              30576 kB
Rss:               21256 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw sd
020dc000-04864000 r--p 01cdc000 fe:00 11855841                           /usr/bin/silas
Size:              40480 kB
Rss:               29944 kB
Anonymous:             8 kB
VmFlags: rd mr mw me dw sd
04864000-0495d000 rw-p 04464000 fe:00 11855841                           /usr/bin/silas
Rss:                 932 kB
Anonymous:           500 kB
0495d000-049a0000 rw-p 00000000 00:00 0 
Rss:                 100 kB
Anonymous:           100 kB
7f0000000000-7f0000001000 r--p 00000000 fe:00 42                         /usr/bin/silas (deleted)
Rss:                   4 kB
Anonymous:             0 kB
7f0000001000-7f0000002000 r--p 00000000 fe:00 43                         /usr/lib/other.so
Rss:                   4 kB
Anonymous:             0 kB
7f0000002000-7f0000003000 r--s 00000000 fe:00 11855841                   /usr/bin/silas
Rss:                   4 kB
Anonymous:             0 kB
7f0000003000-7f0000004000 r--p 00000000 fe:00 11855841                   /usr/bin/silas
Rss:                   4 kB
`

func TestDroppable(t *testing.T) {
	ms := parseSmaps([]byte(sample))
	if len(ms) != 8 {
		t.Fatalf("parsed %d mappings, want 8: %+v", len(ms), ms)
	}
	for i, tc := range []struct {
		why  string
		rss  int64
		want bool
	}{
		{"the code, all the file's", 21256 << 10, true},
		{"read-only data with a private copy (a relocation, a breakpoint)", 29944 << 10, false},
		{"writable data", 932 << 10, false},
		{"anonymous memory", 100 << 10, false},
		{"another path (the replaced file)", 4 << 10, false},
		{"another file", 4 << 10, false},
		{"a shared mapping", 4 << 10, false},
		{"Anonymous field missing: unknown, left alone", 4 << 10, false},
	} {
		if ms[i].rss != tc.rss {
			t.Errorf("%s: rss %d, want %d", tc.why, ms[i].rss, tc.rss)
		}
		if got := ms[i].droppable("/usr/bin/silas"); got != tc.want {
			t.Errorf("%s: droppable = %v, want %v", tc.why, got, tc.want)
		}
	}
	if ms[4].path != "/usr/bin/silas (deleted)" {
		t.Errorf("path with a space read as %q", ms[4].path)
	}
	if ms[0].droppable("") {
		t.Error("an unknown executable must match nothing")
	}
}

// TestExecutable drops this test binary's code and read-only data and
// keeps running: fewer of its pages are resident afterwards.
func TestExecutable(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	resident := func() int64 {
		b, err := os.ReadFile("/proc/self/smaps")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, m := range parseSmaps(b) {
			if m.droppable(exe) {
				n += m.rss
			}
		}
		return n
	}
	before := resident()
	dropped, err := Executable()
	if err != nil {
		t.Fatal(err)
	}
	after := resident()
	if dropped <= 0 || after >= before {
		t.Fatalf("dropped %d bytes; resident %d before, %d after", dropped, before, after)
	}
	t.Logf("dropped %d kB; resident %d kB before, %d kB after", dropped>>10, before>>10, after>>10)
}

// TestExecutableUncached: after the call, later faults on the code read
// no read-ahead: the mapping is marked random-read ("rr" in smaps).
func TestExecutableUncached(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ExecutableUncached(); err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	random, inExeCode := false, false
	for _, line := range strings.Split(string(smaps), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			inExeCode = f[1] == "r-xp" && strings.TrimSpace(line[strings.Index(line, f[5]):]) == exe
			continue
		}
		if inExeCode && strings.HasPrefix(line, "VmFlags:") {
			random = slices.Contains(strings.Fields(line)[1:], "rr")
		}
	}
	if !random {
		t.Error("the executable's code is not marked random-read after ExecutableUncached")
	}
}

// TestUncacheFile: a file's pages that nobody maps leave the page cache
// (mincore on a mapping nobody touched reports the cache's pages). The
// file is synced first: dirty pages stay until written back.
func TestUncacheFile(t *testing.T) {
	path := t.TempDir() + "/f"
	page := os.Getpagesize()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 64*page)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, 64*page, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	cached := func() int {
		vec := make([]byte, 64)
		if _, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			t.Fatal(errno)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	before := cached()
	if before == 0 {
		t.Skip("the file's pages did not stay in the page cache: nothing to drop")
	}
	if err := uncacheFile(path); err != nil {
		t.Fatal(err)
	}
	if after := cached(); after != 0 {
		t.Errorf("pages in the page cache: %d before, %d after", before, after)
	}
}
