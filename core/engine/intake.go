package engine

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
	"github.com/silas-gateway/silas/core/redact"
	"github.com/silas-gateway/silas/core/store"
)

var _ core.Quarantiner = (*Engine)(nil)

// sanitizeTurn replaces what PostgreSQL cannot store (NUL, invalid UTF-8)
// in every text field of t by U+FFFD and lists the fields it changed in
// t.Sanitized, so the turn is stored (and answered) instead of failing at
// the database and being retried forever. The replacement is
// deterministic, so a redelivered event keeps its event id.
func sanitizeTurn(t *core.Turn) {
	t.Sanitized = nil
	fields := []struct {
		name string
		s    *string
	}{
		{"text", &t.Text}, {"sender_name", &t.SenderName}, {"event_id", &t.EventID},
		{"platform_message_id", &t.PlatformMessageID}, {"chat_kind", &t.ChatKind}, {"auth_method", &t.Evidence.Method},
		{"tap_handle", &t.TapHandle},
	}
	for _, f := range fields {
		if clean, changed := core.StorableText(*f.s); changed {
			*f.s = clean
			t.Sanitized = append(t.Sanitized, f.name)
		}
	}
	ids := []struct {
		name string
		s    string
		set  func(string)
	}{
		{"channel", string(t.Channel), func(v string) { t.Channel = core.ChannelName(v) }},
		{"conversation", string(t.Conversation), func(v string) { t.Conversation = core.ConversationID(v) }},
		{"sender", string(t.Sender), func(v string) { t.Sender = core.IdentityID(v) }},
	}
	for _, f := range ids {
		if clean, changed := core.StorableText(f.s); changed {
			f.set(clean)
			t.Sanitized = append(t.Sanitized, f.name)
		}
	}
	if t.Tap != nil {
		tap := *t.Tap
		card, c1 := core.StorableText(string(tap.Card))
		choice, c2 := core.StorableText(tap.Choice)
		if c1 || c2 {
			tap.Card, tap.Choice = cards.ID(card), choice
			t.Tap = &tap
			t.Sanitized = append(t.Sanitized, "tap")
		}
	}
}

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
