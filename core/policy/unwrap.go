package policy

import (
	"path"
	"strings"
)

// This file finds every command an argv may run: the argv itself, the
// command behind a wrapper (`env X=1 rm …`, `nice -n 5 rm …`, `sudo -u x
// rm …`), the commands of a `sh -c` script, a busybox applet, the commands
// of `find -exec`. The blocklist is applied to each of them.

const (
	// maxDepth bounds wrapper and script nesting; deeper actions are refused.
	maxDepth = 16
	// maxViews bounds how many commands one action may contain, and
	// maxWords how many words all of them hold together (suffix reading
	// revisits words); actions beyond either are refused rather than
	// half-checked, and checking stays linear in the budget.
	maxViews = 512
	maxWords = 1 << 16
)

// shells run their -c argument as a script.
var shells = set("sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "ash", "hush", "posh", "yash",
	"rbash", "fish", "csh", "tcsh")

// interpreters run code given as an argument or file; nothing about their
// arguments tells what they do.
var interpreters = set("python", "python2", "python3", "pypy", "pypy3", "perl", "ruby", "irb", "node", "nodejs",
	"deno", "bun", "php", "lua", "luajit", "tclsh", "wish", "expect", "awk", "gawk", "mawk", "nawk", "busybox-awk",
	"Rscript", "R", "julia", "java", "jshell", "groovy", "scala", "osascript", "pwsh", "powershell", "guile",
	"racket", "sbcl", "ghci", "runghc", "erl", "escript", "elixir", "iex", "make", "gmake", "gdb", "vi", "vim",
	"nvim", "ex", "ed", "emacs", "source", ".")

// interpreterPrefixes catch versioned names (python3.12, perl5.36, php8.2, lua5.4).
var interpreterPrefixes = []string{"python", "pypy", "perl", "ruby", "php", "lua", "node", "tclsh"}

func isInterpreter(name string) bool {
	if interpreters[name] {
		return true
	}
	for _, p := range interpreterPrefixes {
		if rest, ok := strings.CutPrefix(name, p); ok && rest != "" && strings.Trim(rest, "0123456789.-") == "" {
			return true
		}
	}
	return false
}

// privileged wrappers run their command as another user or in another root.
var privileged = set("sudo", "doas", "su", "runuser", "pkexec", "chroot", "sudoedit", "setpriv", "nsenter",
	"unshare", "capsh")

// wrapperSpec describes how a wrapper program finds the command it runs:
// the short options that take an argument, the long options that take an
// argument, and how many positional arguments come before the command.
type wrapperSpec struct {
	short   string
	long    []string
	skipPos int
	// stopFlags are options after which no command follows (taskset -p).
	stopFlags string
}

