//go:build !linux

package memtrim

// Executable does nothing where there is no /proc/self/smaps.
func Executable() (int64, error) { return 0, nil }

// ExecutableUncached does nothing where there is no /proc/self/smaps.
func ExecutableUncached() (int64, error) { return 0, nil }
