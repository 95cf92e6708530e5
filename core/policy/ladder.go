package policy

import (
	"path"
	"strings"

	"github.com/silas-gateway/silas/cards"
)

// The built-in risk ladder used by rules with `risk: auto`. It classifies
// by allowlist: a program is low risk only when it is known to be read-only
// AND its arguments keep it read-only; known ordinary mutating programs are
// medium (high when they reach outside the work directory); everything
// else — unknown programs, interpreters, privilege changers — is high.
// docs/policy.md lists the programs.

// trustedBinDirs: an argv[0] given with a directory counts as the named
// program only when it is one of these (the sandbox's PATH and the sbin
// directories); `./cat` or `/tmp/x/cat` are unknown programs.
var trustedBinDirs = set("/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin")

// progName returns the program name to classify and whether it is one the
// ladder may know.
func progName(argv0 string) (string, bool) {
	if argv0 == "" {
		return "", false
	}
	if !strings.Contains(argv0, "/") {
		return argv0, true
	}
	c := path.Clean(argv0)
	if !path.IsAbs(c) || !trustedBinDirs[path.Dir(c)] {
		return c, false
	}
	return path.Base(c), true
}

// argCheck decides the risk of a read-only program from its arguments.
type argCheck func(args []string, depth int) (cards.Risk, string)

// readOnly are the programs that may be low risk. A nil check means every
// argument keeps the program read-only.
var readOnly = map[string]argCheck{}

func init() {
	for _, n := range []string{
		"uname", "echo", "printf", "whoami", "id", "groups", "logname", "users", "who", "w", "uptime", "pwd",
		"true", "false", "nproc", "arch", "lscpu", "lsblk", "lsmem", "free", "df", "du", "ps", "printenv",
		"sleep", "seq", "yes", "ls", "cat", "tac", "head", "tail", "wc", "cut", "tr", "nl", "fold", "fmt", "rev",
		"paste", "join", "comm", "column", "expand", "unexpand", "od", "base32", "base64", "basename", "dirname",
		"realpath", "readlink", "stat", "which", "grep", "egrep", "fgrep", "zcat", "diff", "cmp",
		"md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum", "b2sum", "cksum", "sum",
		"expr", "test", "[", "factor", "cal", "locale", "tty", "jq", "numfmt",
	} {
		readOnly[n] = nil
	}
	readOnly["date"] = dateCheck
	readOnly["hostname"] = hostnameCheck
	readOnly["sort"] = sortCheck
	readOnly["uniq"] = uniqCheck
	readOnly["find"] = findCheck
	readOnly["file"] = fileCheck
	readOnly["dmesg"] = dmesgCheck
	readOnly["systemctl"] = systemctlCheck
	for _, n := range []string{"man", "apropos", "whatis"} {
		readOnly[n] = manCheck
	}
}

// mutating are ordinary programs that change files (or fetch them): medium
// risk while they stay in the work directory and /tmp, high beyond it.
var mutating = set("touch", "mkdir", "rmdir", "cp", "mv", "rm", "ln", "tee", "truncate", "chmod", "chown", "chgrp",
	"install", "sed", "tar", "gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "unzstd", "zip", "unzip",
	"split", "csplit", "git", "curl", "wget", "rsync", "dd", "shred", "mktemp", "mkfifo", "shuf")

// execOptions are the options with which an otherwise ordinary mutating
// program runs another program or a shell command: they make it high.
var execOptions = map[string]struct {
	short string
	long  []string
}{
	"tar":     {"IF", []string{"to-command", "use-compress-program", "checkpoint-action", "info-script", "new-volume-script", "rsh-command", "rmt-command"}},
	"rsync":   {"e", []string{"rsh", "rsync-path"}},
	"zip":     {"", []string{"unzip-command"}},
	"wget":    {"", []string{"use-askpass"}},
	"split":   {"", []string{"filter"}},
	"install": {"", []string{"strip-program"}},
}

