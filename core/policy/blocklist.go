package policy

import (
	"path"
	"regexp"
	"strings"

	"github.com/silas-gateway/silas/cards"
)

// The built-in blocklist: commands no rule, approver or configuration can
// let through. It is checked against every command an action may run (see
// unwrap.go), before any configured rule. It is a layer in front of the
// sandbox, not a replacement for it: a determined program can always
// compute a path or a command at run time that no static check sees, which
// is why unknown programs and interpreters are high risk.

// blockCheck is one built-in refusal.
type blockCheck struct {
	name   string
	reason string
	risk   cards.Risk
	// hit looks at one command: its program's base name and its arguments.
	hit func(name string, args []string) bool
}

var blockChecks = []blockCheck{
	{"rm-root", "recursive delete of the root, a home or a system directory", cards.RiskIrreversible, rmRoot},
	{"find-delete-root", "find that deletes or runs commands over the root, a home or a system directory", cards.RiskIrreversible, findRoot},
	{"chmod-root", "recursive permission change of the root, a home or a system directory", cards.RiskIrreversible, chmodRoot},
	{"mkfs", "formats or wipes a filesystem or disk", cards.RiskIrreversible, func(n string, _ []string) bool { return isMkfs(n) }},
	{"dd-device", "writes raw data to a device", cards.RiskIrreversible, ddDevice},
	{"device-write", "writes to a device", cards.RiskIrreversible, deviceWrite},
	{"power", "stops or restarts the host", cards.RiskHigh, power},
	{"kill-all", "kills every process", cards.RiskHigh, killAll},
}

// isMkfs reports filesystem and disk wiping programs, blocked whatever
// their arguments.
func isMkfs(n string) bool {
	switch n {
	case "mkfs", "mke2fs", "mkswap", "wipefs", "blkdiscard", "mkdosfs", "mkntfs", "mkexfatfs":
		return true
	}
	return strings.HasPrefix(n, "mkfs.")
}

// systemDirs are directories whose recursive deletion or permission change
// breaks the host. Deeper paths are ordinary (medium or high) work.
var systemDirs = set("/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc",
	"/root", "/run", "/sbin", "/srv", "/sys", "/usr", "/var", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64",
	"/usr/local", "/usr/share", "/var/lib")

// stripGlobs removes trailing path elements that are glob patterns: `/*`,
// `/usr/*` and `/.*` stand for what is inside their directory.
func stripGlobs(p string) string {
	for p != "/" && p != "." && p != "" && strings.ContainsAny(path.Base(p), "*?[") {
		p = path.Dir(p)
	}
	return p
}

// homePrefix turns ~, ~/x, $HOME/x and ${HOME}/x into ./x (HOME is the work
// directory in the sandbox, and a home directory anywhere else). ok is false
// for other words.
func homePrefix(w string) (rel string, ok bool) {
	for _, p := range []string{"${HOME}", "$HOME", "~"} {
		if rest, found := strings.CutPrefix(w, p); found {
			if p == "~" && rest != "" && rest[0] != '/' {
				// ~user: another user's home.
				_, rest, _ = strings.Cut(rest, "/")
				rest = "/" + rest
			}
			return "." + rest, true
		}
	}
	return "", false
}

// rootish reports the root directory and its spellings (/, //, /., /.., /*),
// system directories, home directories (~, $HOME, ~user) and relative paths
// made only of `..` (which may climb to the root).
func rootish(w string) bool {
	if w == "" {
		return false
	}
	if rel, ok := homePrefix(w); ok {
		c := stripGlobs(path.Clean(rel))
		return c == "." || onlyDotDot(c)
	}
	if !path.IsAbs(w) {
		return onlyDotDot(stripGlobs(path.Clean(w)))
	}
	c := stripGlobs(path.Clean(w))
	return c == "/" || systemDirs[c]
}

func onlyDotDot(c string) bool {
	for _, e := range strings.Split(c, "/") {
		if e != ".." {
			return false
		}
	}
	return true
}

// positionals returns the non-option arguments (everything after --).
func positionals(args []string) []string {
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i+1:]...)
		}
		if a == "-" || !strings.HasPrefix(a, "-") {
			out = append(out, a)
		}
	}
	return out
}

