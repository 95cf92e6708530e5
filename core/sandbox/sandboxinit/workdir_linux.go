//go:build linux

package sandboxinit

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"
)

// The work dir's copies, in and out of a stage (a tmpfs): the gateway
// (core/sandbox) and a staging init both make them.

// CopyBack replaces dir's contents with src's (a stage). Every process of the
// run is gone by then: nothing changes either tree while it copies.
func CopyBack(src, dir string, limit int64, uid, gid int) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(path.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return CopyTree(src, dir, limit, uid, gid)
}

// errTooBig: a copy would write more than its limit.
var errTooBig = fmt.Errorf("more bytes than the limit: %w", unix.ENOSPC)

// CopyTree copies the contents of src into the existing dir dst, as uid
// and gid: directories, regular files (at most limit bytes in all, a
// sparse file counted at its full length) and symlinks (as links, never
// followed); other files are left out, and so are set-id bits. Neither
// tree may change while it copies (the caller's guarantee).
func CopyTree(src, dst string, limit int64, uid, gid int) error {
	var used int64
	type dirMode struct {
		path  string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirMode
	err := walk(src, "", func(p, rel string) error {
		target := path.Join(dst, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
			if err := os.Lchown(target, uid, gid); err != nil {
				return err
			}
			dirs = append(dirs, dirMode{target, fi.Mode().Perm(), fi.ModTime()})
			return nil
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(l, target); err != nil {
				return err
			}
			if err := os.Lchown(target, uid, gid); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if fi.Size() > limit-used {
				return fmt.Errorf("%s: %w", rel, errTooBig)
			}
			if err := copyWorkFile(p, target, fi, uid, gid); err != nil {
				return err
			}
			used += fi.Size()
		default:
			return nil // fifos, sockets, devices: not work
		}
		return setMtime(target, fi.ModTime())
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i].path, dirs[i].mode); err != nil {
			return err
		}
		if err := setMtime(dirs[i].path, dirs[i].mtime); err != nil {
			return err
		}
	}
	return nil
}

func copyWorkFile(src, dst string, fi fs.FileInfo, uid, gid int) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = io.CopyN(out, in, fi.Size())
	if err == io.EOF {
		err = nil // shorter than it said: nothing changes it, so it cannot be
	}
	if err == nil {
		err = out.Chown(uid, gid)
	}
	if err == nil {
		err = out.Chmod(fi.Mode().Perm())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func setMtime(p string, t time.Time) error {
	ts := []unix.Timespec{unix.NsecToTimespec(t.UnixNano()), unix.NsecToTimespec(t.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// WorkDirFull reports whether a stage (a tmpfs) has no room left.
func WorkDirFull(dir string) bool {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil || st.Type != unix.TMPFS_MAGIC {
		return false
	}
	return st.Bavail == 0 || st.Ffree == 0
}

// walk calls fn for every entry below src (not src itself), each
// directory before its entries, in lexical order, never following a
// symlink (a symlinked src has no entries): what filepath.WalkDir does,
// without importing path/filepath, which Go initialises only after most
// of the gateway's packages (see init).
func walk(src, rel string, fn func(p, rel string) error) error {
	dir := path.Join(src, rel)
	if rel == "" {
		dir = src // as given: "/proc/self/fd/N/." is a directory, its clean form a link
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() {
			return err
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		r := path.Join(rel, e.Name())
		if err := fn(path.Join(src, r), r); err != nil {
			return err
		}
		if e.IsDir() {
			if err := walk(src, r, fn); err != nil {
				return err
			}
		}
	}
	return nil
}
