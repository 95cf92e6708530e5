package verify

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func intp(i int) *int                   { return &i }
func strp(s string) *string             { return &s }
func floatp(f float64) *float64         { return &f }
func exitIs(code int) Expect            { return Expect{ExitCode: intp(code)} }
func check(name string, e Expect) Check { return Check{Name: name, Expect: e} }

var fixedNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeRunner is a CommandRunner that returns canned results and records
// calls.
type fakeRunner struct {
	code  int
	out   string
	err   error
	block bool // wait for ctx to end, like a command that hangs
	calls []fakeCall
	// deadline: the runner's context had one (block fails at once
	// without it instead of hanging the test).
	deadline time.Duration
}

type fakeCall struct {
	argv    []string
	dir     string
	timeout time.Duration
}

func (f *fakeRunner) RunCheck(ctx context.Context, argv []string, dir string, timeout time.Duration) (int, []byte, error) {
	f.calls = append(f.calls, fakeCall{argv: argv, dir: dir, timeout: timeout})
	if f.block {
		dl, ok := ctx.Deadline()
		if !ok {
			return -1, nil, errors.New("fakeRunner: no deadline on a check that would hang")
		}
		f.deadline = time.Until(dl)
		<-ctx.Done()
		return -1, []byte(f.out), nil
	}
	return f.code, []byte(f.out), f.err
}

