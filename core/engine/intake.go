package engine

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/redact"
	"github.com/silas-gateway/silas/core/store"
)

var _ core.Quarantiner = (*Engine)(nil)

// sealTapHandle seals t's tap handle for its tap before the turn is
// stored: the stored turn and the answer job copied from it (answerTap)
// then hold only the sealed form, and the outbox lane opens it just before
// AnswerTap. Validation (core.MaxTapHandle) saw the plain handle.
func (e *Engine) sealTapHandle(t *core.Turn) error {
	sealed, err := e.handles.Seal(t.TapHandle, string(t.Conversation), t.EventID)
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	t.TapHandle = sealed
	return nil
}

// maxDeadLetterError bounds the error text kept with a dead letter.
const maxDeadLetterError = 1000

// Quarantine implements core.Quarantiner: it keeps an inbound event an
// adapter gives up on in the dead-letter table, with an intake.quarantined
// audit entry in the same transaction. The entry names the event and the
// error only; the payload (which may hold anything a stranger sent) stays
// in the table.
func (e *Engine) Quarantine(ctx context.Context, d core.DeadLetter) error {
	d.EventID, _ = core.StorableText(d.EventID)
	d.Error, _ = core.StorableText(d.Error)
	d.Error, _ = redact.Redact(d.Error) // an error may quote what it refused
	if r := []rune(d.Error); len(r) > maxDeadLetterError {
		d.Error = string(r[:maxDeadLetterError]) + "…"
	}
	if len(d.EventID) > 200 {
		d.EventID = d.EventID[:200]
		d.EventID, _ = core.StorableText(d.EventID)
	}
	var id int64
	err := e.st.Do(ctx, func(ctx context.Context, tx *store.Tx) ([]auditEntry, error) {
		var err error
		if id, err = tx.InsertDeadLetter(ctx, d); err != nil {
			return nil, err
		}
		return []auditEntry{{Kind: audit.KindIntakeQuarantined, Actor: "silas", Data: map[string]any{
			"dead_letter": id, "channel": string(d.Channel), "event_id": d.EventID, "attempts": d.Attempts, "error": d.Error,
		}}}, nil
	})
	if err != nil {
		return fmt.Errorf("engine: quarantine %s/%s: %w", d.Channel, d.EventID, err)
	}
	e.log.Warn("inbound event quarantined", slog.String("channel", string(d.Channel)), slog.String("event_id", d.EventID),
		slog.Int64("dead_letter", id), slog.Int("attempts", d.Attempts), slog.String("err", d.Error))
	return nil
}

// redactIntake removes what looks like a credential from inbound text
// before it is stored or shown to anyone, and notes which kinds.
func redactIntake(t *core.Turn) {
	t.Redacted = nil
	if t.Text == "" {
		return
	}
	clean, findings := redact.Redact(t.Text)
	if len(findings) == 0 {
		return
	}
	t.Text = clean
	seen := map[string]bool{}
	for _, f := range findings {
		k := string(f.Kind)
		if !seen[k] {
			seen[k] = true
			t.Redacted = append(t.Redacted, k)
		}
	}
}
