package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silas-gateway/silas/core"
)

// AccessRequest asks an owner whether an unknown sender may talk to Silas.
type AccessRequest struct {
	ID                string
	Channel           core.ChannelName
	Identity          core.IdentityID
	Name              string
	Conversation      core.ConversationID
	Code              string
	OwnerConversation core.ConversationID
	Status            core.AccessStatus
	CreatedAt         time.Time
	DecidedBy         core.IdentityID
}

const accessSelect = `SELECT id, channel, identity, name, conversation, code, owner_conversation, status, created_at, COALESCE(decided_by, '') FROM access_requests`

func scanAccess(row pgx.Row) (AccessRequest, error) {
	var r AccessRequest
	err := row.Scan(&r.ID, &r.Channel, &r.Identity, &r.Name, &r.Conversation, &r.Code, &r.OwnerConversation, &r.Status, &r.CreatedAt, &r.DecidedBy)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, core.ErrNotFound
	}
	if err != nil {
		return r, fmt.Errorf("store: access request: %w", err)
	}
	return r, nil
}

// OpenAccessRequest returns the identity's pending request, locked.
func (t *Tx) OpenAccessRequest(ctx context.Context, id core.IdentityID) (AccessRequest, error) {
	return scanAccess(t.queryRow(ctx, accessSelect+` WHERE identity = $1 AND status = 'pending' FOR UPDATE`, id))
}

// GetAccessRequest reads a request by id, locked.
func (t *Tx) GetAccessRequest(ctx context.Context, id string) (AccessRequest, error) {
	return scanAccess(t.queryRow(ctx, accessSelect+` WHERE id = $1 FOR UPDATE`, id))
}

// InsertAccessRequest stores a new pending request.
func (t *Tx) InsertAccessRequest(ctx context.Context, r AccessRequest) error {
	_, err := t.exec(ctx, `INSERT INTO access_requests (id, channel, identity, name, conversation, code, owner_conversation, status, created_at)
		VALUES ($1,$2,$3,$4,$5,$6,$7,'pending',$8)`, r.ID, r.Channel, r.Identity, r.Name, r.Conversation, r.Code, r.OwnerConversation, t.now())
	if err != nil {
		return fmt.Errorf("store: insert access request: %w", err)
	}
	return nil
}

// DecideAccessRequest moves a pending request to allowed or denied
// (compare-and-swap; ok=false means it was already decided).
func (t *Tx) DecideAccessRequest(ctx context.Context, id string, status core.AccessStatus, by core.IdentityID) (bool, error) {
	tag, err := t.exec(ctx, `UPDATE access_requests SET status = $2, decided_by = $3, decided_at = $4 WHERE id = $1 AND status = 'pending'`,
		id, status, by, t.now())
	if err != nil {
		return false, fmt.Errorf("store: decide access request: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}