// wrappers run the rest of their argv as a command after their own options.
// All of them stop reading options at the first non-option (their getopt
// strings start with "+"), as this parser does.
var wrappers = map[string]wrapperSpec{
	"env":       {short: "uCS", long: []string{"unset", "chdir", "split-string"}},
	"nice":      {short: "n", long: []string{"adjustment"}},
	"nohup":     {},
	"timeout":   {short: "sk", long: []string{"signal", "kill-after"}, skipPos: 1},
	"setsid":    {},
	"stdbuf":    {short: "ioe", long: []string{"input", "output", "error"}},
	"ionice":    {short: "cnpPu", long: []string{"class", "classdata", "pid", "pgid", "uid"}, stopFlags: "pPu"},
	"taskset":   {skipPos: 1, stopFlags: "p"},
	"unbuffer":  {},
	"command":   {},
	"exec":      {short: "a"},
	"time":      {short: "fo", long: []string{"format", "output"}},
	"chrt":      {short: "TPD", long: []string{"sched-runtime", "sched-period", "sched-deadline"}, skipPos: 1, stopFlags: "p"},
	"nocache":   {},
	"eatmydata": {},
	"fakeroot":  {short: "lsi", long: []string{"lib", "faked"}},
	"xargs": {short: "adEIILLnPs", long: []string{"arg-file", "delimiter", "max-args", "max-procs", "max-chars",
		"process-slot-var", "max-lines", "replace", "eof"}},
	// Privileged ones: their command is found the same way.
	"sudo":     {short: "ugpCrtDTUcRa", long: []string{"user", "group", "prompt", "close-from", "role", "type", "chdir", "command-timeout", "other-user", "host", "login-class", "chroot", "auth-type"}},
	"doas":     {short: "aCu"},
	"pkexec":   {long: []string{"user"}},
	"chroot":   {long: []string{"userspec", "groups"}, skipPos: 1},
	"runuser":  {short: "ugGsw", long: []string{"user", "group", "supp-group", "shell", "whitelist-environment", "session-command"}},
	"flock":    {short: "wE", long: []string{"timeout", "wait", "conflict-exit-code"}, skipPos: 1},
	"busybox":  {},
	"watch":    {short: "n", long: []string{"interval"}},
	"strace":   {short: "eoOpPsSuEXabI", long: []string{"output", "attach", "user", "env", "string-limit"}},
	"ltrace":   {short: "eoOpPsSuEXabIAlnLwx", long: []string{"output"}},
	"valgrind": {},
	"sg":       {skipPos: 1},
	"systemd-run": {short: "pEMuG", long: []string{"property", "setenv", "machine", "unit", "uid", "gid", "description",
		"slice", "working-directory", "on-calendar", "on-active", "on-boot", "on-startup", "on-unit-active", "on-unit-inactive", "timer-property", "service-type"}},
}

// scriptWrappers take a script (not an argv) in an option.
var scriptOpts = map[string]struct {
	short string
	long  []string
}{
	"su":      {short: "c", long: []string{"command", "session-command"}},
	"runuser": {short: "c", long: []string{"command", "session-command"}},
	"flock":   {short: "c", long: []string{"command"}},
	// man runs its pager (and an --html browser) as a shell command.
	"man": {short: "P", long: []string{"pager", "html"}},
}

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// base is the program name the blocklist matches: the last element of
// argv[0], whatever directory it was given in.
func base(argv0 string) string {
	if argv0 == "" {
		return ""
	}
	return path.Base(argv0)
}

// longTakesArg reports whether the long option name (without dashes, maybe
// abbreviated, as getopt_long accepts) takes an argument.
func longTakesArg(name string, long []string) bool {
	if name == "" {
		return false
	}
	for _, l := range long {
		if strings.HasPrefix(l, name) {
			return true
		}
	}
	return false
}

// wrapped returns the command a wrapper runs (nil when none: `env` alone
// prints the environment, `taskset -p` acts on a pid) and, for env -S and
// the like, whether the command came from a split string.
func wrapped(name string, args []string) []string {
	spec, ok := wrappers[name]
	if !ok {
		return nil
	}
	var prefix []string // env -S words go before the rest
	i := 0
opts:
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			i++
			break opts
		case a == "-" || !strings.HasPrefix(a, "-"):
			break opts
		case strings.HasPrefix(a, "--"):
			n, v, hasV := strings.Cut(a[2:], "=")
			if name == "env" && longTakesArg(n, []string{"split-string"}) {
				if !hasV && i+1 < len(args) {
					i++
					v = args[i]
				}
				prefix = append(prefix, splitWords(v)...)
				continue
			}
			if !hasV && longTakesArg(n, spec.long) {
				i++
			}
		default:
			if name == "nice" && strings.Trim(a[1:], "0123456789") == "" {
				continue // nice -10
			}
			for j := 1; j < len(a); j++ {
				if strings.IndexByte(spec.stopFlags, a[j]) >= 0 {
					return nil
				}
				if strings.IndexByte(spec.short, a[j]) < 0 {
					continue
				}
				v := a[j+1:]
				if v == "" && i+1 < len(args) {
					i++
					v = args[i]
				}
				if name == "env" && a[j] == 'S' {
					prefix = append(prefix, splitWords(v)...)
				}
				break
			}
		}
	}
	rest := args[min(i, len(args)):]
	if name == "env" {
		for len(rest) > 0 && (isAssignment(rest[0]) || rest[0] == "-") {
			rest = rest[1:]
		}
	}
	for n := spec.skipPos; n > 0 && len(rest) > 0; n-- {
		if name == "flock" && len(rest) > 1 && (rest[1] == "-c" || strings.HasPrefix(rest[1], "--c")) {
			return nil // flock FILE -c SCRIPT: a script, see scriptOf
		}
		rest = rest[1:]
	}
	out := append(append([]string(nil), prefix...), rest...)
	if len(out) == 0 {
		return nil
	}
	return out
}