// runsCommands reports arguments that make a mutating program run other
// programs: the options above, zip -TT, sed without --sandbox (its e
// command and s///e flag run shell commands), git's many ways to run
// commands.
func runsCommands(name string, args []string) bool {
	switch name {
	case "sed":
		return !hasOpt(args, "", "sandbox")
	case "git":
		return gitRunsCommands(args)
	case "zip":
		if hasWord(args, "-TT") {
			return true
		}
	case "tar":
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			// Old-style bundled options: tar xIf cmd a.tar.
			args = append([]string{"-" + args[0]}, args[1:]...)
		}
	}
	if o, ok := execOptions[name]; ok {
		return hasOpt(args, o.short, o.long...)
	}
	return false
}

// gitSafe are subcommands that run no user-given command (hooks of a fresh
// clone in the work directory are not executable).
var gitSafe = set("status", "log", "diff", "show", "clone", "init", "add", "commit", "checkout", "switch", "restore",
	"branch", "tag", "fetch", "pull", "push", "merge", "rev-parse", "ls-files", "ls-remote", "grep", "blame",
	"remote", "reset", "stash", "describe", "shortlog", "rm", "mv", "version", "help")

// gitRunsCommands: global -c/--config-env/--exec-path (aliases with !,
// core.sshCommand, pagers…), a subcommand outside gitSafe (rebase --exec,
// bisect run, submodule foreach, filter-branch…), upload-pack/receive-pack
// options or ext:: transports.
func gitRunsCommands(args []string) bool {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			break
		}
		n, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case a == "-c" || n == "config-env" || n == "exec-path":
			return true
		case a == "-C" || n == "git-dir" || n == "work-tree" || n == "namespace":
			if !strings.Contains(a, "=") {
				i++
			}
		}
	}
	if i >= len(args) || !gitSafe[args[i]] {
		return i < len(args)
	}
	sub, rest := args[i], args[i+1:]
	if sub == "grep" && hasOpt(rest, "O", "open-files-in-pager") {
		return true // git grep -O<prog> runs <prog> on the matching files
	}
	for _, a := range rest {
		if strings.Contains(a, "upload-pack") || strings.Contains(a, "receive-pack") || strings.HasPrefix(a, "ext::") ||
			strings.HasPrefix(a, "--exec") || strings.HasPrefix(a, "--template") {
			return true
		}
	}
	return sub == "clone" && hasOpt(rest, "u", "upload-pack")
}

// pureWrappers only change how their command runs (environment, priority,
// time limit, buffering): the command is classified and the result raised
// to at least medium, because the wrapper's own options are not judged.
var pureWrappers = set("env", "nice", "nohup", "timeout", "setsid", "stdbuf", "ionice", "taskset", "unbuffer",
	"command", "exec", "time", "chrt", "nocache", "eatmydata", "busybox")

// programVars name a program, a library or code that programs load or run:
// setting one runs whatever it names (LD_PRELOAD, PAGER, GIT_SSH_COMMAND,
// PERL5OPT=-Mx…). PATH decides which file the command name means.
var programVars = set("EDITOR", "VISUAL", "BROWSER", "BASH_ENV", "ENV", "PROMPT_COMMAND", "PATH", "SHELL",
	"SHELLOPTS", "BASHOPTS", "PS4", "GCONV_PATH", "LOCPATH", "NLSPATH", "LESSOPEN", "LESSCLOSE", "CLASSPATH",
	"MAKEFLAGS", "MFLAGS", "WGETRC", "CURL_HOME", "ZDOTDIR")

// programVarPrefixes and programVarSuffixes catch the families
// (LD_AUDIT, PYTHONSTARTUP, NODE_OPTIONS, SYSTEMD_PAGER, GIT_EXTERNAL_DIFF,
// RSYNC_RSH, TAR_OPTIONS, ZIPOPT, SSH_ASKPASS…).
var (
	programVarPrefixes = []string{"LD_", "GIT_", "PYTHON", "PERL", "RUBY", "NODE_", "LUA_", "JAVA", "_JAVA", "JDK_",
		"PHP", "TCL", "GEM_", "BUNDLE_", "NPM_CONFIG_", "GLIBC_"}
	programVarSuffixes = []string{"PAGER", "EDITOR", "_COMMAND", "ASKPASS", "_RSH", "_OPTIONS", "OPT", "OPTS", "_PROG",
		"_PROGRAM"}
	// gitSafeVars only name who wrote a commit and when.
	gitSafeVars = set("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME",
		"GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE", "GIT_TERMINAL_PROMPT")
)

