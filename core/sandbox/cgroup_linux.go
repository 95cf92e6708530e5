//go:build linux

package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const cgroupRoot = "/sys/fs/cgroup"

// cgroups places each run in its own pids and memory cgroups, below the
// gateway's own cgroups (so a container's limits still apply above them).
// cgroup v1 (separate pids/memory hierarchies) and v2 (unified) are
// supported; when the gateway may not create cgroups (not root, read-only
// cgroupfs) runs rely on rlimits alone and doctor says so.
type cgroups struct {
	v2     bool
	pids   string // parent dir for per-run pids cgroups (v1), or the unified parent (v2)
	memory string // parent dir for per-run memory cgroups (v1); empty in v2

	mu     sync.Mutex
	free   []*runCgroup // empty run cgroups, kept for the next runs (see put)
	closed bool         // drained: nothing more is kept
	made   int64        // run cgroups made (their names)
}

// maxFreeCgroups bounds the empty run cgroups kept for reuse: the warm
// inits of both network modes and a few runs at once.
const maxFreeCgroups = 2*poolSize + 4

// detectCgroups prepares the parent cgroups; nil when unusable.
func detectCgroups() (*cgroups, error) {
	own, err := ownCgroups()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		// Unified hierarchy at the root: a sibling tree of our own cgroup
		// (v2 forbids processes in inner nodes, so not a child of ours).
		parent := filepath.Join(cgroupRoot, filepath.Dir(own[""]), "silas-sandbox")
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids +memory"), 0); err != nil {
			return nil, fmt.Errorf("cgroup v2: enable pids and memory controllers: %w", err)
		}
		return &cgroups{v2: true, pids: parent}, nil
	}
	c := &cgroups{}
	for _, ctrl := range []string{"pids", "memory"} {
		p, ok := own[ctrl]
		if !ok {
			return nil, fmt.Errorf("cgroup v1: no %s controller", ctrl)
		}
		parent := filepath.Join(cgroupRoot, ctrl, p, "silas-sandbox")
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v1 %s: %w", ctrl, err)
		}
		if ctrl == "pids" {
			c.pids = parent
		} else {
			c.memory = parent
		}
	}
	return c, nil
}

// ownCgroups maps controller → path from /proc/self/cgroup ("" for v2).
func ownCgroups() (map[string]string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			m[ctrl] = parts[2]
		}
	}
	return m, sc.Err()
}

// runCgroup is one run's cgroup directories (the pids one, or the
// unified one, first).
//
// It keeps descriptors open for what every run does to it (open, walk
// and close of a cgroupfs path were two thirds of the CPU of the join
// and of the emptiness check): each dir's cgroup.procs for writing
// (add), the pids cgroup's pids.current for reading, each dir itself
// (openat of its cgroup.procs, which a kept descriptor would read stale).
type runCgroup struct {
	dirs      []string
	procs     []int // each dir's cgroup.procs, open for writing
	dirFDs    []int // each dir (O_PATH)
	current   int   // pids.current of dirs[0]; -1 until opened
	owner     *cgroups
	maxProcs  int
	maxMemory int64
}

