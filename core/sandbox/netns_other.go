//go:build !linux

package sandbox

// NetworkAvailable always reports why nothing runs on this platform.
func (s *Subprocess) NetworkAvailable() error { return errNotLinux }

// ProbeNetwork always reports why nothing runs on this platform.
func (s *Subprocess) ProbeNetwork() error { return errNotLinux }