func isProgramVar(name string) bool {
	if programVars[name] {
		return true
	}
	if gitSafeVars[name] {
		return false
	}
	for _, p := range programVarPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	for _, s := range programVarSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// setsProgramVar reports an env assignment (also inside -S/--split-string)
// to a variable that names a program or a library.
func setsProgramVar(args []string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		var words []string
		switch {
		case a == "-S" || (strings.HasPrefix(a, "--s") && longTakesArg(strings.TrimPrefix(a, "--"), []string{"split-string"})):
			if i+1 < len(args) {
				i++
				words = splitWords(args[i])
			}
		case strings.HasPrefix(a, "-S"):
			words = splitWords(a[2:])
		case strings.HasPrefix(a, "--s") && strings.Contains(a, "="):
			_, v, _ := strings.Cut(a, "=")
			words = splitWords(v)
		case a == "-u" || a == "-C" || a == "--unset" || a == "--chdir":
			i++
			continue
		case strings.HasPrefix(a, "-"):
			continue
		case isAssignment(a):
			words = []string{a}
		default:
			return false // the command: env's own arguments end here
		}
		for _, w := range words {
			if n, _, ok := strings.Cut(w, "="); ok && isAssignment(w) && isProgramVar(n) {
				return true
			}
		}
	}
	return false
}

func maxRisk(a, b cards.Risk) cards.Risk {
	if b.Rank() > a.Rank() {
		return b
	}
	return a
}

// classify returns the ladder's risk for one argv and the name of the step
// that decided it (shown as the rule in audit entries).
func classify(argv []string, depth int) (cards.Risk, string) {
	if len(argv) == 0 {
		return cards.RiskHigh, "empty"
	}
	if depth > maxDepth {
		return cards.RiskHigh, "too-complex"
	}
	name, ok := progName(argv[0])
	if !ok {
		return cards.RiskHigh, "unknown-program"
	}
	args := argv[1:]
	switch {
	case shells[name] || isInterpreter(name) || name == "eval" || name == "watch":
		return cards.RiskHigh, "interpreter"
	case privileged[name]:
		return cards.RiskHigh, "privileged"
	case name == "env" && setsProgramVar(args):
		return cards.RiskHigh, "runs-program"
	case pureWrappers[name]:
		inner := args
		if name != "busybox" {
			inner = wrapped(name, args)
		}
		if len(inner) == 0 {
			return cards.RiskMedium, "wrapper"
		}
		r, _ := classify(inner, depth+1)
		return maxRisk(r, cards.RiskMedium), "wrapper"
	}
	if _, ok := wrappers[name]; ok {
		// xargs, strace, flock…: they run commands with arguments
		// policy cannot see (xargs appends its input).
		return cards.RiskHigh, "runs-commands"
	}
	if check, ok := readOnly[name]; ok {
		r, step := cards.RiskLow, "read-only"
		if check != nil {
			r, step = check(args, depth)
		}
		if r.Rank() < cards.RiskHigh.Rank() && anySensitive(args) {
			return cards.RiskHigh, "sensitive-path"
		}
		if r == cards.RiskMedium && anyOutside(name, args) {
			return cards.RiskHigh, "outside-workdir"
		}
		return r, step
	}
	if mutating[name] {
		if runsCommands(name, args) {
			return cards.RiskHigh, "runs-commands"
		}
		if anySensitive(args) {
			return cards.RiskHigh, "sensitive-path"
		}
		if anyOutside(name, args) {
			return cards.RiskHigh, "outside-workdir"
		}
		return cards.RiskMedium, "mutating"
	}
	return cards.RiskHigh, "unknown-program"
}

