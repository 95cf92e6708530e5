// Package testenv decides what a test does when the machine lacks
// something it needs (a tool such as xxd or openssl, a browser): outside
// CI it skips, saying what is missing and how to get it; in CI it fails, so
// that a green CI run means the test ran. CI is told by the CI variable
// most CI systems set, or SILAS_CI=1 (.ci/run sets it).
//
// It must never make a test pass that did not run.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// EnvCI is Silas's own CI switch (CI=true works too).
const EnvCI = "SILAS_CI"

// InCI reports whether the tests run in CI, where nothing may be skipped
// for want of a tool.
func InCI() bool {
	if os.Getenv(EnvCI) == "1" {
		return true
	}
	switch os.Getenv("CI") {
	case "", "0", "false":
		return false
	}
	return true
}

// Missing fails the test in CI and skips it elsewhere, with the reason.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s (CI: %s=1 or CI is set, so this fails instead of skipping; .ci/run installs what the tests need)", msg, EnvCI)
	}
	t.Skipf("%s (skipped outside CI)", msg)
}

// Tool returns the path of a program the test needs, or calls Missing
// naming the package that provides it.
func Tool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s is not installed (Debian package %s)", name, pkg)
	}
	return p
}
