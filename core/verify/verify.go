package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// DefaultTimeout bounds a check's Run command when TimeoutSeconds is 0.
const DefaultTimeout = 60 * time.Second

// MaxTimeoutSeconds is the largest TimeoutSeconds Validate accepts.
const MaxTimeoutSeconds = 600

// maxOutput is how many characters of stdout a Result keeps.
const maxOutput = 1000

// maxNameLen bounds Check.Name, which is shown on approval cards.
const maxNameLen = 100

// ErrTimeout is what a CommandRunner returns (possibly wrapped) when the
// verification command exceeded its timeout. An error satisfying
// errors.Is(err, context.DeadlineExceeded) is treated the same way.
var ErrTimeout = errors.New("verify: verification command timed out")

// CommandRunner runs a verification command in a separate sandbox instance
// (the caller adapts the real sandbox to this). verify must not import core.
//
// RunCheck must run argv directly (no shell) with dir as its work directory,
// kill it when timeout passes, and then return an error wrapping ErrTimeout
// (or context.DeadlineExceeded). A command that ran and exited non-zero is a
// result, not an error. The ctx passed in also carries the timeout as its
// deadline; a command still running when it expires is treated as timed out
// even if RunCheck reports no error.
type CommandRunner interface {
	RunCheck(ctx context.Context, argv []string, dir string, timeout time.Duration) (exitCode int, stdout []byte, err error)
}

// Evidence is the execution's recorded result.
type Evidence struct {
	ExitCode int
	Stdout   []byte
	TimedOut bool
	Dir      string // the execution's work directory
}

// Result is the outcome of one check.
type Result struct {
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
	// Reason says what held, or for a failed check what did not, as one
	// human phrase per predicate joined with "; ".
	Reason string `json:"reason"`
	// Output is the stdout the check looked at, truncated to 1000
	// characters and made valid UTF-8.
	Output string `json:"output,omitempty"`
	// ExitCode is the exit code the check looked at: the verification
	// command's for a check with Run, otherwise the execution's.
	ExitCode int `json:"exit_code"`
}

// Report is the outcome of a verification run. Only a Report with AllPassed
// marks work done.
type Report struct {
	AllPassed bool      `json:"all_passed"`
	Results   []Result  `json:"results"`
	At        time.Time `json:"at"`
}

// Summary is one human line for a chat card, e.g. "exit code 0 ✓" or
// "exit code 2 ✗ (expected 0)"; several checks joined with "; ".
//
// A check named "exit code" shows the exit code it saw; any other check
// shows its name. A failed check adds its reason in parentheses.
func (r Report) Summary() string {
	if len(r.Results) == 0 {
		return "no verification checks"
	}
	parts := make([]string, len(r.Results))
	for i, res := range r.Results {
		parts[i] = res.line(i)
	}
	return strings.Join(parts, "; ")
}

const exitCodeName = "exit code"

func (res Result) line(i int) string {
	label := res.Name
	if label == "" {
		label = fmt.Sprintf("check %d", i+1)
	}
	reason := res.Reason
	if label == exitCodeName {
		// "exit code 2 ✗ (expected 0)" reads better than the full reason,
		// but only when the exit code is what was judged: after a timeout
		// or a runner failure the number means nothing.
		switch {
		case res.Passed:
			label = fmt.Sprintf("exit code %d", res.ExitCode)
		case strings.HasPrefix(reason, "expected exit code "):
			label = fmt.Sprintf("exit code %d", res.ExitCode)
			first, rest, _ := strings.Cut(reason, "; ")
			first = strings.TrimPrefix(first, "expected exit code ")
			first = strings.TrimSuffix(first, fmt.Sprintf(", got %d", res.ExitCode))
			reason = "expected " + first
			if rest != "" {
				reason += "; " + rest
			}
		}
	}
	if res.Passed {
		return label + " ✓"
	}
	return label + " ✗ (" + reason + ")"
}

// Runner evaluates verification checks. It runs outside the executor's
// sandbox.
type Runner struct {
	Commands    CommandRunner    // may be nil: checks with Run then fail with a clear reason
	AllowedDirs []string         // file_exists paths must resolve inside one of these (in addition to Evidence.Dir)
	Now         func() time.Time // injected clock; nil = time.Now
}

