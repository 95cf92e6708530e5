//go:build linux

package sandbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/silas-gateway/silas/core/sandbox/sandboxinit"
)

// Work directories: each run gets a fresh one (exec-*) in the base dir, a
// plain directory the gateway and verification read. A root gateway runs
// the program on a copy of it in a tmpfs of limits.work bytes (a stage: a
// detached mount made with fsmount, mounted nowhere on the host, prepared
// with the warm init and handed to it with the run), and copies the
// result back once every process of the run is gone: what
// a run can write is bounded (ENOSPC past it), and the run's mountinfo
// names no host path. A staged run's fresh dir is only reserved (a name):
// it is created when the copy back has something to write, so a run that
// leaves its stage empty leaves no dir, and every reader of a work dir
// (verification, Release, the start's scan) takes a missing one as empty.
// A gateway that cannot (an ordinary user, or a kernel
// without the new mount API) has the init do the same inside its namespaces
// (stageIn and stageBack in sandboxinit), on a dir made before the run. Once nothing will read a work dir any more (its run
// is verified), Release removes it or keeps it for keepWorkFor, marked by
// its sticky bit, its mtime the time of release (an earlier version's
// marker file next to it, exec-*.kept, is still honoured); the kept ones
// together stay within maxKept, oldest removed first. Pruning happens
// when a run is released and when the sandbox starts — no loop of its own.
// The base dir is read once, at start; later releases prune from an index
// in memory (workMu), so a release costs the same however many dirs are
// kept.

const (
	workPrefix = "exec-"
	keptSuffix = ".kept"
	// orphanAge: a work dir never released (its gateway died mid-run) is
	// removed at start once this old (or keepWorkFor, when longer); an
	// execution left "executed" that long verifies without its files,
	// and fails, never passes, for it.
	orphanAge = 24 * time.Hour
)

func (s *Subprocess) newWorkDir() (string, error) {
	dir, err := os.MkdirTemp(s.baseDir, workPrefix) // mode 0700
	if err != nil {
		return "", fmt.Errorf("sandbox: create work dir: %w", err)
	}
	if err := s.ownWorkDir(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// reserveWorkDir names a fresh run's work dir without creating it: a
// staged run (a root gateway) works on its stage, and its dir is made
// only when the copy back has something to write (createWorkDir). A
// mkdir in the base dir cost 0.6–1.2 ms of CPU per execution on this
// host's ext4 (BENCHMARKS.md, "Issue 26 — the work dir made on demand"),
// and `echo x` leaves nothing to keep. 128 random bits: two reservations
// never meet in practice, and createWorkDir's exclusive mkdir makes sure
// they never share a dir if they do.
func (s *Subprocess) reserveWorkDir() string {
	return filepath.Join(s.baseDir, workPrefix+strings.ToLower(rand.Text()))
}

// createWorkDir makes the reserved work dir dir, exclusively: mkdir fails
// on anything already there, a symlink included (the last component is
// never followed), so two runs never share a dir. A fresh run whose name
// was taken (fresh) gets a new one (os.MkdirTemp, exclusive as well) and
// returns it: its result names the dir its files are in. A run given a
// dir (a verification check of a run that left none) that appeared
// meanwhile is refused: what is there is not this run's.
func (s *Subprocess) createWorkDir(dir string, fresh bool) (string, error) {
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrExist) && fresh {
		return s.newWorkDir()
	}
	if err != nil {
		return "", fmt.Errorf("sandbox: create work dir: %w", err)
	}
	if err := s.ownWorkDir(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// ownWorkDir gives a new work dir its mode and, for a root gateway, the
// sandbox's uid; it removes the dir if it cannot.
func (s *Subprocess) ownWorkDir(dir string) error {
	if err := os.Chmod(dir, 0o700); err != nil { // independent of umask
		_ = os.RemoveAll(dir)
		return fmt.Errorf("sandbox: create work dir: %w", err)
	}
	if s.root {
		if err := os.Chown(dir, int(s.uid), int(s.gid)); err != nil {
			_ = os.RemoveAll(dir)
			return fmt.Errorf("sandbox: chown work dir to uid %d: %w", s.uid, err)
		}
	}
	return nil
}

// stage is a run's work dir while it runs: a tmpfs, mounted nowhere on
// the host (a gateway killed mid-run leaves no mount behind), reached
// through its descriptor.
type stage struct {
	fd   int    // the tmpfs as a detached mount (fsmount); sent to the init, which attaches it at /work
	path string // its root, for this process: /proc/self/fd/<fd>/.
}

// newStage makes an empty stage of limits.work bytes.
func (s *Subprocess) newStage() (*stage, error) {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("sandbox: work dir stage: fsopen: %w", err)
	}
	defer unix.Close(fsfd)
	for _, kv := range [][2]string{{"size", strconv.FormatInt(s.limits.work, 10)}, {"nr_inodes", strconv.FormatInt(max(1024, s.limits.work/4096), 10)},
		{"mode", "0700"}, {"uid", strconv.Itoa(int(s.uid))}, {"gid", strconv.Itoa(int(s.gid))}} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("sandbox: work dir stage: %s: %w", kv[0], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("sandbox: work dir stage: %w", err)
	}
	fd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("sandbox: work dir stage: fsmount: %w", err)
	}
	return &stage{fd: fd, path: "/proc/self/fd/" + strconv.Itoa(fd) + "/."}, nil
}

// fill copies dir into the stage.
func (st *stage) fill(dir string, limit int64, uid, gid int) error {
	if err := copyTree(dir, st.path, limit, uid, gid); err != nil {
		return fmt.Errorf("sandbox: work dir %s does not fit sandbox.max_work_bytes (%s): %w", dir, humanBytes(limit), err)
	}
	return nil
}

// copyBack replaces dir's contents with the stage's. Every process of the
// run is gone by then: nothing changes either tree while it copies.
func (st *stage) copyBack(dir string, limit int64, uid, gid int) error {
	return sandboxinit.CopyBack(st.path, dir, limit, uid, gid)
}

// empty reports whether the stage holds nothing (an error: not known to
// be empty). Read through the mount's descriptor in three system calls:
// an os.Open of its /proc/self/fd path walked procfs and registered the
// directory with the network poller, about as costly as what it saves.
func (st *stage) empty() bool {
	fd, err := unix.Openat(st.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var buf [512]byte
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false
		}
		if n == 0 {
			return true
		}
		// Every entry but "." and "..".
		if _, count, _ := unix.ParseDirent(buf[:n], 1, nil); count > 0 {
			return false
		}
	}
}

