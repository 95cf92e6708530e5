package kit

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/silas-gateway/silas/core"
)

// The outbox understands three kinds of delivery failure:
//   - *core.RateLimitedError: the platform asked us to slow down; wait
//     RetryAfter and retry;
//   - *core.PermanentError: our request cannot succeed (chat gone, bot
//     blocked, malformed content); record and give up;
//   - anything else: transient, retried with backoff.
//
// Adapters classify a platform's answer with these helpers so every channel
// maps the same situations the same way.

// Permanent wraps err so the outbox does not retry it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &core.PermanentError{Err: err}
}

// Permanentf is Permanent(fmt.Errorf(format, a...)).
func Permanentf(format string, a ...any) error {
	return &core.PermanentError{Err: fmt.Errorf(format, a...)}
}

// RateLimited wraps err with the platform's retry delay, never below one
// second: a 429 without a delay still asks us to slow down.
func RateLimited(retryAfter time.Duration, err error) error {
	return &core.RateLimitedError{RetryAfter: max(retryAfter, time.Second), Err: err}
}

// RetryAfterSeconds converts a platform's retry_after in whole seconds,
// never below one second.
func RetryAfterSeconds(sec int) time.Duration {
	if sec < 1 {
		sec = 1
	}
	return time.Duration(sec) * time.Second
}

// ByStatus classifies an HTTP-style answer: 429 is rate limited (after
// retryAfter), other 4xx except 401/404/408 are permanent, and everything
// else (5xx, 401 and 404 for a token or URL the operator may still fix,
// 408 timeouts) is retryable. err is returned wrapped, unchanged in text.
func ByStatus(status int, retryAfter time.Duration, err error) error {
	switch {
	case status == 429:
		return RateLimited(retryAfter, err)
	case status == 401, status == 404, status == 408:
		return err
	case status >= 400 && status < 500:
		return Permanent(err)
	}
	return err
}

// Retryable reports whether the outbox would retry err after backoff: it is
// neither permanent nor rate limited (a rate limit is retried too, but after
// the platform's delay, not ours).
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var p *core.PermanentError
	var rl *core.RateLimitedError
	return !errors.As(err, &p) && !errors.As(err, &rl)
}

// RetryAfterOf returns the delay of a *core.RateLimitedError inside err.
func RetryAfterOf(err error) (time.Duration, bool) {
	var rl *core.RateLimitedError
	if errors.As(err, &rl) {
		return rl.RetryAfter, true
	}
	return 0, false
}

// RedactURL drops the request URL from transport errors: platforms put
// tokens in URLs (Telegram's /bot<token>/), and a *url.Error prints it.
func RedactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s request failed: %w", ue.Op, ue.Err)
	}
	return err
}