// Run evaluates every check against the evidence and returns the report.
// Checks are independent: one failing does not stop the others.
//
// Run with zero checks returns AllPassed false, an empty Results and the
// summary "no verification checks": only verification marks work done, so
// work with nothing to verify is not done. Actions that want the usual
// default should carry ExitCodeZero explicitly.
//
// When the execution timed out (ev.TimedOut), every check that judges the
// execution's own result (exit code or stdout; that is, a check without Run)
// fails with the reason "execution timed out", because the exit code and
// the partial output of a killed program prove nothing. file_exists and
// checks with no expectation are still evaluated.
func (r *Runner) Run(ctx context.Context, checks []Check, ev Evidence) Report {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	rep := Report{Results: make([]Result, 0, len(checks))}
	allPassed := len(checks) > 0
	for _, c := range checks {
		res := r.runOne(ctx, c, ev)
		if !res.Passed {
			allPassed = false
		}
		rep.Results = append(rep.Results, res)
	}
	rep.AllPassed = allPassed
	rep.At = now()
	return rep
}

func (r *Runner) runOne(ctx context.Context, c Check, ev Evidence) Result {
	res := Result{Name: c.Name, ExitCode: ev.ExitCode}
	if res.Name == "" || validateName(c.Name) != nil {
		// An invalid name is not echoed onto a card.
		res.Name = c.Expect.defaultName()
	}
	fail := func(reason string) Result {
		res.Passed = false
		res.Reason = reason
		return res
	}
	if err := c.Validate(); err != nil {
		return fail("invalid check: " + err.Error())
	}

	exitCode, stdout := ev.ExitCode, ev.Stdout
	if len(c.Run) > 0 {
		timeout := DefaultTimeout
		if c.TimeoutSeconds > 0 {
			timeout = time.Duration(c.TimeoutSeconds) * time.Second
		}
		if r.Commands == nil {
			return fail("no verification sandbox configured to run " + strconv.Quote(c.Run[0]))
		}
		code, out, err := r.runCommand(ctx, c.Run, ev.Dir, timeout)
		res.ExitCode = code
		res.Output = clip(out)
		if err != nil {
			return fail(err.Error())
		}
		exitCode, stdout = code, out
	} else {
		res.Output = clip(ev.Stdout)
		if ev.TimedOut && c.Expect.judgesResult() {
			return fail("execution timed out")
		}
	}

	passed, reason := r.evaluate(c.Expect, exitCode, stdout, ev.Dir)
	res.Passed = passed
	res.Reason = reason
	return res
}

