package core

import (
	"context"
	"time"
)

// ChannelHealth is a channel's inbound liveness as its adapter knows it.
type ChannelHealth struct {
	// Connected is the connection state: the socket is open, the polling
	// loop is running, the webhook is registered.
	Connected bool
	// State says it in a few words ("polling", "socket open",
	// "reconnecting since 12:03").
	State string
	// LastEvent is the last sign of life from the platform: an event, a
	// poll round trip, a ping or heartbeat ACK; zero when none yet.
	LastEvent time.Time
	// Probe is what a platform probe says, when the platform has one
	// ("" when none ran): Slack's connection count, Telegram's pending
	// updates and last webhook error.
	Probe string
}

// HealthReporter is an optional capability: a channel that reports its
// inbound liveness (core/health reads it to tell the owners when a channel
// went deaf, and for /status and doctor). A channel without it is judged
// by the messages it delivered.
type HealthReporter interface {
	Health() ChannelHealth
}

// HealthProber is an optional capability: a channel whose platform can be
// asked how its delivery to us goes (Telegram's getWebhookInfo: updates
// waiting and the last delivery error). core/health calls it from its
// periodic check, before Health, so the answer is what Health reports; it
// must return within ctx and never block the check past it.
type HealthProber interface {
	ProbeHealth(ctx context.Context)
}
