package policy

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Path checks. Policy sees strings, not files: it cannot follow symlinks,
// know the work directory's location or see paths a program computes. It
// judges absolute paths lexically (after path.Clean) and refuses relative
// paths that climb out of the work directory when protected paths are set.
// The sandbox, not this file, is the boundary.

// compileProtected validates protected paths and splits them into elements.
func compileProtected(paths []string) ([][]string, error) {
	var out [][]string
	for i, p := range paths {
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("policy: protected path %d (%q): must be absolute", i, p)
		}
		c := path.Clean(p)
		if c == "/" {
			return nil, fmt.Errorf("policy: protected path %d: the root directory cannot be protected (it would block every path)", i)
		}
		out = append(out, strings.Split(c[1:], "/"))
	}
	return out, nil
}

// isPathByte reports bytes that may be part of a path as this package reads
// paths inside larger strings (code given to an interpreter, key=value
// arguments, -o/path options).
func isPathByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b >= 0x80 ||
		strings.IndexByte("._-~/$\\{}*?[],+@%#!^", b) >= 0
}

// absCandidates returns the absolute paths that appear inside w: runs of
// path bytes that start with '/' (or '$', a variable that may hold one) at
// the start of w, after a non-path byte (a quote, '=', ':', a space…) or
// after a leading short option (-o/x). Runs never overlap, so this is
// linear in len(w).
func absCandidates(w string) []string {
	var out []string
	start := 0
	if len(w) > 1 && w[0] == '-' {
		k := 1
		for k < len(w) && (w[k] >= 'a' && w[k] <= 'z' || w[k] >= 'A' && w[k] <= 'Z') {
			k++
		}
		if k < len(w) && w[k] == '/' {
			start = k
		}
	}
	for i := start; i < len(w); {
		if (w[i] != '/' && w[i] != '$') || (i > start && isPathByte(w[i-1])) {
			i++
			continue
		}
		j := i
		for j < len(w) && isPathByte(w[j]) {
			j++
		}
		out = append(out, w[i:j])
		i = j
	}
	return out
}

// procOpaque matches /proc paths that lead into another file system view
// (a process's root, cwd or open files), which lexical checks cannot follow.
var procOpaque = regexp.MustCompile(`^/proc/[^/]+/(task/[^/]+/)?(root|cwd|fd|fdinfo|map_files|exe)(/|$)`)

// touchesProtected reports whether w names a path inside a protected path,
// goes through /proc/<pid>/{root,cwd,fd}, or is a relative path that leaves
// the work directory (which may itself live under the data directory).
func (p *Policy) touchesProtected(w string) bool {
	for _, c := range absCandidates(w) {
		if p.inProtected(c) {
			return true
		}
	}
	if escapesWorkDir(w) {
		return true
	}
	if _, v, ok := strings.Cut(w, "="); ok && escapesWorkDir(v) {
		return true
	}
	for _, v := range attachedValues(w) {
		if escapesWorkDir(v) {
			return true
		}
	}
	return false
}

func (p *Policy) inProtected(abs string) bool {
	if abs[0] == '$' {
		return p.varInProtected(abs)
	}
	c := path.Clean(abs)
	if procOpaque.MatchString(c) {
		return true
	}
	elems := strings.Split(c[1:], "/")
	for _, prot := range p.protected {
		if elemsInside(elems, prot) {
			return true
		}
	}
	return false
}

// varInProtected judges $VAR/a/b: the variable may hold any directory, so
// the path is refused when what follows it ends a protected path
// ($D/.data/keys with /srv/silas/.data protected).
func (p *Policy) varInProtected(w string) bool {
	elems := strings.Split(path.Clean(w), "/")[1:]
	for _, prot := range p.protected {
		for k := 1; k <= len(prot) && k <= len(elems); k++ {
			if slices.Equal(elems[:k], prot[len(prot)-k:]) {
				return true
			}
		}
	}
	return false
}

// elemsInside reports whether the path elems may name prot or something
// inside it. Elements with $, ` or { may expand to anything (also to several
// elements) and so match; glob elements match what they would match.
func elemsInside(elems, prot []string) bool {
	for i, pe := range prot {
		if i >= len(elems) {
			return false
		}
		e := elems[i]
		if strings.ContainsAny(e, "${`\\") {
			return true
		}
		if strings.ContainsAny(e, "*?[") {
			if ok, err := path.Match(e, pe); err == nil && !ok {
				return false
			}
			continue
		}
		if e != pe {
			return false
		}
	}
	return true
}