// workDir makes a work directory with some files, a subdirectory, and
// symlinks pointing inside and outside it. It returns the work directory and
// a directory outside it.
func workDir(t *testing.T) (dir, outside string) {
	t.Helper()
	root := t.TempDir()
	dir = filepath.Join(root, "work")
	outside = filepath.Join(root, "outside")
	for _, d := range []string{dir, outside, filepath.Join(dir, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{
		filepath.Join(dir, "out.txt"),
		filepath.Join(dir, "sub", "inner.txt"),
		filepath.Join(outside, "secret.txt"),
	} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		filepath.Join(dir, "link-in"):      filepath.Join(dir, "out.txt"),
		filepath.Join(dir, "link-rel"):     "sub/inner.txt",
		filepath.Join(dir, "link-out"):     filepath.Join(outside, "secret.txt"),
		filepath.Join(dir, "link-out-rel"): "../outside/secret.txt",
		filepath.Join(dir, "link-outdir"):  outside,
		filepath.Join(dir, "dangling"):     filepath.Join(dir, "nope"),
	}
	for name, target := range links {
		if err := os.Symlink(target, name); err != nil {
			t.Skipf("symlinks unavailable: %v", err)
		}
	}
	return dir, outside
}

func TestRunChecks(t *testing.T) {
	dir, outside := workDir(t)
	allowed := filepath.Join(filepath.Dir(dir), "allowed")
	if err := os.MkdirAll(allowed, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(allowed, "ok.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name       string
		check      Check
		ev         Evidence
		runner     *fakeRunner
		allowed    []string
		wantPassed bool
		wantReason string // substring of Reason
		wantCode   int
		wantOutput string
	}{
		// exit_code
		{name: "exit code pass", check: ExitCodeZero(), ev: Evidence{ExitCode: 0}, wantPassed: true, wantReason: "exit code 0"},
		{name: "exit code fail", check: ExitCodeZero(), ev: Evidence{ExitCode: 2}, wantReason: "expected exit code 0, got 2", wantCode: 2},
		{name: "exit code nonzero expected", check: check("", exitIs(3)), ev: Evidence{ExitCode: 3}, wantPassed: true, wantCode: 3},
		{name: "exit code execution timed out", check: ExitCodeZero(), ev: Evidence{ExitCode: 0, TimedOut: true}, wantReason: "execution timed out"},

		// equals
		{name: "equals exact", check: check("", Expect{Equals: strp("hello")}), ev: Evidence{Stdout: []byte("hello")}, wantPassed: true, wantOutput: "hello"},
		{name: "equals one trailing newline forgiven", check: check("", Expect{Equals: strp("hello")}), ev: Evidence{Stdout: []byte("hello\n")}, wantPassed: true},
		{name: "equals expected newline exact", check: check("", Expect{Equals: strp("hello\n")}), ev: Evidence{Stdout: []byte("hello\n")}, wantPassed: true},
		{name: "equals two newlines fail", check: check("", Expect{Equals: strp("hello")}), ev: Evidence{Stdout: []byte("hello\n\n")}, wantReason: `stdout does not equal "hello"`},
		{name: "equals missing newline fail", check: check("", Expect{Equals: strp("hello\n")}), ev: Evidence{Stdout: []byte("hello")}},
		{name: "equals CRLF fail", check: check("", Expect{Equals: strp("hello")}), ev: Evidence{Stdout: []byte("hello\r\n")}},
		{name: "equals leading space fail", check: check("", Expect{Equals: strp("hello")}), ev: Evidence{Stdout: []byte(" hello")}},
		{name: "equals empty", check: check("", Expect{Equals: strp("")}), ev: Evidence{Stdout: nil}, wantPassed: true},
		{name: "equals empty with newline", check: check("", Expect{Equals: strp("")}), ev: Evidence{Stdout: []byte("\n")}, wantPassed: true},
		{name: "equals different", check: check("", Expect{Equals: strp("hello")}), ev: Evidence{Stdout: []byte("goodbye\n")}},

		// contains
		{name: "contains pass", check: check("greeting", Expect{Contains: strp("world")}), ev: Evidence{Stdout: []byte("hello world\n")}, wantPassed: true, wantReason: `stdout contains "world"`},
		{name: "contains fail", check: check("greeting", Expect{Contains: strp("mars")}), ev: Evidence{Stdout: []byte("hello world\n")}, wantReason: `stdout does not contain "mars"`},
		{name: "contains case sensitive", check: check("", Expect{Contains: strp("World")}), ev: Evidence{Stdout: []byte("hello world")}},

		// regex
		{name: "regex pass", check: check("", Expect{Regex: strp(`^\d+ tests? passed$`)}), ev: Evidence{Stdout: []byte("12 tests passed")}, wantPassed: true},
		{name: "regex search not anchored", check: check("", Expect{Regex: strp(`ok\b`)}), ev: Evidence{Stdout: []byte("PASS\nok  pkg 0.1s\n")}, wantPassed: true},
		{name: "regex multiline flag", check: check("", Expect{Regex: strp(`(?m)^ok`)}), ev: Evidence{Stdout: []byte("PASS\nok\n")}, wantPassed: true},
		{name: "regex fail", check: check("", Expect{Regex: strp(`^FAIL`)}), ev: Evidence{Stdout: []byte("PASS")}, wantReason: "stdout does not match"},
		{name: "invalid regex", check: check("", Expect{Regex: strp(`(unclosed`)}), ev: Evidence{Stdout: []byte("(unclosed")}, wantReason: "invalid regex"},
		{name: "invalid regex backreference", check: check("", Expect{Regex: strp(`(a)\1`)}), ev: Evidence{Stdout: []byte("aa")}, wantReason: "invalid regex"},

		// output_lt / output_gt
		{name: "output lt pass", check: check("", Expect{OutputLT: floatp(5)}), ev: Evidence{Stdout: []byte(" 4.5\n")}, wantPassed: true, wantReason: "output 4.5 < 5"},
		{name: "output lt fail", check: check("", Expect{OutputLT: floatp(5)}), ev: Evidence{Stdout: []byte("7\n")}, wantReason: "expected output < 5, got 7"},
		{name: "output lt equal fails", check: check("", Expect{OutputLT: floatp(5)}), ev: Evidence{Stdout: []byte("5")}},
		{name: "output gt pass", check: check("", Expect{OutputGT: floatp(-1)}), ev: Evidence{Stdout: []byte("0\n")}, wantPassed: true},
		{name: "output gt exponent", check: check("", Expect{OutputGT: floatp(1000)}), ev: Evidence{Stdout: []byte("1e4")}, wantPassed: true},
		{name: "output gt fail", check: check("", Expect{OutputGT: floatp(10)}), ev: Evidence{Stdout: []byte("9.99")}, wantReason: "expected output > 10, got 9.99"},
		{name: "output range pass", check: check("", Expect{OutputGT: floatp(1), OutputLT: floatp(3)}), ev: Evidence{Stdout: []byte("2")}, wantPassed: true},
		{name: "output range fail", check: check("", Expect{OutputGT: floatp(1), OutputLT: floatp(3)}), ev: Evidence{Stdout: []byte("3")}, wantReason: "expected output < 3"},
		{name: "output unparsable", check: check("", Expect{OutputLT: floatp(5)}), ev: Evidence{Stdout: []byte("four\n")}, wantReason: "not a number"},
		{name: "output empty", check: check("", Expect{OutputGT: floatp(-5)}), ev: Evidence{Stdout: []byte("  \n")}, wantReason: "not a number"},
		{name: "output two numbers", check: check("", Expect{OutputLT: floatp(5)}), ev: Evidence{Stdout: []byte("1 2")}, wantReason: "not a number"},
		{name: "output NaN", check: check("", Expect{OutputLT: floatp(5)}), ev: Evidence{Stdout: []byte("NaN")}, wantReason: "not a finite number"},
		{name: "output Inf", check: check("", Expect{OutputGT: floatp(5)}), ev: Evidence{Stdout: []byte("+Inf")}, wantReason: "not a finite number"},
		{name: "output overflow", check: check("", Expect{OutputGT: floatp(5)}), ev: Evidence{Stdout: []byte("1e400")}, wantReason: "not a finite number"},
		{name: "output hex rejected", check: check("", Expect{OutputGT: floatp(5)}), ev: Evidence{Stdout: []byte("0x10")}, wantReason: "not a number"},

		// not_empty
		{name: "not empty pass", check: check("", Expect{NotEmpty: true}), ev: Evidence{Stdout: []byte("x")}, wantPassed: true},
		{name: "not empty whitespace fails", check: check("", Expect{NotEmpty: true}), ev: Evidence{Stdout: []byte(" \n\t")}, wantReason: "stdout is empty"},
		{name: "not empty nil fails", check: check("", Expect{NotEmpty: true}), ev: Evidence{}, wantReason: "stdout is empty"},

		// file_exists
		{name: "file relative", check: check("", Expect{FileExists: strp("out.txt")}), ev: Evidence{Dir: dir}, wantPassed: true, wantReason: "file exists"},
		{name: "file in subdir", check: check("", Expect{FileExists: strp("sub/inner.txt")}), ev: Evidence{Dir: dir}, wantPassed: true},
		{name: "file dot slash", check: check("", Expect{FileExists: strp("./out.txt")}), ev: Evidence{Dir: dir}, wantPassed: true},
		{name: "directory", check: check("", Expect{FileExists: strp("sub")}), ev: Evidence{Dir: dir}, wantPassed: true},
		{name: "file absolute inside", check: check("", Expect{FileExists: strp(filepath.Join(dir, "out.txt"))}), ev: Evidence{Dir: dir}, wantPassed: true},
		{name: "file missing", check: check("", Expect{FileExists: strp("missing.txt")}), ev: Evidence{Dir: dir}, wantReason: `file "missing.txt" not found`},
		{name: "symlink inside", check: check("", Expect{FileExists: strp("link-in")}), ev: Evidence{Dir: dir}, wantPassed: true},
		{name: "relative symlink inside", check: check("", Expect{FileExists: strp("link-rel")}), ev: Evidence{Dir: dir}, wantPassed: true},
		{name: "symlink escape absolute", check: check("", Expect{FileExists: strp("link-out")}), ev: Evidence{Dir: dir}, wantReason: "outside the allowed directories"},
		{name: "symlink escape relative", check: check("", Expect{FileExists: strp("link-out-rel")}), ev: Evidence{Dir: dir}, wantReason: "outside the allowed directories"},
		{name: "symlinked directory escape", check: check("", Expect{FileExists: strp("link-outdir/secret.txt")}), ev: Evidence{Dir: dir}, wantReason: "outside the allowed directories"},
		{name: "dangling symlink", check: check("", Expect{FileExists: strp("dangling")}), ev: Evidence{Dir: dir}, wantReason: "not found"},
		{name: "dotdot escape", check: check("", Expect{FileExists: strp("../outside/secret.txt")}), ev: Evidence{Dir: dir}, wantReason: `".."`},
		{name: "dotdot staying inside", check: check("", Expect{FileExists: strp("sub/../out.txt")}), ev: Evidence{Dir: dir}, wantReason: `".."`},
		{name: "absolute outside", check: check("", Expect{FileExists: strp(filepath.Join(outside, "secret.txt"))}), ev: Evidence{Dir: dir}, wantReason: "outside the allowed directories"},
		{name: "absolute in allowed dir", check: check("", Expect{FileExists: strp(filepath.Join(allowed, "ok.txt"))}), ev: Evidence{Dir: dir}, allowed: []string{allowed}, wantPassed: true},
		{name: "symlink into allowed dir", check: check("", Expect{FileExists: strp("link-out")}), ev: Evidence{Dir: dir}, allowed: []string{outside}, wantPassed: true},
		{name: "relative without work dir", check: check("", Expect{FileExists: strp("out.txt")}), ev: Evidence{}, wantReason: "no work directory"},
		{name: "file checked after execution timeout", check: check("", Expect{FileExists: strp("out.txt")}), ev: Evidence{Dir: dir, TimedOut: true}, wantPassed: true},
		{name: "file with NUL", check: check("", Expect{FileExists: strp("out\x00.txt")}), ev: Evidence{Dir: dir}, wantReason: "NUL"},

		// no expectation, multiple predicates
		{name: "no expectation", check: check("anything", Expect{}), ev: Evidence{ExitCode: 9}, wantPassed: true, wantReason: "no expectation", wantCode: 9},
		{name: "all predicates hold", check: check("", Expect{ExitCode: intp(0), Contains: strp("done"), NotEmpty: true, FileExists: strp("out.txt")}), ev: Evidence{Stdout: []byte("done\n"), Dir: dir}, wantPassed: true},
		{name: "one of several fails", check: check("", Expect{ExitCode: intp(0), Contains: strp("done")}), ev: Evidence{ExitCode: 0, Stdout: []byte("failed\n")}, wantReason: `stdout does not contain "done"`},
		{name: "two of several fail", check: check("", Expect{ExitCode: intp(0), Contains: strp("done")}), ev: Evidence{ExitCode: 1, Stdout: []byte("failed\n")}, wantReason: `expected exit code 0, got 1; stdout does not contain "done"`, wantCode: 1},
		{name: "stdout check after execution timeout", check: check("", Expect{Contains: strp("done")}), ev: Evidence{Stdout: []byte("done"), TimedOut: true}, wantReason: "execution timed out"},

		// Run
		{name: "run pass", check: Check{Name: "tests", Run: []string{"go", "test", "./..."}, Expect: exitIs(0)},
			ev: Evidence{ExitCode: 5, Dir: dir}, runner: &fakeRunner{code: 0, out: "ok\n"}, wantPassed: true, wantOutput: "ok\n"},
		{name: "run judged on its own exit code", check: Check{Run: []string{"false"}, Expect: exitIs(0)},
			ev: Evidence{ExitCode: 0, Dir: dir}, runner: &fakeRunner{code: 1}, wantReason: "expected exit code 0, got 1", wantCode: 1},
		{name: "run judged on its own stdout", check: Check{Run: []string{"cat", "out.txt"}, Expect: Expect{Equals: strp("x")}},
			ev: Evidence{Stdout: []byte("not x"), Dir: dir}, runner: &fakeRunner{out: "x"}, wantPassed: true},
		{name: "run unaffected by execution timeout", check: Check{Run: []string{"true"}, Expect: exitIs(0)},
			ev: Evidence{TimedOut: true, ExitCode: -1, Dir: dir}, runner: &fakeRunner{}, wantPassed: true},
		{name: "run timeout reported by runner", check: Check{Run: []string{"sleep", "100"}, TimeoutSeconds: 5, Expect: exitIs(0)},
			ev: Evidence{Dir: dir}, runner: &fakeRunner{code: -1, err: ErrTimeout}, wantReason: "timeout after 5s", wantCode: -1},
		{name: "run timeout as deadline exceeded", check: Check{Run: []string{"sleep", "100"}, Expect: exitIs(0)},
			ev: Evidence{Dir: dir}, runner: &fakeRunner{code: -1, err: context.DeadlineExceeded}, wantReason: "timeout after 60s", wantCode: -1},
		{name: "run timeout wrapped", check: Check{Run: []string{"sleep", "100"}, TimeoutSeconds: 1, Expect: exitIs(0)},
			ev: Evidence{Dir: dir}, runner: &fakeRunner{code: -1, err: errors.Join(errors.New("killed"), ErrTimeout)}, wantReason: "timeout after 1s", wantCode: -1},
		{name: "run error", check: Check{Run: []string{"nope"}, Expect: exitIs(0)},
			ev: Evidence{Dir: dir}, runner: &fakeRunner{code: -1, err: errors.New("exec: not found")}, wantReason: "could not run: exec: not found", wantCode: -1},
		{name: "run without command runner", check: Check{Run: []string{"true"}, Expect: exitIs(0)},
			ev: Evidence{Dir: dir}, wantReason: "no verification sandbox configured"},
		{name: "run no expectation", check: Check{Run: []string{"true"}},
			ev: Evidence{Dir: dir}, runner: &fakeRunner{code: 3}, wantPassed: true, wantReason: "no expectation", wantCode: 3},

		// invalid checks
		{name: "invalid timeout", check: Check{Run: []string{"true"}, TimeoutSeconds: 601, Expect: exitIs(0)},
			ev: Evidence{Dir: dir}, runner: &fakeRunner{}, wantReason: "invalid check: timeout_seconds 601"},
		{name: "invalid empty argv0", check: Check{Run: []string{"", "x"}, Expect: exitIs(0)},
			ev: Evidence{Dir: dir}, runner: &fakeRunner{}, wantReason: "invalid check: run: empty program name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Runner{AllowedDirs: tt.allowed, Now: func() time.Time { return fixedNow }}
			if tt.runner != nil {
				r.Commands = tt.runner
			}
			rep := r.Run(context.Background(), []Check{tt.check}, tt.ev)
			if len(rep.Results) != 1 {
				t.Fatalf("got %d results, want 1", len(rep.Results))
			}
			res := rep.Results[0]
			if res.Passed != tt.wantPassed || rep.AllPassed != tt.wantPassed {
				t.Fatalf("passed = %v (all %v), want %v; reason %q", res.Passed, rep.AllPassed, tt.wantPassed, res.Reason)
			}
			if !strings.Contains(res.Reason, tt.wantReason) {
				t.Fatalf("reason %q does not contain %q", res.Reason, tt.wantReason)
			}
			if res.Reason == "" {
				t.Fatal("empty reason")
			}
			if res.ExitCode != tt.wantCode {
				t.Fatalf("exit code %d, want %d", res.ExitCode, tt.wantCode)
			}
			if tt.wantOutput != "" && res.Output != tt.wantOutput {
				t.Fatalf("output %q, want %q", res.Output, tt.wantOutput)
			}
			if res.Name == "" {
				t.Fatal("empty result name")
			}
			if !rep.At.Equal(fixedNow) {
				t.Fatalf("At = %v, want injected clock", rep.At)
			}
			if tt.runner != nil && len(tt.check.Run) > 0 && !strings.HasPrefix(res.Reason, "invalid check") {
				if len(tt.runner.calls) != 1 {
					t.Fatalf("runner called %d times, want 1", len(tt.runner.calls))
				}
				call := tt.runner.calls[0]
				if !reflect.DeepEqual(call.argv, tt.check.Run) || call.dir != tt.ev.Dir {
					t.Fatalf("runner got argv %q dir %q", call.argv, call.dir)
				}
				want := DefaultTimeout
				if tt.check.TimeoutSeconds > 0 {
					want = time.Duration(tt.check.TimeoutSeconds) * time.Second
				}
				if call.timeout != want {
					t.Fatalf("runner timeout %v, want %v", call.timeout, want)
				}
			}
			if tt.runner != nil && strings.HasPrefix(res.Reason, "invalid check") && len(tt.runner.calls) != 0 {
				t.Fatal("invalid check was run")
			}
		})
	}
}

// TestRunTimeoutEnforced checks that a runner ignoring its timeout is still
// stopped by the context deadline and reported as a timeout. What is
// checked is the deadline the runner was given, not how long Run took.
func TestRunTimeoutEnforced(t *testing.T) {
	fr := &fakeRunner{block: true, out: "partial"}
	r := &Runner{Commands: fr}
	rep := r.Run(context.Background(), []Check{{Name: "slow", Run: []string{"sleep", "9"}, TimeoutSeconds: 1, Expect: exitIs(0)}}, Evidence{})
	if fr.deadline <= 0 || fr.deadline > time.Second {
		t.Fatalf("the check's context had %v left when the runner started; want at most its 1 s timeout", fr.deadline)
	}
	if rep.AllPassed || rep.Results[0].Reason != "timeout after 1s" {
		t.Fatalf("got %+v", rep)
	}
	if got := rep.Summary(); got != "slow ✗ (timeout after 1s)" {
		t.Fatalf("summary %q", got)
	}
}

func TestRunCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fr := &fakeRunner{}
	r := &Runner{Commands: fr}
	rep := r.Run(ctx, []Check{{Run: []string{"true"}, Expect: exitIs(0)}, ExitCodeZero()}, Evidence{})
	if rep.AllPassed {
		t.Fatal("canceled run passed")
	}
	if !strings.Contains(rep.Results[0].Reason, "canceled") || len(fr.calls) != 0 {
		t.Fatalf("got %+v, calls %d", rep.Results[0], len(fr.calls))
	}
	// Checks on recorded evidence need no context and are still evaluated.
	if !rep.Results[1].Passed {
		t.Fatalf("evidence check: %+v", rep.Results[1])
	}
}