// remove lets the stage go (the kernel frees it with its last reference).
func (st *stage) remove() {
	if st.fd >= 0 {
		unix.Close(st.fd)
		st.fd = -1
	}
}

// stagesWork reports whether the gateway can make stages here (root, a
// kernel with the new mount API).
func (s *Subprocess) stagesWork() bool {
	st, err := s.newStage()
	if err != nil {
		return false
	}
	st.remove()
	return true
}

// removeWork removes a work dir: its contents, the dir and its kept
// marker.
func removeWork(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Remove(dir + keptSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// workBytes is what a work dir holds on disk: the blocks of everything
// in it.
func workBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var s unix.Stat_t
		if unix.Lstat(p, &s) == nil {
			n += s.Blocks * 512
		}
		return nil
	})
	return n
}

// sendRun writes the run's spec to the init, with the work dir's mount
// descriptor (when there is one) on its first bytes.
func sendRun(w *os.File, data []byte, mountFD int) error {
	if mountFD >= 0 {
		rc, err := w.SyscallConn()
		if err != nil {
			return err
		}
		var n int
		var serr error
		if err := rc.Write(func(fd uintptr) bool {
			n, serr = unix.SendmsgN(int(fd), data, unix.UnixRights(mountFD), nil, 0)
			return serr != unix.EAGAIN
		}); err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
		data = data[n:]
		if len(data) == 0 {
			return nil // all sent (on a SOCK_SEQPACKET, an empty write would be a record)
		}
	}
	_, err := w.Write(data)
	return err
}

// Release tells the sandbox that nothing will read dir any more (its run
// is verified, or ended without verification): it is removed, or kept for
// keepWorkFor within maxKept (sandbox.keep_work_for,
// sandbox.max_kept_work_bytes); then the kept ones are pruned. It refuses
// a dir that is not a work dir below the base dir.
func (s *Subprocess) Release(dir string) error {
	target, err := s.workDirPath(dir)
	if err != nil {
		return fmt.Errorf("sandbox: release: %w", err)
	}
	s.workMu.Lock()
	defer s.workMu.Unlock()
	fi, err := os.Lstat(target)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox: release: %w", err)
	}
	if s.keepWorkFor < 0 {
		if err := removeWork(target); err != nil {
			return fmt.Errorf("sandbox: release: %w", err)
		}
		return nil
	}
	// A kept dir is marked on itself: the sticky bit says it is released,
	// its mtime when (nothing writes to a released dir). A marker file
	// next to it (as before, still read at start) cost a new inode per
	// execution: about a millisecond of CPU on this machine's ext4, against
	// microseconds for the chmod and utimes.
	now := s.now()
	if s.kept == nil {
		s.pruneLocked(now, false) // the index is built from the base dir once (at start, normally)
	}
	again := fi.Mode()&fs.ModeSticky != 0
	// Only a dir an earlier version kept has a marker file, and the
	// start's scan saw each (pruneLocked): trying to remove one for every
	// release cost two failed system calls (os.Remove's unlink and rmdir)
	// per execution.
	if s.marked[target] {
		delete(s.marked, target)
		if err := os.Remove(target + keptSuffix); err == nil {
			again = true // kept by an earlier version: in the index since start
		}
	}
	if fi.Mode()&fs.ModeSticky == 0 {
		if err := os.Chmod(target, fi.Mode().Perm()|fs.ModeSticky); err != nil {
			return fmt.Errorf("sandbox: release: %w", err)
		}
	}
	if err := os.Chtimes(target, now, now); err != nil {
		return fmt.Errorf("sandbox: release: %w", err)
	}
	n := workBytes(target)
	if again { // released before: it moves to the newest end
		s.kept = slices.DeleteFunc(s.kept, func(k keptWork) bool {
			if k.dir == target {
				s.keptBytes -= k.bytes
				return true
			}
			return false
		})
	}
	s.kept = append(s.kept, keptWork{dir: target, at: now, bytes: n})
	s.keptBytes += n
	s.trimKeptLocked(now)
	return nil
}

