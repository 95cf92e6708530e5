package core

import (
	"context"
	"errors"
)

// ErrNotCurrent is a send's check refusing it: this process may no longer
// deliver the message (its heartbeat lapsed — a pause, a partition — so
// another instance may have taken the conversation over and sent it).
// The message is not sent and stays pending for whoever delivers the
// conversation now; it is not a delivery failure.
var ErrNotCurrent = errors.New("this instance's claim on the conversation lapsed; not sent")

type sendCheckKey struct{}

// WithSendCheck returns ctx carrying check, which the adapters run as
// the last step before a platform call (kit.Limiter.Wait, after its
// pacing waits): the outbox checks that its claim on the conversation
// still holds when it hands a job over, but a wait for the platform's
// rate limits comes between, and a process paused there would otherwise
// send with a stale claim the moment it wakes.
func WithSendCheck(ctx context.Context, check func() error) context.Context {
	return context.WithValue(ctx, sendCheckKey{}, check)
}

// CheckSend runs ctx's send check (WithSendCheck); nil when it has none.
func CheckSend(ctx context.Context) error {
	if check, ok := ctx.Value(sendCheckKey{}).(func() error); ok && check != nil {
		return check()
	}
	return nil
}