// create returns cgroups with these limits for a run: empty ones a
// finished run handed back (put), or new ones.
func (c *cgroups) create(maxProcs int, maxMemory int64) (*runCgroup, error) {
	c.mu.Lock()
	for i, rc := range c.free {
		if rc.maxProcs == maxProcs && rc.maxMemory == maxMemory {
			c.free = append(c.free[:i], c.free[i+1:]...)
			c.mu.Unlock()
			return rc, nil
		}
	}
	c.made++
	name := strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(c.made, 10)
	c.mu.Unlock()
	rc := &runCgroup{owner: c, maxProcs: maxProcs, maxMemory: maxMemory, current: -1}
	// files are written in order; optional ones are skipped when the
	// kernel does not have them.
	type file struct {
		name, value string
		optional    bool
	}
	mk := func(parent string, files ...file) error {
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		rc.dirs = append(rc.dirs, d)
		for _, f := range files {
			err := os.WriteFile(filepath.Join(d, f.name), []byte(f.value), 0)
			if err != nil && !(f.optional && errors.Is(err, os.ErrNotExist)) {
				return fmt.Errorf("%s: %w", f.name, err)
			}
		}
		dfd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		rc.dirFDs = append(rc.dirFDs, dfd)
		pfd, err := unix.Openat(dfd, "cgroup.procs", unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("cgroup.procs: %w", err)
		}
		rc.procs = append(rc.procs, pfd)
		if rc.current < 0 {
			if rc.current, err = unix.Openat(dfd, "pids.current", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
				return fmt.Errorf("pids.current: %w", err)
			}
		}
		return nil
	}
	procs, mem := strconv.Itoa(maxProcs), strconv.FormatInt(maxMemory, 10)
	var err error
	if c.v2 {
		err = mk(c.pids, file{name: "pids.max", value: procs}, file{name: "memory.max", value: mem},
			file{name: "memory.swap.max", value: "0", optional: true})
	} else {
		err = mk(c.pids, file{name: "pids.max", value: procs})
		if err == nil {
			// memsw (memory + swap, after the memory limit it may not be
			// below) exists when the kernel accounts swap: without it a
			// run on a host with swap would swap instead of meeting its
			// limit.
			err = mk(c.memory, file{name: "memory.limit_in_bytes", value: mem},
				file{name: "memory.memsw.limit_in_bytes", value: mem, optional: true})
		}
	}
	if err != nil {
		rc.remove()
		return nil, fmt.Errorf("sandbox: cgroup: %w", err)
	}
	return rc, nil
}

// add moves pid into the run's cgroups.
func (rc *runCgroup) add(pid int) error {
	var b [20]byte
	p := strconv.AppendInt(b[:0], int64(pid), 10)
	for _, fd := range rc.procs {
		if _, err := unix.Write(fd, p); err != nil {
			return fmt.Errorf("sandbox: cgroup: add process: %w", err)
		}
	}
	return nil
}

// put hands a run's cgroups back once its init has been waited for: they
// are kept for a later run when no task is left in them (every process
// of the run is gone, and released: pids.current is 0), else removed.
// Making and removing a cgroup pair (a memory cgroup above all) on every
// run cost more CPU than the run's own pids and memory accounting; a kept
// one carries its limits, and nothing of the run but reclaimable page
// cache charged to it.
func (rc *runCgroup) put() {
	c := rc.owner
	if rc.empty() {
		c.mu.Lock()
		if !c.closed && len(c.free) < maxFreeCgroups {
			c.free = append(c.free, rc)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
	rc.remove()
}

// empty reports whether no task is in the run's cgroups or still counted
// in its pids cgroup (an exited task is counted until it is released).
//
// pids.current 0 says no task is in the pids cgroup (the unified one in
// v2), where cgroup.procs could only say fewer; a v1 memory cgroup is
// read for its tasks as well.
func (rc *runCgroup) empty() bool {
	var b [32]byte
	n, err := unix.Pread(rc.current, b[:], 0)
	if err != nil || strings.TrimSpace(string(b[:max(n, 0)])) != "0" {
		return false
	}
	for _, dfd := range rc.dirFDs[1:] {
		fd, err := unix.Openat(dfd, "cgroup.procs", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false
		}
		n, err := unix.Read(fd, b[:])
		unix.Close(fd)
		if err != nil || n != 0 {
			return false
		}
	}
	return true
}

// drain removes the kept cgroups and keeps no more (the sandbox closes).
func (c *cgroups) drain() {
	c.mu.Lock()
	free := c.free
	c.free, c.closed = nil, true
	c.mu.Unlock()
	for _, rc := range free {
		rc.remove()
	}
}

// remove deletes the run's cgroups; the PID namespace is gone by then, so
// they are empty (a short retry covers the kernel's asynchronous teardown).
func (rc *runCgroup) remove() {
	for _, fd := range slices.Concat(rc.procs, rc.dirFDs, []int{rc.current}) {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	rc.procs, rc.dirFDs, rc.current = nil, nil, -1
	for _, d := range rc.dirs {
		for i := 0; i < 50; i++ {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}
