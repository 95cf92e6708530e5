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
)

// Executable drops the resident pages of the running executable's
// read-only mappings (code, read-only data) from this process's page
// tables (madvise MADV_DONTNEED; the page cache keeps them). It returns
// how many bytes were resident in the mappings it dropped.
func Executable() (int64, error) {
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
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, syscall.MADV_DONTNEED); errno != 0 {
			return dropped, fmt.Errorf("memtrim: madvise %#x-%#x: %w", m.start, m.end, errno)
		}
		dropped += m.rss
	}
	return dropped, nil
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