// shellScript returns the -c script of a shell invocation, if any.
func shellScript(args []string) (string, bool) {
	cflag := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" || a == "-":
			if cflag && i+1 < len(args) {
				return args[i+1], true
			}
			return "", false
		case strings.HasPrefix(a, "--"):
			n, v, hasV := strings.Cut(a[2:], "=")
			if n == "command" { // fish
				if hasV {
					return v, true
				}
				cflag = true
				continue
			}
			if !hasV && (n == "rcfile" || n == "init-file") {
				i++
			}
		case len(a) > 1 && (a[0] == '-' || a[0] == '+'):
			for j := 1; j < len(a); j++ {
				switch a[j] {
				case 'c':
					cflag = true
				case 'o', 'O':
					i++
				}
			}
		default:
			if cflag {
				return a, true
			}
			return "", false // a script file: not visible here
		}
	}
	return "", false
}

// scriptOf returns the script given in an option of su, runuser or flock.
func scriptOf(name string, args []string) (string, bool) {
	spec, ok := scriptOpts[name]
	if !ok {
		return "", false
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "--") {
			n, v, hasV := strings.Cut(a[2:], "=")
			if longTakesArg(n, spec.long) {
				if hasV {
					return v, true
				}
				if i+1 < len(args) {
					return args[i+1], true
				}
			}
			continue
		}
		if len(a) > 1 && a[0] == '-' {
			if k := strings.IndexAny(a[1:], spec.short); k >= 0 {
				if v := a[k+2:]; v != "" {
					return v, true
				}
				if i+1 < len(args) {
					return args[i+1], true
				}
			}
		}
	}
	return "", false
}

// findExecs returns the commands of find's -exec, -execdir, -ok and -okdir
// actions, and whether it has an action that writes (-delete, -fprint…).
func findExecs(args []string) (cmds [][]string, writes bool) {
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-exec", "-execdir", "-ok", "-okdir":
			j := i + 1
			for j < len(args) && args[j] != ";" && args[j] != "+" {
				j++
			}
			cmds = append(cmds, args[i+1:j])
			i = j
		case "-delete", "-fprint", "-fprint0", "-fprintf", "-fls":
			writes = true
		}
	}
	return cmds, writes
}

// analysis is everything found in one action.
type analysis struct {
	// views are the commands found (argv[0] as written).
	views [][]string
	// texts are scripts and joined command lines, for text checks.
	texts []string
	// words are every argument seen, for path checks.
	words []string
	// tooDeep is set when nesting or size limits were hit.
	tooDeep bool
	// nwords counts words against maxWords.
	nwords int
}

func analyze(argv []string) *analysis {
	an := &analysis{}
	an.texts = append(an.texts, strings.Join(argv, " "))
	an.add(argv, 0)
	return an
}