func TestRunDoesNotShareArgv(t *testing.T) {
	mut := runnerFunc(func(ctx context.Context, argv []string, dir string, timeout time.Duration) (int, []byte, error) {
		argv[0] = "rm"
		return 0, nil, nil
	})
	c := Check{Run: []string{"true"}, Expect: exitIs(0)}
	(&Runner{Commands: mut}).Run(context.Background(), []Check{c}, Evidence{})
	if c.Run[0] != "true" {
		t.Fatal("runner modified the check's argv")
	}
}

type runnerFunc func(ctx context.Context, argv []string, dir string, timeout time.Duration) (int, []byte, error)

func (f runnerFunc) RunCheck(ctx context.Context, argv []string, dir string, timeout time.Duration) (int, []byte, error) {
	return f(ctx, argv, dir, timeout)
}

func TestRunRelativeWorkDir(t *testing.T) {
	dir, _ := workDir(t)
	t.Chdir(filepath.Dir(dir))
	rep := (&Runner{}).Run(context.Background(), []Check{{Expect: Expect{FileExists: strp("out.txt")}}}, Evidence{Dir: "work"})
	if !rep.AllPassed {
		t.Fatalf("relative work dir: %+v", rep.Results)
	}
	rep = (&Runner{}).Run(context.Background(), []Check{{Expect: Expect{FileExists: strp("link-out")}}}, Evidence{Dir: "work"})
	if rep.AllPassed {
		t.Fatal("symlink escape passed with relative work dir")
	}
}