// anyOutside reports an argument naming a path outside the work directory,
// skipping arguments that are not paths for the few programs where they
// commonly start with '/' (sed scripts, git messages).
func anyOutside(name string, args []string) bool {
	switch name {
	case "sed":
		args = dropSedScript(args)
	case "git":
		args = dropAfter(args, "-m", "--message")
	}
	for _, a := range pathArgs(args) {
		if outsideWorkDir(a) {
			return true
		}
	}
	return false
}

// dropSedScript removes sed's script: the values of -e/--expression, or the
// first non-option argument when there is none.
func dropSedScript(args []string) []string {
	if hasOpt(args, "e", "expression") {
		return dropAfter(args, "-e", "--expression")
	}
	out := append([]string(nil), args...)
	for i, a := range out {
		if a == "--" {
			if i+1 < len(out) {
				return append(out[:i+1], out[i+2:]...)
			}
			return out
		}
		if !strings.HasPrefix(a, "-") {
			return append(out[:i], out[i+1:]...)
		}
	}
	return out
}

// dropAfter removes the argument following each of the given options.
func dropAfter(args []string, opts ...string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if hasWord(opts, args[i]) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// parsed is an argument list read the way GNU getopt_long reads it: options
// anywhere until --, short options clustered, long options abbreviable.
type parsed struct {
	short string
	long  []string
	pos   []string
}

func parseArgs(args []string, shortArg string, longArg []string) parsed {
	var p parsed
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			p.pos = append(p.pos, args[i+1:]...)
			return p
		case a == "-" || !strings.HasPrefix(a, "-"):
			p.pos = append(p.pos, a)
		case strings.HasPrefix(a, "--"):
			n, _, hasV := strings.Cut(a[2:], "=")
			p.long = append(p.long, n)
			if !hasV && longTakesArg(n, longArg) {
				i++
			}
		default:
			for j := 1; j < len(a); j++ {
				p.short += a[j : j+1]
				if strings.IndexByte(shortArg, a[j]) >= 0 {
					if j == len(a)-1 {
						i++
					}
					break
				}
			}
		}
	}
	return p
}

// has reports any of the short letters or a long option of which the one
// given is an abbreviation.
func (p parsed) has(short string, long ...string) bool {
	if short != "" && strings.ContainsAny(p.short, short) {
		return true
	}
	for _, n := range p.long {
		for _, l := range long {
			if n != "" && strings.HasPrefix(l, n) {
				return true
			}
		}
	}
	return false
}

// date sets the clock with -s/--set or a positional MMDDhhmm argument.
func dateCheck(args []string, _ int) (cards.Risk, string) {
	// -I takes an optional attached value (-Iseconds) whose letters are
	// not options.
	var kept []string
	for i, a := range args {
		if a == "--" {
			kept = append(kept, args[i:]...)
			break
		}
		if k := strings.IndexByte(a, 'I'); k > 0 && a[0] == '-' && !strings.HasPrefix(a, "--") {
			if a = a[:k]; a == "-" {
				continue
			}
		}
		kept = append(kept, a)
	}
	p := parseArgs(kept, "dfrs", []string{"date", "file", "reference", "set", "iso-8601", "rfc-3339"})
	if p.has("s", "set") {
		return cards.RiskHigh, "sets-clock"
	}
	for _, a := range p.pos {
		if !strings.HasPrefix(a, "+") {
			return cards.RiskHigh, "sets-clock"
		}
	}
	return cards.RiskLow, "read-only"
}

// hostname sets the host name with a positional argument, -F/--file or
// -b/--boot.
func hostnameCheck(args []string, _ int) (cards.Risk, string) {
	p := parseArgs(args, "F", []string{"file"})
	if len(p.pos) > 0 || p.has("Fb", "file", "boot") {
		return cards.RiskHigh, "sets-hostname"
	}
	return cards.RiskLow, "read-only"
}

// sort writes a file with -o/--output, writes temporary files into the
// directory of -T/--temporary-directory and runs a program with
// --compress-program.
func sortCheck(args []string, _ int) (cards.Risk, string) {
	p := parseArgs(args, "kotTS", []string{"key", "output", "field-separator", "temporary-directory", "buffer-size",
		"compress-program", "files0-from", "parallel", "random-source", "batch-size", "sort"})
	if p.has("", "compress-program") {
		return cards.RiskHigh, "runs-program"
	}
	if p.has("oT", "output", "temporary-directory") {
		return cards.RiskMedium, "writes-file"
	}
	return cards.RiskLow, "read-only"
}

