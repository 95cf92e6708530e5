//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/silas-gateway/silas/core"
)

// Subprocess is the subprocess sandbox backend. It needs Linux (process
// groups with parent-death signal, network namespaces); elsewhere New fails.
type Subprocess struct{}

var _ core.Sandbox = (*Subprocess)(nil)

var errNotLinux = fmt.Errorf("sandbox: the subprocess backend requires Linux: %w", core.ErrIsolationUnavailable)

// New fails on this platform with an error wrapping core.ErrIsolationUnavailable.
func New(cfg Config) (*Subprocess, error) {
	if cfg.BaseDir == "" {
		return nil, errors.New("sandbox: Config.BaseDir is required")
	}
	return nil, errNotLinux
}

// Run always fails on this platform.
func (s *Subprocess) Run(context.Context, core.ExecRequest) (core.ExecResult, error) {
	return core.ExecResult{}, errNotLinux
}

// Available always reports why nothing runs on this platform.
func (s *Subprocess) Available() error { return errNotLinux }

// Isolation is empty on this platform.
func (s *Subprocess) Isolation() []string { return nil }

// Close does nothing on this platform.
func (s *Subprocess) Close() error { return nil }

// Cleanup always fails on this platform.
func (s *Subprocess) Cleanup(string) error { return errNotLinux }

// BaseDir is empty on this platform.
func (s *Subprocess) BaseDir() string { return "" }

// Release always fails on this platform.
func (s *Subprocess) Release(string) error { return errNotLinux }