func TestInvalidNameNotEchoed(t *testing.T) {
	rep := (&Runner{}).Run(context.Background(), []Check{{Name: "x\n✓ all good", Expect: exitIs(0)}}, Evidence{})
	res := rep.Results[0]
	if res.Passed || res.Name != "exit code" || !strings.Contains(res.Reason, "control character") {
		t.Fatalf("got %+v", res)
	}
}

func TestRunZeroChecks(t *testing.T) {
	for _, checks := range [][]Check{nil, {}} {
		rep := (&Runner{}).Run(context.Background(), checks, Evidence{ExitCode: 0})
		if rep.AllPassed {
			t.Fatal("zero checks must not pass")
		}
		if rep.Results == nil || len(rep.Results) != 0 {
			t.Fatalf("results %#v, want empty non-nil", rep.Results)
		}
		if got := rep.Summary(); got != "no verification checks" {
			t.Fatalf("summary %q", got)
		}
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"results":[]`) {
			t.Fatalf("json %s", b)
		}
	}
	if rep := (&Runner{}).Run(context.Background(), nil, Evidence{}); rep.At.IsZero() {
		t.Fatal("nil clock not defaulted")
	}
}

func TestRunMultipleChecks(t *testing.T) {
	dir, _ := workDir(t)
	fr := &fakeRunner{code: 0, out: "3\n"}
	r := &Runner{Commands: fr, Now: func() time.Time { return fixedNow }}
	checks := []Check{
		ExitCodeZero(),
		{Name: "greeting", Expect: Expect{Contains: strp("hello")}},
		{Name: "count", Run: []string{"wc", "-l"}, Expect: Expect{OutputLT: floatp(10)}},
		{Expect: Expect{FileExists: strp("out.txt")}},
	}
	ev := Evidence{ExitCode: 0, Stdout: []byte("hello\n"), Dir: dir}
	rep := r.Run(context.Background(), checks, ev)
	if !rep.AllPassed || len(rep.Results) != 4 {
		t.Fatalf("got %+v", rep)
	}
	if got, want := rep.Summary(), `exit code 0 ✓; greeting ✓; count ✓; file "out.txt" ✓`; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}

	// One failure makes the report fail; the others are still evaluated.
	ev.Stdout = []byte("bye\n")
	ev.ExitCode = 2
	rep = r.Run(context.Background(), checks, ev)
	if rep.AllPassed {
		t.Fatal("report passed with failures")
	}
	var passed []bool
	for _, res := range rep.Results {
		passed = append(passed, res.Passed)
	}
	if !reflect.DeepEqual(passed, []bool{false, false, true, true}) {
		t.Fatalf("passed %v", passed)
	}
	if got, want := rep.Summary(), `exit code 2 ✗ (expected 0); greeting ✗ (stdout does not contain "hello"); count ✓; file "out.txt" ✓`; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
}

func TestSummary(t *testing.T) {
	tests := []struct {
		name    string
		results []Result
		want    string
	}{
		{name: "none", results: nil, want: "no verification checks"},
		{name: "exit code pass", results: []Result{{Name: "exit code", Passed: true, Reason: "exit code 0"}}, want: "exit code 0 ✓"},
		{name: "exit code fail", results: []Result{{Name: "exit code", Reason: "expected exit code 0, got 2", ExitCode: 2}}, want: "exit code 2 ✗ (expected 0)"},
		{name: "exit code and more fail", results: []Result{{Name: "exit code", Reason: `expected exit code 0, got 1; stdout does not contain "ok"`, ExitCode: 1}}, want: `exit code 1 ✗ (expected 0; stdout does not contain "ok")`},
		{name: "exit code timed out", results: []Result{{Name: "exit code", Reason: "execution timed out", ExitCode: -1}}, want: "exit code ✗ (execution timed out)"},
		{name: "named pass", results: []Result{{Name: "greeting", Passed: true, Reason: `stdout contains "hi"`}}, want: "greeting ✓"},
		{name: "named fail", results: []Result{{Name: "greeting", Reason: `stdout does not contain "hi"`}}, want: `greeting ✗ (stdout does not contain "hi")`},
		{name: "unnamed", results: []Result{{Passed: true}, {Reason: "x"}}, want: "check 1 ✓; check 2 ✗ (x)"},
		{name: "several", results: []Result{
			{Name: "exit code", Passed: true, Reason: "exit code 0"},
			{Name: "tests", Reason: "timeout after 60s"},
		}, want: "exit code 0 ✓; tests ✗ (timeout after 60s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (Report{Results: tt.results}).Summary(); got != tt.want {
				t.Fatalf("Summary() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestResultOutputTruncated(t *testing.T) {
	long := strings.Repeat("é", 3000) + "\xff"
	rep := (&Runner{}).Run(context.Background(), []Check{{Expect: Expect{NotEmpty: true}}}, Evidence{Stdout: []byte(long)})
	out := rep.Results[0].Output
	if n := utf8.RuneCountInString(out); n != 1000 {
		t.Fatalf("output has %d characters, want 1000", n)
	}
	if !utf8.ValidString(out) || !strings.HasSuffix(out, "…") {
		t.Fatalf("output not valid or not marked truncated")
	}
	short := (&Runner{}).Run(context.Background(), []Check{{Expect: Expect{NotEmpty: true}}}, Evidence{Stdout: []byte("ok\xff")})
	if got := short.Results[0].Output; got != "ok\uFFFD" {
		t.Fatalf("output %q", got)
	}
}

func TestReportJSON(t *testing.T) {
	rep := Report{AllPassed: true, Results: []Result{{Name: "exit code", Passed: true, Reason: "exit code 0"}}, At: fixedNow}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"all_passed":true,"results":[{"name":"exit code","passed":true,"reason":"exit code 0","exit_code":0}],"at":"2026-01-02T03:04:05Z"}`
	if string(b) != want {
		t.Fatalf("got %s\nwant %s", b, want)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		check   Check
		wantErr string // empty: valid
	}{
		{name: "default", check: ExitCodeZero()},
		{name: "no expectation", check: Check{}},
		{name: "everything", check: Check{Name: "all", Run: []string{"sh", "-c", ""}, TimeoutSeconds: 600, Expect: Expect{
			ExitCode: intp(0), Equals: strp(""), Contains: strp("a"), Regex: strp("a+"), OutputLT: floatp(1), OutputGT: floatp(0),
			FileExists: strp("dir/file"), NotEmpty: true,
		}}},
		{name: "absolute file", check: check("", Expect{FileExists: strp("/srv/out/report.txt")})},
		{name: "file named like dots", check: check("", Expect{FileExists: strp("..hidden/...")})},
		{name: "empty run treated as none", check: Check{Run: []string{}}},
		{name: "invalid regex", check: check("", Expect{Regex: strp("a(")}), wantErr: "invalid regex"},
		{name: "empty regex", check: check("", Expect{Regex: strp("")}), wantErr: "regex: empty"},
		{name: "empty contains", check: check("", Expect{Contains: strp("")}), wantErr: "contains: empty"},
		{name: "empty argv0", check: Check{Run: []string{""}}, wantErr: "empty program name"},
		{name: "NUL in argv", check: Check{Run: []string{"echo", "a\x00b"}}, wantErr: "contains NUL"},
		{name: "negative timeout", check: Check{Run: []string{"true"}, TimeoutSeconds: -1}, wantErr: "timeout_seconds -1"},
		{name: "timeout too large", check: Check{Run: []string{"true"}, TimeoutSeconds: 601}, wantErr: "outside 0..600"},
		{name: "timeout without run", check: Check{TimeoutSeconds: 5}, wantErr: "without run"},
		{name: "NaN bound", check: check("", Expect{OutputLT: floatp(math.NaN())}), wantErr: "output_lt: not a finite"},
		{name: "Inf bound", check: check("", Expect{OutputGT: floatp(math.Inf(1))}), wantErr: "output_gt: not a finite"},
		{name: "empty file", check: check("", Expect{FileExists: strp("")}), wantErr: "file_exists: empty path"},
		{name: "dotdot file", check: check("", Expect{FileExists: strp("a/../../etc/passwd")}), wantErr: `file_exists: path must not contain ".."`},
		{name: "bare dotdot", check: check("", Expect{FileExists: strp("..")}), wantErr: `".."`},
		{name: "NUL file", check: check("", Expect{FileExists: strp("a\x00")}), wantErr: "NUL"},
		{name: "long name", check: check(strings.Repeat("n", 101), Expect{}), wantErr: "name longer"},
		{name: "control char name", check: check("ok\n✓ approved", Expect{}), wantErr: "control character"},
		{name: "invalid UTF-8 name", check: check("a\xff", Expect{}), wantErr: "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestCheckJSON pins the wire form of Check, which is covered by action
// hashes.
func TestCheckJSON(t *testing.T) {
	b, err := json.Marshal([]Check{ExitCodeZero(), {Run: []string{"test", "-f", "x"}, TimeoutSeconds: 5, Expect: Expect{NotEmpty: true}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"name":"exit code","expect":{"exit_code":0}},{"run":["test","-f","x"],"timeout_seconds":5,"expect":{"not_empty":true}}]`
	if string(b) != want {
		t.Fatalf("got %s\nwant %s", b, want)
	}
}