// uniq IN OUT writes OUT.
func uniqCheck(args []string, _ int) (cards.Risk, string) {
	p := parseArgs(args, "fsw", []string{"skip-fields", "skip-chars", "check-chars"})
	if len(p.pos) > 1 {
		return cards.RiskMedium, "writes-file"
	}
	return cards.RiskLow, "read-only"
}

// find deletes (-delete), writes (-fprint…) and runs commands (-exec…).
func findCheck(args []string, depth int) (cards.Risk, string) {
	cmds, writes := findExecs(args)
	r, step := cards.RiskLow, "read-only"
	if writes {
		r, step = cards.RiskMedium, "writes-file"
	}
	for _, c := range cmds {
		ir, _ := classify(c, depth+1)
		if len(c) == 0 || c[0] == "{}" {
			ir = cards.RiskHigh // runs the files it finds
		}
		r, step = maxRisk(r, maxRisk(ir, cards.RiskMedium)), "runs-commands"
	}
	return r, step
}

// file -C compiles a magic file into the current directory.
func fileCheck(args []string, _ int) (cards.Risk, string) {
	p := parseArgs(args, "eFfmP", []string{"exclude", "exclude-quiet", "separator", "files-from", "magic-file", "parameter"})
	if p.has("C", "compile") {
		return cards.RiskMedium, "writes-file"
	}
	return cards.RiskLow, "read-only"
}

// dmesg clears the kernel log or changes the console level with some
// options.
func dmesgCheck(args []string, _ int) (cards.Risk, string) {
	p := parseArgs(args, "fFlns", []string{"facility", "file", "level", "console-level", "buffer-size", "time-format", "since", "until"})
	if p.has("cCDEn", "clear", "read-clear", "console-off", "console-on", "console-level") {
		return cards.RiskHigh, "changes-kernel-log"
	}
	return cards.RiskLow, "read-only"
}

// man, apropos and whatis read the manual, and their arguments are page
// names or keywords, never commands: `man shutdown` explains shutdown.
// (Unknown, they had every later argument read as a command, and
// `man shutdown` was refused as stopping the host.) A few options run
// programs: a pager or a browser (man -P/--pager, -H/--html; the pager is
// also checked as a script, see scriptOpts) and whatever a config file
// DEFINEs (-C/--config-file).
func manCheck(args []string, _ int) (cards.Risk, string) {
	p := parseArgs(args, "CMPSsemprLER", []string{"config-file", "manpath", "pager", "sections", "section", "extension",
		"systems", "preprocessor", "prompt", "locale", "encoding", "recode"})
	if p.has("CPH", "config-file", "pager", "html") {
		return cards.RiskHigh, "runs-program"
	}
	return cards.RiskLow, "read-only"
}

// systemctlReadVerbs only show state.
var systemctlReadVerbs = set("status", "show", "cat", "list-units", "list-unit-files", "list-timers", "list-sockets",
	"list-dependencies", "list-jobs", "list-automounts", "list-paths", "is-active", "is-enabled", "is-failed",
	"is-system-running", "get-default", "help")

// systemctl is low only for verbs that show state (and no -H/-M: another
// host or container).
func systemctlCheck(args []string, _ int) (cards.Risk, string) {
	p := parseArgs(args, "tpPHMnos", []string{"type", "property", "host", "machine", "lines", "output", "signal",
		"state", "job-mode", "root", "kill-whom", "kill-value", "what", "timestamp", "image", "preset-mode", "message",
		"drop-in", "when", "boot-loader-menu", "boot-loader-entry", "reboot-argument", "image-policy", "legend"})
	if p.has("HM", "host", "machine") {
		return cards.RiskHigh, "changes-services"
	}
	if len(p.pos) == 0 || systemctlReadVerbs[p.pos[0]] {
		return cards.RiskLow, "read-only"
	}
	return cards.RiskHigh, "changes-services"
}