// runCommand runs argv with the timeout, turning every way of running out of
// time into "timeout after Ns".
func (r *Runner) runCommand(ctx context.Context, argv []string, dir string, timeout time.Duration) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return -1, nil, fmt.Errorf("verification canceled: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The runner gets its own copy of argv: the check is part of a hashed
	// action and must not change.
	code, out, err := r.Commands.RunCheck(cctx, append([]string(nil), argv...), dir, timeout)
	timedOut := errors.Is(err, ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(cctx.Err(), context.DeadlineExceeded)
	if perr := ctx.Err(); perr != nil {
		// The caller gave up (canceled, or its own deadline passed); say so
		// rather than blaming the command.
		return code, out, fmt.Errorf("verification canceled: %v", perr)
	}
	if timedOut {
		return code, out, fmt.Errorf("timeout after %s", formatSeconds(timeout))
	}
	if err != nil {
		return code, out, fmt.Errorf("verification command could not run: %v", err)
	}
	return code, out, nil
}

func formatSeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// evaluate applies every set predicate; all must hold.
func (r *Runner) evaluate(e Expect, exitCode int, stdout []byte, dir string) (bool, string) {
	var held, failed []string
	check := func(ok bool, okReason, failReason string) {
		if ok {
			held = append(held, okReason)
		} else {
			failed = append(failed, failReason)
		}
	}
	out := string(stdout)

	if e.ExitCode != nil {
		check(exitCode == *e.ExitCode,
			fmt.Sprintf("exit code %d", exitCode),
			fmt.Sprintf("expected exit code %d, got %d", *e.ExitCode, exitCode))
	}
	if e.Equals != nil {
		check(equalsOutput(out, *e.Equals),
			"stdout equals expected",
			"stdout does not equal "+quote(*e.Equals))
	}
	if e.Contains != nil {
		check(strings.Contains(out, *e.Contains),
			"stdout contains "+quote(*e.Contains),
			"stdout does not contain "+quote(*e.Contains))
	}
	if e.Regex != nil {
		re, err := regexp.Compile(*e.Regex)
		if err != nil {
			// Validate already rejects this; never panic regardless.
			failed = append(failed, "invalid regex: "+err.Error())
		} else {
			check(re.MatchString(out),
				"stdout matches "+quote(*e.Regex),
				"stdout does not match "+quote(*e.Regex))
		}
	}
	if e.OutputLT != nil || e.OutputGT != nil {
		v, err := parseNumber(out)
		if err != nil {
			failed = append(failed, err.Error())
		} else {
			if e.OutputLT != nil {
				lim := formatFloat(*e.OutputLT)
				check(v < *e.OutputLT,
					fmt.Sprintf("output %s < %s", formatFloat(v), lim),
					fmt.Sprintf("expected output < %s, got %s", lim, formatFloat(v)))
			}
			if e.OutputGT != nil {
				lim := formatFloat(*e.OutputGT)
				check(v > *e.OutputGT,
					fmt.Sprintf("output %s > %s", formatFloat(v), lim),
					fmt.Sprintf("expected output > %s, got %s", lim, formatFloat(v)))
			}
		}
	}
	if e.FileExists != nil {
		if err := r.fileExists(*e.FileExists, dir); err != nil {
			failed = append(failed, err.Error())
		} else {
			held = append(held, "file exists: "+quote(*e.FileExists))
		}
	}
	if e.NotEmpty {
		check(strings.TrimSpace(out) != "", "stdout not empty", "stdout is empty")
	}

	if len(failed) > 0 {
		return false, strings.Join(failed, "; ")
	}
	if len(held) == 0 {
		return true, "no expectation"
	}
	return true, strings.Join(held, "; ")
}

// equalsOutput compares stdout with the expected string exactly, except that
// stdout with exactly one trailing "\n" removed also matches: programs end
// their output with a newline and people do not type it. Only one "\n" is
// forgiven, and only on stdout's side: "hi\n\n" does not equal "hi", and "hi"
// does not equal "hi\n".
func equalsOutput(stdout, want string) bool {
	return stdout == want || strings.TrimSuffix(stdout, "\n") == want && strings.HasSuffix(stdout, "\n")
}

func parseNumber(out string) (float64, error) {
	s := strings.TrimSpace(out)
	if s == "" {
		return 0, errors.New("stdout is not a number (empty)")
	}
	// Decimal only: strconv also reads hex floats, "inf" and "nan", none of
	// which a check author means by a number.
	if strings.ContainsAny(s, "xXpP_") {
		return 0, fmt.Errorf("stdout is not a number: %s", quote(s))
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("stdout is not a number: %s", quote(s))
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("stdout is not a finite number: %s", quote(s))
	}
	return v, nil
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// fileExists reports nil when path, taken relative to dir unless absolute,
// exists and resolves (after symlinks) inside dir or one of AllowedDirs.
func (r *Runner) fileExists(path, dir string) error {
	q := quote(path)
	if err := checkPath(path); err != nil {
		return fmt.Errorf("file %s: %v", q, err)
	}
	var bases []string
	if dir != "" {
		if b, err := resolveDir(dir); err == nil {
			bases = append(bases, b)
		}
	}
	for _, a := range r.AllowedDirs {
		if a == "" {
			continue
		}
		if b, err := resolveDir(a); err == nil {
			bases = append(bases, b)
		}
	}
	if !filepath.IsAbs(path) {
		if dir == "" {
			return fmt.Errorf("file %s: no work directory to resolve it in", q)
		}
		path = filepath.Join(dir, path)
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("file %s: cannot resolve", q)
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("file %s not found", q)
		}
		return fmt.Errorf("file %s: cannot resolve", q)
	}
	for _, b := range bases {
		if within(b, resolved) {
			return nil
		}
	}
	return fmt.Errorf("file %s resolves outside the allowed directories", q)
}

func resolveDir(d string) (string, error) {
	abs, err := filepath.Abs(d)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// within reports whether p is base or below it. Both are clean absolute
// paths with symlinks resolved.
func within(base, p string) bool {
	rel, err := filepath.Rel(base, p)
	if err != nil || filepath.IsAbs(rel) {
		return false
	}
	return rel == "." || rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// checkPath rejects file_exists paths that are empty, contain NUL, or have a
// ".." element. ".." is refused outright rather than cleaned away, so the
// path the approver read is the path that is checked.
func checkPath(p string) error {
	if p == "" {
		return errors.New("empty path")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return errors.New("path contains NUL")
	}
	for _, el := range strings.Split(filepath.ToSlash(p), "/") {
		if el == ".." {
			return errors.New(`path must not contain ".."`)
		}
	}
	return nil
}

// clip makes stdout safe to keep in a Result: valid UTF-8, at most maxOutput
// characters.
func clip(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if utf8.RuneCountInString(s) <= maxOutput {
		return s
	}
	n := 0
	for i := range s {
		if n == maxOutput-1 {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// quote renders a value for a reason string, bounded so a long expectation
// does not flood a card.
func quote(s string) string {
	const max = 80
	if utf8.RuneCountInString(s) > max {
		r := []rune(s)
		s = string(r[:max]) + "…"
	}
	return strconv.Quote(s)
}

// judgesResult reports whether the expectation looks at the execution's exit
// code or stdout.
func (e Expect) judgesResult() bool {
	return e.ExitCode != nil || e.Equals != nil || e.Contains != nil || e.Regex != nil ||
		e.OutputLT != nil || e.OutputGT != nil || e.NotEmpty
}

// defaultName names an unnamed check after its predicates.
func (e Expect) defaultName() string {
	var n []string
	if e.ExitCode != nil {
		n = append(n, exitCodeName)
	}
	if e.Equals != nil {
		n = append(n, "stdout equals")
	}
	if e.Contains != nil {
		n = append(n, "stdout contains")
	}
	if e.Regex != nil {
		n = append(n, "stdout matches")
	}
	if e.OutputLT != nil {
		n = append(n, "output < "+formatFloat(*e.OutputLT))
	}
	if e.OutputGT != nil {
		n = append(n, "output > "+formatFloat(*e.OutputGT))
	}
	if e.FileExists != nil {
		n = append(n, "file "+quote(*e.FileExists))
	}
	if e.NotEmpty {
		n = append(n, "stdout not empty")
	}
	if len(n) == 0 {
		return "check"
	}
	name := strings.Join(n, ", ")
	if utf8.RuneCountInString(name) > maxNameLen {
		name = string([]rune(name)[:maxNameLen-1]) + "…"
	}
	return name
}

// Validate reports whether the check is well formed. It is used when parsing
// actions, so a check that could never be evaluated is refused before anyone
// approves it. Runner.Run also calls it and fails invalid checks.
//
// Rules: Name at most 100 characters without control characters; Run, if
// non-empty, has a non-empty argv[0] and no NUL bytes (later arguments may be
// empty); TimeoutSeconds is 0..600 and only set together with Run; contains
// and regex are non-empty (an empty one always matches); regex compiles
// (Go RE2 syntax); output_lt/output_gt are finite; file_exists is non-empty,
// without NUL and without ".." elements. More than one predicate may be set;
// all must hold.
func (c Check) Validate() error {
	if err := validateName(c.Name); err != nil {
		return err
	}
	if len(c.Run) > 0 {
		if c.Run[0] == "" {
			return errors.New("run: empty program name")
		}
		for i, a := range c.Run {
			if strings.IndexByte(a, 0) >= 0 {
				return fmt.Errorf("run: argument %d contains NUL", i)
			}
		}
	}
	if c.TimeoutSeconds < 0 || c.TimeoutSeconds > MaxTimeoutSeconds {
		return fmt.Errorf("timeout_seconds %d outside 0..%d", c.TimeoutSeconds, MaxTimeoutSeconds)
	}
	if c.TimeoutSeconds != 0 && len(c.Run) == 0 {
		return errors.New("timeout_seconds set without run")
	}
	e := c.Expect
	if e.Contains != nil && *e.Contains == "" {
		return errors.New("contains: empty string always matches")
	}
	if e.Regex != nil {
		if *e.Regex == "" {
			return errors.New("regex: empty pattern always matches")
		}
		if _, err := regexp.Compile(*e.Regex); err != nil {
			return fmt.Errorf("invalid regex: %v", err)
		}
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"output_lt", e.OutputLT}, {"output_gt", e.OutputGT}} {
		if f.v != nil && (math.IsNaN(*f.v) || math.IsInf(*f.v, 0)) {
			return fmt.Errorf("%s: not a finite number", f.name)
		}
	}
	if e.FileExists != nil {
		if err := checkPath(*e.FileExists); err != nil {
			return fmt.Errorf("file_exists: %v", err)
		}
	}
	return nil
}

func validateName(name string) error {
	if utf8.RuneCountInString(name) > maxNameLen {
		return fmt.Errorf("name longer than %d characters", maxNameLen)
	}
	if !utf8.ValidString(name) {
		return errors.New("name is not valid UTF-8")
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return errors.New("name contains a control character")
		}
	}
	return nil
}
