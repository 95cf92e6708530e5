package telegram

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-telegram/bot"

	"github.com/silas-gateway/silas/adapters/kit"
)

// apiError is an error answer of the Bot API for a request the adapter made
// itself (getUpdates), shaped like the SDK's errors so one mapping serves.
type apiError struct {
	Method      string
	Code        int
	Description string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s: %d %s", e.Method, e.Code, e.Description)
}

// describe returns the lower-cased Bot API description inside err.
func describe(err error) string { return strings.ToLower(err.Error()) }

// isNotModified reports Telegram's answer to an edit that changes nothing.
func isNotModified(err error) bool {
	return errors.Is(err, bot.ErrorBadRequest) && strings.Contains(describe(err), "message is not modified")
}

// isMessageGone reports an edit or delete of a message that no longer exists
// or may no longer be edited.
func isMessageGone(err error) bool {
	if !errors.Is(err, bot.ErrorBadRequest) {
		return false
	}
	d := describe(err)
	return strings.Contains(d, "message to edit not found") || strings.Contains(d, "message can't be edited") ||
		strings.Contains(d, "message to delete not found") || strings.Contains(d, "message can't be deleted")
}

// isQueryTooOld reports answerCallbackQuery on a query Telegram no longer
// accepts answers for.
func isQueryTooOld(err error) bool {
	return errors.Is(err, bot.ErrorBadRequest) && (strings.Contains(describe(err), "query is too old") || strings.Contains(describe(err), "query id is invalid"))
}

// mapError turns an SDK error into what the outbox understands:
//   - 429 → *core.RateLimitedError with Telegram's retry_after;
//   - 400 (our request cannot succeed: chat not found, bad markup…), 403
//     (bot blocked, kicked) and a group migrated to a supergroup →
//     *core.PermanentError;
//   - anything else (5xx, timeouts, connection errors, 401/404 for a token
//     the operator may still fix) → a plain error, retried with backoff.
//
// It matches with errors.As, so wrapped SDK errors are recognised too (the
// SDK's own IsTooManyRequestsError is not).
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	err = kit.RedactURL(err)
	wrapped := fmt.Errorf("telegram: %s: %w", op, err)
	var tm *bot.TooManyRequestsError
	if errors.As(err, &tm) {
		return kit.RateLimited(kit.RetryAfterSeconds(tm.RetryAfter), wrapped)
	}
	var mig *bot.MigrateError
	if errors.As(err, &mig) {
		return kit.Permanentf("telegram: %s: the group became supergroup %d; its conversation id changed: %w", op, mig.MigrateToChatID, err)
	}
	if errors.Is(err, bot.ErrorBadRequest) || errors.Is(err, bot.ErrorForbidden) {
		return kit.Permanent(wrapped)
	}
	return wrapped
}
