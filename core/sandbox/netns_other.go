//go:build !linux

package sandbox

// NetworkAvailable always reports why nothing runs on this platform.
func (s *Subprocess) NetworkAvailable() error { return errNotLinux }
