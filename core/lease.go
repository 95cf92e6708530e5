package core

import (
	"errors"
	"time"
)

// Lease is a named lease as the store keeps it: who holds it, under which
// fencing epoch, until when (on the database's clock). Epochs of a name
// only grow: each new holder gets the next one.
type Lease struct {
	Name string
	// Holder is the instance id of the process holding it ("" when
	// released).
	Holder string
	// Epoch fences writes that depend on holding the lease: such a write
	// carries it and is refused once a newer epoch exists (ErrFenced).
	Epoch int64
	// AcquiredAt is when the current holder acquired it (its age).
	AcquiredAt time.Time
	ExpiresAt  time.Time
	// RenewedAt is the last acquisition or renewal.
	RenewedAt time.Time
	// Previous is set by an acquisition only: the holder whose expired,
	// never released holding it replaced (a takeover after a crash, a
	// pause or a partition); "" when the lease was free (released, or
	// never held).
	Previous string
}

// ErrFenced is returned for a write carrying a lease epoch older than the
// lease's current one: another process holds (or held) the lease since,
// and what this one wanted to write is no longer its to write.
var ErrFenced = errors.New("fenced: a newer holder of the lease exists")