// hasOpt reports a short option letter inside any cluster or a long option
// (abbreviations included) anywhere before --.
func hasOpt(args []string, short string, long ...string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if strings.HasPrefix(a, "--") {
			n, _, _ := strings.Cut(a[2:], "=")
			for _, l := range long {
				if n != "" && strings.HasPrefix(l, n) {
					return true
				}
			}
			continue
		}
		if len(a) > 1 && a[0] == '-' && strings.ContainsAny(a[1:], short) {
			return true
		}
	}
	return false
}

func anyRootish(ws []string) bool {
	for _, w := range ws {
		if rootish(w) {
			return true
		}
	}
	return false
}

func rmRoot(n string, args []string) bool {
	if n != "rm" {
		return false
	}
	if hasOpt(args, "", "no-preserve-root") {
		return true
	}
	return hasOpt(args, "rR", "recursive") && anyRootish(positionals(args))
}

func chmodRoot(n string, args []string) bool {
	if n != "chmod" && n != "chown" && n != "chgrp" {
		return false
	}
	return hasOpt(args, "R", "recursive") && anyRootish(positionals(args))
}

func findRoot(n string, args []string) bool {
	if n != "find" {
		return false
	}
	// Starting points come before the expression; -H -L -P -D x -Ox before them.
	var starts []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-H" || a == "-L" || a == "-P" || strings.HasPrefix(a, "-O") {
			continue
		}
		if a == "-D" {
			i++
			continue
		}
		if strings.HasPrefix(a, "-") || a == "(" || a == "!" || a == ")" {
			break
		}
		starts = append(starts, a)
	}
	if !anyRootish(starts) {
		return false
	}
	cmds, _ := findExecs(args)
	if hasWord(args, "-delete") {
		return true
	}
	for _, c := range cmds {
		if r, _ := classify(c, 1); r != cards.RiskLow {
			return true
		}
	}
	return false
}

func hasWord(ws []string, w string) bool {
	for _, x := range ws {
		if x == w {
			return true
		}
	}
	return false
}

// safeDevices are device files writing to which harms nothing.
// They are also the only device files reading which is not high risk: the
// sandbox's /dev holds these and nothing else.
var safeDevices = set("/dev/null", "/dev/zero", "/dev/full", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty",
	"/dev/random", "/dev/urandom")

// isDevice reports paths under /dev other than harmless ones (and
// /dev/shm, a tmpfs, and /dev/fd, the program's own descriptors).
func isDevice(w string) bool {
	if !strings.HasPrefix(w, "/") {
		return false
	}
	c := path.Clean(w)
	if !strings.HasPrefix(c, "/dev/") || safeDevices[c] {
		return false
	}
	return !strings.HasPrefix(c, "/dev/shm/") && !strings.HasPrefix(c, "/dev/fd/") && !strings.HasPrefix(c, "/dev/pts/")
}

func ddDevice(n string, args []string) bool {
	if n != "dd" {
		return false
	}
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "of="); ok && isDevice(v) {
			return true
		}
	}
	return false
}

// isRedirect reports a redirection operator word produced by the script
// lexer that writes (>, >>, >|, &>, >&, <>).
func isRedirect(w string) bool {
	return w != "" && strings.Trim(w, "<>&|") == "" && strings.Contains(w, ">")
}

// deviceWrite: a redirection to a device, or a copying program given one.
func deviceWrite(n string, args []string) bool {
	for i := 0; i+1 < len(args); i++ {
		if isRedirect(args[i]) && isDevice(args[i+1]) {
			return true
		}
	}
	switch n {
	case "cp", "mv", "tee", "install", "truncate", "shred":
		for _, a := range positionals(args) {
			if isDevice(a) {
				return true
			}
		}
	}
	return false
}

// powerVerbs are systemctl and loginctl verbs that stop the host.
var powerVerbs = set("poweroff", "reboot", "halt", "kexec", "suspend", "hibernate", "hybrid-sleep",
	"suspend-then-hibernate", "soft-reboot", "rescue", "emergency", "default", "sleep")

// powerTargets are units that stop the host when started or isolated.
var powerTargets = regexp.MustCompile(`^(poweroff|reboot|halt|kexec|suspend|hibernate|hybrid-sleep|suspend-then-hibernate|soft-reboot|rescue|emergency|sleep|shutdown|ctrl-alt-del)\.target$`)

func power(n string, args []string) bool {
	for i := 0; i+1 < len(args); i++ {
		if isRedirect(args[i]) && path.Clean(args[i+1]) == "/proc/sysrq-trigger" {
			return true
		}
	}
	switch n {
	case "shutdown", "reboot", "halt", "poweroff", "kexec":
		return true
	case "init", "telinit":
		for _, a := range positionals(args) {
			switch a {
			case "0", "6", "1", "s", "S", "single":
				return true
			}
		}
	case "systemctl", "loginctl":
		for _, a := range positionals(args) {
			if powerVerbs[a] || powerTargets.MatchString(a) {
				return true
			}
		}
	}
	return false
}