// escapesWorkDir reports relative paths (also ~/… and $HOME/…, HOME being
// the work directory) that climb out of the work directory with `..`.
func escapesWorkDir(w string) bool {
	rel, ok := homePrefix(w)
	if !ok {
		if path.IsAbs(w) {
			return false
		}
		rel = w
	}
	c := path.Clean(rel)
	return c == ".." || strings.HasPrefix(c, "../")
}

// pathArgs returns the strings in args that may be paths: each argument,
// the value of key=value and --opt=value arguments, @file arguments and the
// values attached to short options (-o/etc/x), so that an option naming a
// path is judged the same whichever way its value is written.
func pathArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		out = append(out, a)
		if _, v, ok := strings.Cut(a, "="); ok {
			out = append(out, v)
		}
		if v, ok := strings.CutPrefix(a, "@"); ok {
			out = append(out, v)
		}
		out = append(out, attachedValues(a)...)
	}
	return out
}

// maxCluster bounds how many leading option letters attachedValues tries
// one by one; beyond it, see the proof in attachedValues.
const maxCluster = 4

// attachedValues returns what may be the value attached to a short option
// cluster (-o/etc/x, -uo/etc/x, -C../..): which letter takes the value
// depends on the program, so every split after one of the first letters is
// a candidate. A value that begins with letters is one relative path
// element followed by the rest, and whether it leaves the work directory
// does not depend on how many letters that element has, so a[k-1:] (the
// last letter and the rest) stands for every longer split: the work stays
// linear in len(a). Clusters of letters only carry no path.
func attachedValues(a string) []string {
	if len(a) < 3 || a[0] != '-' || a[1] == '-' || !isLetter(a[1]) {
		return nil
	}
	k := 1
	for k < len(a) && isLetter(a[k]) {
		k++
	}
	if k == len(a) {
		return nil
	}
	var out []string
	for j := 2; j <= k && j <= 1+maxCluster; j++ {
		out = append(out, a[j:])
	}
	if k > 1+maxCluster {
		out = append(out, a[k-1:], a[k:])
	}
	return out
}

func isLetter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }

// Sensitive paths hold credentials. Reading them is never low risk.
var (
	sensitivePrefixes = []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh", "/etc/ssl/private",
		"/root", "/run/secrets", "/var/run/secrets", "/proc/kcore", "/dev/mem", "/dev/kmem", "/dev/port",
		"/var/lib/postgresql"}
	sensitiveElems = set(".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".netrc", ".pgpass",
		".git-credentials", ".password-store", ".vault-token", ".env", "gcloud")
	sensitiveBase = regexp.MustCompile(`^(id_(rsa|dsa|ecdsa|ed25519)(_sk)?(\.pub)?|.*\.(key|pem|p12|pfx|kdbx|keystore|jks))$`)
	procSensitive = regexp.MustCompile(`^/proc/[^/]+/(task/[^/]+/)?(environ|mem|cmdline|auxv|maps|smaps|root|cwd|fd|map_files|exe)(/|$)`)
)

// sensitive reports a path that holds or leads to credentials.
func sensitive(w string) bool {
	if w == "" {
		return false
	}
	if strings.HasPrefix(w, "~") && !strings.HasPrefix(w, "~/") && w != "~" {
		return true // another user's home
	}
	c := path.Clean(w)
	if path.IsAbs(c) {
		for _, p := range sensitivePrefixes {
			if c == p || strings.HasPrefix(c, p+"/") || (strings.HasPrefix(c, p) && strings.HasPrefix(p, "/etc/")) {
				return true
			}
		}
		if procSensitive.MatchString(c) {
			return true
		}
	}
	if isDevice(c) {
		return true // a disk or another device: its bytes are not files policy can judge
	}
	for _, e := range strings.Split(c, "/") {
		if sensitiveElems[e] {
			return true
		}
	}
	return sensitiveBase.MatchString(path.Base(c))
}

func anySensitive(args []string) bool {
	for _, a := range pathArgs(args) {
		if sensitive(a) {
			return true
		}
	}
	return false
}

// outsideWorkDir reports a path outside the work directory and the shared
// scratch directories: an absolute path elsewhere, a relative path climbing
// out with `..`, another user's home.
func outsideWorkDir(w string) bool {
	if strings.HasPrefix(w, "~") && !strings.HasPrefix(w, "~/") && w != "~" {
		return true
	}
	if escapesWorkDir(w) {
		return true
	}
	if !path.IsAbs(w) {
		return false
	}
	c := path.Clean(w)
	for _, ok := range []string{"/tmp", "/var/tmp", "/dev/shm", "/dev/fd"} {
		if c == ok || strings.HasPrefix(c, ok+"/") {
			return false
		}
	}
	return !safeDevices[c]
}
