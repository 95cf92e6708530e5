package core

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotFound is returned by stores when a row does not exist.
var ErrNotFound = errors.New("not found")

// ErrWithheld is returned by reads of the stored output of an action that
// received a secret before the owner tapped to show it.
var ErrWithheld = errors.New("withheld: the output of a run that received a secret is shown only after the owner's tap on its card")

// ErrNotSupported is returned when a channel lacks an optional capability.
var ErrNotSupported = errors.New("not supported by this channel")

// ErrIsolationUnavailable means the sandbox cannot provide the isolation an
// action requires. Execution fails closed: the action does not run.
var ErrIsolationUnavailable = errors.New("required isolation is not available")

// RateLimitedError is returned by a Channel when the platform asked Silas to
// slow down. The outbox waits RetryAfter and retries; nothing is dropped.
type RateLimitedError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limited, retry after %s: %v", e.RetryAfter, e.Err)
}

func (e *RateLimitedError) Unwrap() error { return e.Err }

// PermanentError marks a delivery failure that retrying cannot fix (for
// example the chat no longer exists). The outbox records it and gives up.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// RejectedError is returned by Inbox.Deliver for a turn the core refuses at
// intake (malformed, oversized, unauthenticated). Adapters answer it as a
// client error and do not retry it.
type RejectedError struct{ Reason string }

func (e *RejectedError) Error() string { return "turn rejected: " + e.Reason }
