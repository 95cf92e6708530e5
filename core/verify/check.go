// Package verify is the verification runner: it decides whether executed
// work is done by checking evidence (exit code, output, files) with checks
// the approver saw on the card. It runs outside the executor's sandbox, and
// nothing the agent or the executed program says can mark work done.
//
// verify never imports core; core depends on it.
package verify

// Check is one verification check. It is part of the approved action, so it
// is covered by the action hash and cannot change after approval.
//
// Without Run, the expectation applies to the execution's own recorded result
// (its exit code and stdout). With Run, the argv is executed in a separate
// verification sandbox whose work directory is the execution's work
// directory, and the expectation applies to that command's result.
type Check struct {
	// Name is a short label shown in results ("exit code", "greeting").
	Name string `json:"name,omitempty"`
	// Run is an optional argv for a verification command.
	Run []string `json:"run,omitempty"`
	// TimeoutSeconds bounds Run (default 60).
	TimeoutSeconds int    `json:"timeout_seconds,omitempty"`
	Expect         Expect `json:"expect"`
}

// Expect is the predicate. Usually one field is set; when several are, all
// must hold. With none set the check passes with the reason "no expectation".
type Expect struct {
	ExitCode *int    `json:"exit_code,omitempty"`
	Equals   *string `json:"equals,omitempty"`
	Contains *string `json:"contains,omitempty"`
	Regex    *string `json:"regex,omitempty"`
	// OutputLT / OutputGT parse trimmed stdout as a float and compare.
	OutputLT *float64 `json:"output_lt,omitempty"`
	OutputGT *float64 `json:"output_gt,omitempty"`
	// FileExists is a path relative to the work directory; it must resolve
	// (after symlinks) inside the allowed directories.
	FileExists *string `json:"file_exists,omitempty"`
	NotEmpty   bool    `json:"not_empty,omitempty"`
}

// ExitCodeZero is the default check for /run.
func ExitCodeZero() Check {
	zero := 0
	return Check{Name: "exit code", Expect: Expect{ExitCode: &zero}}
}