// add records one command and everything it runs.
func (an *analysis) add(argv []string, depth int) {
	if len(argv) == 0 {
		return
	}
	if an.tooDeep {
		return
	}
	an.nwords += len(argv)
	if depth > maxDepth || len(an.views) >= maxViews || an.nwords > maxWords {
		an.tooDeep = true
		return
	}
	an.views = append(an.views, argv)
	an.words = append(an.words, argv...)
	name := base(argv[0])
	args := argv[1:]
	switch {
	case shells[name]:
		if s, ok := shellScript(args); ok {
			an.script(s, depth+1)
		}
		// `sh -c '"$@"' sh rm -rf /` runs its further arguments.
		an.suffixes(argv, depth)
	case name == "eval":
		an.script(strings.Join(args, " "), depth+1)
	case name == "watch" && !hasShortFlag(args, 'x', "exec"):
		if inner := wrapped(name, args); inner != nil {
			an.script(strings.Join(inner, " "), depth+1)
		}
	case name == "busybox":
		an.add(args, depth+1)
	case name == "git":
		// git -c alias.x='!cmd' / core.sshCommand=cmd: read the values
		// of -c as scripts.
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-c" {
				if _, v, ok := strings.Cut(args[i+1], "="); ok {
					an.script(strings.TrimPrefix(v, "!"), depth+1)
				}
			}
		}
	case name == "find":
		cmds, _ := findExecs(args)
		for _, c := range cmds {
			an.add(c, depth+1)
		}
	default:
		if s, ok := scriptOf(name, args); ok {
			an.script(s, depth+1)
		}
		if _, ok := wrappers[name]; ok {
			if inner := wrapped(name, args); inner != nil {
				an.add(inner, depth+1)
				if !recognized(base(inner[0])) {
					// The options may have been read differently from
					// the real program: look at every later argument.
					an.suffixes(argv, depth)
				}
				return
			}
		}
		if !known(name) {
			an.suffixes(argv, depth)
		}
	}
}

// script records a script and its commands.
func (an *analysis) script(s string, depth int) {
	if depth > maxDepth {
		an.tooDeep = true
		return
	}
	an.nwords += len(s) / 8 // scripts cost by length too
	an.texts = append(an.texts, s)
	cmds, ok := splitScript(s)
	if !ok {
		an.tooDeep = true
	}
	for _, c := range cmds {
		an.words = append(an.words, c...)
		an.add(commandWords(c), depth)
	}
}

// suffixes treats every later argument that names a program the blocklist
// or unwrapping cares about as the start of a command. It is used for
// programs whose argument syntax is not known here (`strace -f rm -rf /`,
// `ssh host reboot`), where over-reading can only refuse more.
func (an *analysis) suffixes(argv []string, depth int) {
	for i := 1; i < len(argv) && !an.tooDeep; i++ {
		if n := base(argv[i]); suffixNames[n] || shells[n] || isWrapperName(n) || isMkfs(n) {
			an.add(argv[i:], depth+1)
		}
	}
}

func isWrapperName(n string) bool {
	_, ok := wrappers[n]
	return ok || privileged[n] || n == "eval" || n == "watch"
}

// suffixNames are the programs blocklist checks look at.
var suffixNames = set("rm", "dd", "shred", "mke2fs", "mkswap", "wipefs", "blkdiscard", "shutdown", "reboot", "halt",
	"poweroff", "kexec", "init", "telinit", "systemctl", "loginctl", "kill", "killall5", "find", "chmod", "chown",
	"chgrp", "cp", "mv", "tee", "truncate", "install")

// recognized reports names this package knows anything about.
func recognized(n string) bool {
	return known(n) || shells[n] || isInterpreter(n) || isWrapperName(n) || suffixNames[n] || isMkfs(n)
}

// known reports programs whose arguments this package understands (so
// their arguments are not read as commands).
func known(name string) bool {
	_, ro := readOnly[name]
	return ro || mutating[name]
}

// hasShortFlag reports a short flag (also inside a cluster) or a long one
// (maybe abbreviated) among the options before the first positional.
func hasShortFlag(args []string, short byte, long string) bool {
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return false
		}
		if strings.HasPrefix(a, "--") {
			n, _, _ := strings.Cut(a[2:], "=")
			if n != "" && strings.HasPrefix(long, n) {
				return true
			}
			continue
		}
		if strings.IndexByte(a[1:], short) >= 0 {
			return true
		}
	}
	return false
}