// keptWork is a released work dir kept for keepWorkFor.
type keptWork struct {
	dir   string
	at    time.Time // when it was released (its marker's mtime)
	bytes int64
}

// trimKeptLocked removes the kept work dirs past keepWorkFor, then the
// oldest until the rest fit maxKept. It reads the index only, not the base
// dir: a release costs the same with one kept dir as with a hundred
// thousand (a scan of the base dir per release made every execution's cost
// grow with the executions of the last keepWorkFor).
func (s *Subprocess) trimKeptLocked(now time.Time) {
	drop := 0
	for drop < len(s.kept) {
		k := s.kept[drop]
		if now.Sub(k.at) <= s.keepWorkFor && s.keptBytes <= s.maxKept {
			break
		}
		if err := removeWork(k.dir); err != nil {
			s.log.LogAttrs(context.Background(), slog.LevelWarn, "sandbox: remove work dir", slog.String("error", err.Error()))
		}
		s.keptBytes -= k.bytes
		drop++
	}
	if drop > 0 {
		s.kept = slices.Delete(s.kept, 0, drop)
	}
}

// workDirPath checks that dir is a work dir directly below the base dir
// and returns it cleaned.
func (s *Subprocess) workDirPath(dir string) (string, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return "", fmt.Errorf("refusing %q: not an absolute path", dir)
	}
	clean := filepath.Clean(dir)
	if filepath.Dir(clean) != s.baseDir || !strings.HasPrefix(filepath.Base(clean), workPrefix) || strings.HasSuffix(clean, keptSuffix) {
		return "", fmt.Errorf("refusing %q: not a work dir of %q", dir, s.baseDir)
	}
	return clean, nil
}

// pruneWork removes kept work dirs past keepWorkFor, then the oldest
// until the rest fit maxKept; at start (orphans) also dirs never released
// and older than orphanAge.
func (s *Subprocess) pruneWork(now time.Time, orphans bool) {
	s.workMu.Lock()
	defer s.workMu.Unlock()
	s.pruneLocked(now, orphans)
}

func (s *Subprocess) pruneLocked(now time.Time, orphans bool) {
	ents, err := os.ReadDir(s.baseDir)
	if err != nil {
		s.log.LogAttrs(context.Background(), slog.LevelWarn, "sandbox: prune work dirs", slog.String("error", err.Error()))
		return
	}
	var list []keptWork
	marked := map[string]bool{} // kept dirs with an earlier version's marker file
	names := map[string]bool{}
	for _, e := range ents {
		names[e.Name()] = true
	}
	remove := func(dir string) {
		if err := removeWork(dir); err != nil {
			s.log.LogAttrs(context.Background(), slog.LevelWarn, "sandbox: remove work dir", slog.String("error", err.Error()))
		}
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, workPrefix) {
			continue
		}
		dir := filepath.Join(s.baseDir, strings.TrimSuffix(name, keptSuffix))
		if strings.HasSuffix(name, keptSuffix) {
			// A marker of an earlier version: its dir is kept since the
			// marker's mtime; the dir itself is seen below.
			if !names[strings.TrimSuffix(name, keptSuffix)] {
				remove(dir)
			}
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		at, kept := fi.ModTime(), fi.Mode()&fs.ModeSticky != 0
		if names[name+keptSuffix] {
			if mi, err := os.Lstat(dir + keptSuffix); err == nil {
				at, kept = mi.ModTime(), true
				marked[dir] = true
			}
		}
		if !kept {
			if orphans && now.Sub(at) > max(orphanAge, s.keepWorkFor) {
				remove(dir)
			}
			continue
		}
		if s.keepWorkFor < 0 {
			remove(dir)
			continue
		}
		list = append(list, keptWork{dir: dir, at: at, bytes: workBytes(dir)})
	}
	s.marked = marked
	// The index, oldest first; then the oldest go until the rest fit.
	slices.SortFunc(list, func(a, b keptWork) int { return a.at.Compare(b.at) })
	s.kept = make([]keptWork, 0, len(list)+1)
	s.keptBytes = 0
	for _, k := range list {
		s.kept = append(s.kept, k)
		s.keptBytes += k.bytes
	}
	s.trimKeptLocked(now)
}
