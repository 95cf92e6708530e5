package telegram

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/silas-gateway/silas/core"
)

// Poisoned updates. An update the core cannot take — a data error
// (*core.PermanentError), or one that still fails after maxDeliverAttempts
// — is handed to the inbox's core.Quarantiner (kept raw in the dead-letter
// table, audited) and then acknowledged: polling moves its offset past it
// and the webhook answers 200, so one poisoned update never blocks the
// others. Only when quarantining itself fails (the database is down) is the
// update left unacknowledged, to be tried again.

// maxDeliverAttempts bounds how often one update is handed to the core.
const maxDeliverAttempts = 5

// deliverBackoffMin is the first wait between attempts (tests shorten it).
var deliverBackoffMin = 200 * time.Millisecond

// givesUp reports whether an update that failed with err on attempt n is
// to be quarantined now.
func givesUp(err error, n int) bool {
	var perm *core.PermanentError
	return errors.As(err, &perm) || n >= maxDeliverAttempts
}

// quarantine keeps the update; true means it may be acknowledged.
func (a *Adapter) quarantine(ctx context.Context, in core.Inbox, updateID int64, raw []byte, cause error, attempts int) bool {
	q, ok := in.(core.Quarantiner)
	if !ok {
		// Nowhere to keep it: still never retried forever.
		a.log.Error("telegram: update dropped after failed deliveries (the inbox keeps no dead letters)",
			slog.Int64("update_id", updateID), slog.Int("attempts", attempts), slog.Any("err", cause))
		return true
	}
	ev := ""
	if updateID != 0 {
		ev = eventID(updateID)
	}
	err := q.Quarantine(ctx, core.DeadLetter{Channel: a.cfg.Name, EventID: ev, Payload: raw, Error: cause.Error(), Attempts: attempts})
	if err != nil {
		a.log.Error("telegram: could not quarantine an update; it will be tried again", slog.Int64("update_id", updateID), slog.Any("err", err))
		return false
	}
	return true
}

// webhookAttempts counts failed webhook deliveries of one update (Telegram
// retries a failed webhook request with the same update).
func (a *Adapter) webhookAttempt(updateID int64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hookTries == nil || len(a.hookTries) > 10000 {
		a.hookTries = map[int64]int{} // bounded; a lost count only means more tries
	}
	a.hookTries[updateID]++
	return a.hookTries[updateID]
}

func (a *Adapter) webhookDone(updateID int64) {
	a.mu.Lock()
	delete(a.hookTries, updateID)
	a.mu.Unlock()
}
