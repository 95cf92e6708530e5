// Package kit is what every channel adapter needs and no adapter should
// write twice: an outbound rate limiter that serves waiters in arrival
// order, splitting long text on line boundaries (with progress kept so a
// retried send does not repeat parts) and a janitor for that progress,
// backoff, "file:" secret reading, mapping of
// platform failures onto the outbox's error types, and the text fallback
// that turns "approve <id>" (or "1" quoting a card) into a core.Tap.
//
// kit knows no platform: adapters pass their own measures (how a rune
// counts towards a message length, which chats are groups) and their own
// limits.
package kit
