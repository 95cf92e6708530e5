package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/cards"
	"github.com/silas-gateway/silas/core"
)

// OutputReveal asks the owner, on a card, to show the stored output of an
// action that received a secret in one conversation (output_reveals).
type OutputReveal struct {
	Card         cards.ID
	Ref          string
	Channel      core.ChannelName
	Conversation core.ConversationID
	RequestedBy  core.IdentityID
	// Status is pending, shown or declined.
	Status string
}

// Statuses of an OutputReveal.
const (
	RevealPending  = "pending"
	RevealShown    = "shown"
	RevealDeclined = "declined"
)

// InsertOutputReveal stores a pending request (its card is sent in the
// same transaction).
func (t *Tx) InsertOutputReveal(ctx context.Context, r OutputReveal) error {
	_, err := t.exec(ctx, `INSERT INTO output_reveals (card_id, ref, channel, conversation, requested_by, status, created_at)
		VALUES ($1, $2, $3, $4, $5, 'pending', $6)`, string(r.Card), r.Ref, r.Channel, r.Conversation, r.RequestedBy, t.now())
	if err != nil {
		return fmt.Errorf("store: insert output reveal: %w", err)
	}
	return nil
}

// GetOutputReveal reads the request behind card id and locks it.
// core.ErrNotFound: the card is not one.
func (t *Tx) GetOutputReveal(ctx context.Context, id cards.ID) (OutputReveal, error) {
	var r OutputReveal
	err := t.queryRow(ctx, `SELECT card_id, ref, channel, conversation, requested_by, status FROM output_reveals
		WHERE card_id = $1 FOR UPDATE`, string(id)).Scan(&r.Card, &r.Ref, &r.Channel, &r.Conversation, &r.RequestedBy, &r.Status)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, core.ErrNotFound
	}
	if err != nil {
		return r, fmt.Errorf("store: get output reveal: %w", err)
	}
	return r, nil
}

// DecideOutputReveal moves a pending request to shown or declined
// (compare-and-swap; ok=false: it was decided already). Shown, it returns
// the stored output, read in the same statement.
func (t *Tx) DecideOutputReveal(ctx context.Context, id cards.ID, status string, by core.IdentityID) (content string, ok bool, err error) {
	if status != RevealShown && status != RevealDeclined {
		return "", false, fmt.Errorf("store: decide output reveal: bad status %q", status)
	}
	err = t.queryRow(ctx, `WITH d AS (UPDATE output_reveals SET status = $2, decided_by = $3, decided_at = $4
			WHERE card_id = $1 AND status = 'pending' RETURNING ref)
		SELECT o.content FROM d JOIN outputs o ON o.ref = d.ref`, string(id), status, by, t.now()).Scan(&content)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("store: decide output reveal: %w", err)
	}
	return content, true, nil
}