// killAll: kill with pid -1 (every process the caller may signal),
// killall5.
func killAll(n string, args []string) bool {
	if n == "killall5" {
		return true
	}
	if n != "kill" {
		return false
	}
	i := 0
	if i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		switch args[i] {
		case "-s", "-n", "--signal":
			i += 2
		case "-l", "-L", "--list", "--table":
			return false
		default:
			i++ // -9, -KILL, -SIGKILL, -s9
		}
	}
	for _, a := range args[min(i, len(args)):] {
		if a == "-1" {
			return true
		}
	}
	return false
}

// Fork bombs: `:(){ :|:& };:` and any function that calls itself from a
// pipe or the background (`f(){ f|f& };f`), plus perl's `fork while fork`.
var (
	colonFunc  = regexp.MustCompile(`:\s*\(\s*\)\s*\{`)
	funcDef    = regexp.MustCompile(`(?:^|[\s;&|(){}])(?:function\s+)?([^\s;&|(){}<>'"]+)\s*\(\s*\)\s*\{|function\s+([^\s;&|(){}<>'"]+)\s*\{`)
	perlForker = regexp.MustCompile(`fork\s+while\s+fork`)
)

// maxFuncDefs and maxFuncBody bound the fork bomb search (it is
// quadratic otherwise); a script with more function definitions than that
// is refused as too complex.
const (
	maxFuncDefs = 256
	maxFuncBody = 4096
)

func forkBomb(text string) (bomb, tooComplex bool) {
	if colonFunc.MatchString(text) || perlForker.MatchString(text) {
		return true, false
	}
	defs := funcDef.FindAllStringSubmatchIndex(text, maxFuncDefs+1)
	if len(defs) > maxFuncDefs {
		return false, true
	}
	for _, m := range defs {
		var name string
		if m[2] >= 0 {
			name = text[m[2]:m[3]]
		} else {
			name = text[m[4]:m[5]]
		}
		body := text[m[1]:min(len(text), m[1]+maxFuncBody)]
		depth := 1
		for i := 0; i < len(body); i++ {
			if body[i] == '{' {
				depth++
			} else if body[i] == '}' {
				depth--
				if depth == 0 {
					body = body[:i]
					break
				}
			}
		}
		if strings.ContainsAny(body, "|&") && containsWord(body, name) {
			return true, false
		}
	}
	return false, false
}

// containsWord reports name in s delimited by shell separators.
func containsWord(s, name string) bool {
	sep := func(b byte) bool { return strings.IndexByte(" \t\n;&|(){}<>`$\"'", b) >= 0 }
	for i := 0; ; {
		j := strings.Index(s[i:], name)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(name)
		if (j == 0 || sep(s[j-1])) && (end == len(s) || sep(s[end])) {
			return true
		}
		i = j + 1
	}
}

// blocked runs the built-in checks over an analysed action.
func (p *Policy) blocked(an *analysis) (Result, bool) {
	tooComplex := Result{Decision: Blocked, Risk: cards.RiskHigh, Rule: "blocklist/too-complex",
		Reason: "the command nests wrappers or scripts too deeply (or is too long) to be checked"}
	if an.tooDeep {
		return tooComplex, true
	}
	for _, t := range an.texts {
		bomb, complex := forkBomb(t)
		if bomb {
			return Result{Decision: Blocked, Risk: cards.RiskHigh, Rule: "blocklist/fork-bomb", Reason: "fork bomb"}, true
		}
		if complex {
			return tooComplex, true
		}
	}
	for _, v := range an.views {
		n := base(v[0])
		for _, c := range blockChecks {
			if c.hit(n, v[1:]) {
				return Result{Decision: Blocked, Risk: c.risk, Rule: "blocklist/" + c.name, Reason: c.reason}, true
			}
		}
	}
	if len(p.protected) > 0 {
		for _, ws := range [][]string{an.words, an.texts} {
			for _, w := range ws {
				if p.touchesProtected(w) {
					return Result{Decision: Blocked, Risk: cards.RiskHigh, Rule: "blocklist/protected-path",
						Reason: "reads or writes Silas's data directory"}, true
				}
			}
		}
	}
	return Result{}, false
}
