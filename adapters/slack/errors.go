package slack

import (
	"errors"
	"fmt"
	"time"

	"github.com/slack-go/slack"

	"github.com/silas-gateway/silas/adapters/kit"
)

// slackErr returns the Web API error code inside err ("channel_not_found"),
// or "".
func slackErr(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	var sp *slack.SlackErrorResponse
	if errors.As(err, &sp) {
		return sp.Err
	}
	return ""
}

// permanentCodes are Web API errors a retry cannot fix: the request itself
// is wrong for Slack (where it goes, what it says).
var permanentCodes = map[string]string{
	"channel_not_found":     "the channel does not exist or the bot cannot see it",
	"not_in_channel":        "the bot is not a member of the channel: invite it with /invite @Silas",
	"is_archived":           "the channel is archived",
	"msg_too_long":          "the message is too long",
	"no_text":               "the message is empty",
	"invalid_blocks":        "Slack refused the message's blocks",
	"invalid_blocks_format": "Slack refused the message's blocks",
	"too_many_attachments":  "too many attachments",
	"cant_update_message":   "the message cannot be edited by the bot",
	"cant_delete_message":   "the bot may only delete its own messages",
	"edit_window_closed":    "the message can no longer be edited",
	"user_not_in_channel":   "the user is not in the channel",
	"restricted_action":     "a workspace setting prevents the bot from posting here",
	"channel_is_archived":   "the channel is archived",
	"message_not_found":     "the message no longer exists",
	"invalid_arguments":     "Slack refused the request's arguments",
}

// authCodes are errors the operator must fix (a wrong or revoked token, a
// missing scope); retried with backoff so messages are not lost meanwhile.
var authCodes = map[string]string{
	"invalid_auth":           "slack.bot_token is wrong",
	"not_authed":             "no token was sent",
	"token_revoked":          "the bot token was revoked",
	"token_expired":          "the bot token expired",
	"account_inactive":       "the bot user was deactivated or the app uninstalled",
	"missing_scope":          "the app lacks an OAuth scope (see docs/slack.md's manifest)",
	"not_allowed_token_type": "a token of the wrong type (xoxb- in bot_token, xapp- in app_token)",
}

// mapError turns a slack-go error into what the outbox understands:
//   - HTTP 429 (*slack.RateLimitedError) or "ratelimited" →
//     *core.RateLimitedError with Slack's Retry-After;
//   - the codes in permanentCodes → *core.PermanentError;
//   - authentication and scope errors, 5xx, timeouts → a plain error,
//     retried with backoff (the operator may fix a token meanwhile).
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	err = kit.RedactURL(err)
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return kit.RateLimited(rl.RetryAfter, fmt.Errorf("slack: %s: rate limited (HTTP 429, retry after %s): %w", op, rl.RetryAfter, err))
	}
	code := slackErr(err)
	if code == "ratelimited" {
		return kit.RateLimited(time.Second, fmt.Errorf("slack: %s: ratelimited: %w", op, err))
	}
	if why, ok := permanentCodes[code]; ok {
		return kit.Permanentf("slack: %s: %s (%s): %w", op, code, why, err)
	}
	if why, ok := authCodes[code]; ok {
		return fmt.Errorf("slack: %s: %s (%s; run `silas doctor`): %w", op, code, why, err)
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) {
		return kit.ByStatus(sc.Code, time.Second, fmt.Errorf("slack: %s: %w", op, err))
	}
	return fmt.Errorf("slack: %s: %w", op, err)
}

// isAuthError reports an error the operator must fix.
func isAuthError(err error) bool {
	_, ok := authCodes[slackErr(err)]
	return ok
}
