//go:build linux

package memtrim

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Executable drops the resident pages of the running executable's
// read-only mappings (code, read-only data) from this process's page
// tables (madvise MADV_DONTNEED; the page cache keeps them). It returns
// how many bytes were resident in the mappings it dropped.
func Executable() (int64, error) { return trim(false) }

// ExecutableUncached is Executable for a process past its start-up, that
// will touch only its working set from now on: it also makes each later
// fault on those mappings map the one page it needs (MADV_RANDOM: no
// read-ahead) and takes the executable's pages that no process maps out
// of the page cache (POSIX_FADV_DONTNEED).
//
// Why: a fault maps every page the page cache holds around it (64 kB of
// fault-around, or the whole large folio read-ahead built), so with the
// binary cached whole a gateway touching 7 MB of it kept 25 MB resident
// (BENCHMARKS.md "Issue 26 — RSS"). Read back one page at a time, what
// it maps is what it touches, plus what other processes running the
// binary (the sandbox's zygote) keep cached. The price: each page of the
// working set is read from disk once, at its first use after this call.
func ExecutableUncached() (int64, error) { return trim(true) }

func trim(uncache bool) (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("memtrim: %w", err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("memtrim: %w", err)
	}
	var dropped int64
	for _, m := range parseSmaps(smaps) {
		if !m.droppable(exe) {
			continue
		}
		// MADV_RANDOM first: a fault between the two calls reads one page.
		if uncache {
			if err := madvise(m, syscall.MADV_RANDOM); err != nil {
				return dropped, err
			}
		}
		if err := madvise(m, syscall.MADV_DONTNEED); err != nil {
			return dropped, err
		}
		dropped += m.rss
	}
	if !uncache {
		return dropped, nil
	}
	// /proc/self/exe opens the file this process runs even when an
	// upgrade replaced the path.
	return dropped, uncacheFile("/proc/self/exe")
}

// uncacheFile takes path's pages that no process maps out of the page
// cache.
func uncacheFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("memtrim: %w", err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("memtrim: fadvise %s: %w", path, err)
	}
	return nil
}

func madvise(m mapping, advice int) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, uintptr(advice)); errno != 0 {
		return fmt.Errorf("memtrim: madvise(%d) %#x-%#x: %w", advice, m.start, m.end, errno)
	}
	return nil
}

// mapping is one entry of /proc/self/smaps.
type mapping struct {
	start, end uintptr
	readOnly   bool   // r-xp or r--p: private, never written by the program
	path       string // "" for anonymous memory
	rss        int64  // bytes resident
	anonymous  int64  // bytes resident as private copies (not the file's)
}

// droppable: a read-only mapping of the executable with no private
// copy among its pages (Anonymous exactly 0), whose every page is the
// file's and comes back from the page cache as it was.
func (m mapping) droppable(exe string) bool {
	return exe != "" && m.path == exe && m.readOnly && m.anonymous == 0
}

// parseSmaps reads the header line and the Rss and Anonymous fields of
// each mapping. A line it does not understand ends nothing: the fields it
// needs are either there or the mapping is left alone (anonymous reads as
// unknown, -1).
func parseSmaps(b []byte) []mapping {
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && len(f) >= 5 && !strings.HasSuffix(f[0], ":") {
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				m := mapping{start: uintptr(start), end: uintptr(end), anonymous: -1,
					readOnly: f[1] == "r-xp" || f[1] == "r--p"}
				if len(f) >= 6 {
					// The path may contain spaces (" (deleted)" after an upgrade
					// replaced the file): everything after the inode.
					m.path = strings.TrimSpace(line[strings.Index(line, f[5]):])
				}
				out = append(out, m)
				continue
			}
		}
		if len(out) == 0 || len(f) < 3 || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			out[len(out)-1].rss = kb << 10
		case "Anonymous:":
			out[len(out)-1].anonymous = kb << 10
		}
	}
	return out
}
